"""Selective activation checkpointing (a context_fn from create_selective_checkpoint_contexts)
traced as a plain call (Note [Checkpoint: selective checkpointing]); values and gradients as in
eager, the cases eager treats differently (a cache entry written in place, another context_fn)
are graph breaks."""

import contextlib
import functools

import pytest
import torch
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

import kiln


def policy(ops, ctx, func, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if func in ops else CheckpointPolicy.PREFER_RECOMPUTE


def body(x):
    return torch.mm(x, x).sin().exp()


def writes_cache_entry(x):
    y = torch.mm(x, x)
    y.mul_(2)
    return y.sin()


def run(f, x, context_fn):
    """Forward and backward of f; the result, the gradient, or the exception's type."""
    x = x.detach().requires_grad_(True)
    try:
        out = f(x, context_fn)
        out.sum().backward()
    except Exception as e:  # (eager's errors are compared, not hidden)
        return type(e)
    return out, x.grad


def contexts(kind):
    ops = [torch.ops.aten.mm.default]
    if kind == "list":
        return functools.partial(create_selective_checkpoint_contexts, ops)
    if kind == "set_policy":
        return functools.partial(
            create_selective_checkpoint_contexts, functools.partial(policy, set(ops))
        )
    return functools.partial(
        create_selective_checkpoint_contexts, functools.partial(policy, frozenset(ops))
    )


@pytest.mark.parametrize("kind", ["list", "set_policy", "frozenset_policy"])
def test_selective_checkpoint_is_one_graph(kind):
    def f(x, context_fn):
        return checkpoint(body, x, use_reentrant=False, context_fn=context_fn)

    x = torch.randn(4, 4)
    expected = run(f, x, contexts(kind))
    kiln.reset()
    got = run(kiln.compile(f, backend="eager", fullgraph=True), x, contexts(kind))
    torch.testing.assert_close(got, expected)
    assert kiln.counters["stats"]["unique_graphs"] == 1


def test_selective_checkpoint_writing_in_place_breaks_and_stays_right():
    def f(x, context_fn):
        return checkpoint(writes_cache_entry, x, use_reentrant=False, context_fn=context_fn)

    x = torch.randn(4, 4)
    expected = run(f, x, contexts("list"))
    kiln.reset()
    got = run(kiln.compile(f, backend="eager"), x, contexts("list"))
    assert got == expected  # (eager's backward raises on the mutated cache entry)
    assert kiln.counters["stats"]["graph_breaks"] >= 1


def test_allow_cache_entry_mutation_writing_in_place_breaks_and_stays_right():
    def f(x, context_fn):
        return checkpoint(writes_cache_entry, x, use_reentrant=False, context_fn=context_fn)

    ctx = functools.partial(
        create_selective_checkpoint_contexts,
        [torch.ops.aten.mm.default],
        allow_cache_entry_mutation=True,
    )
    x = torch.randn(4, 4)
    expected = run(f, x, ctx)
    kiln.reset()
    got = run(kiln.compile(f, backend="eager"), x, ctx)
    torch.testing.assert_close(got, expected)  # (eager's gradient reads the written mm)
    assert kiln.counters["stats"]["graph_breaks"] >= 1


def test_other_context_fn_breaks_and_stays_right():
    calls = []

    @contextlib.contextmanager
    def noting(tag):
        calls.append(tag)
        yield

    def context_fn():
        return noting("forward"), noting("recompute")

    def f(x, context_fn):
        return checkpoint(body, x, use_reentrant=False, context_fn=context_fn)

    x = torch.randn(4, 4)
    expected = run(f, x, context_fn)
    expected_calls = list(calls)
    calls.clear()
    kiln.reset()
    got = run(kiln.compile(f, backend="eager"), x, context_fn)
    torch.testing.assert_close(got, expected)
    assert calls == expected_calls
    assert kiln.counters["stats"]["graph_breaks"] >= 1
