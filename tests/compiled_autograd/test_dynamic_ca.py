"""Compiled autograd with kiln.compile as its compiler: changed shapes compile at most twice (the
size-generic graph reads `sizes` as symbolic ints in kiln's frontend, issue #6 and #8)."""

import copy

import pytest
import torch
from ca_helpers import ca_counters, clean

import kiln
import kiln.compiled_autograd as ca
from kiln import config


@pytest.fixture(autouse=True)
def _reset():
    kiln.reset()
    yield
    kiln.reset()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_seed_shapes_10_100_10_compile_twice(backend):
    compiler = kiln.compile(backend=backend, fullgraph=True)
    with clean("compiled_autograd_verbose") as log:
        for i in [10, 100, 10, 37]:
            x = torch.randn(i, i, requires_grad=True)
            loss = x.sum()
            with ca.enable(compiler):
                loss.backward()
            torch.testing.assert_close(x.grad, torch.ones(i, i))
        counters = ca_counters()
        frames = dict(kiln.counters["frames"])
    text = log.getvalue()
    assert "Cache miss due to changed shapes: marking size idx 0 of" in text
    assert counters["compiles"] == 2 and counters["calls"] == 4
    # kiln's frontend: one graph for size 10, one symbolic graph for 100, 10 and 37
    assert frames["total"] == 2 and frames["ok"] == 2, frames
    assert kiln.counters["stats"]["recompiles"] == 0


def test_seed_shapes_through_config_compile_twice():
    prev = config.compiled_autograd
    config.compiled_autograd = True
    try:
        with clean("compiled_autograd_verbose") as log:
            for i in [10, 100, 10]:
                x = torch.randn(i, i, requires_grad=True)
                loss = x.sum()
                kiln.compile(lambda: loss.backward(), backend="eager")()  # noqa: B023 (seed form)
                torch.testing.assert_close(x.grad, torch.ones(i, i))
            counters = ca_counters()
    finally:
        config.compiled_autograd = prev
    assert "Cache miss due to changed shapes" in log.getvalue()
    assert counters["compiles"] == 2


def test_symbolic_backward_graph_of_a_linear_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    ref = copy.deepcopy(model)
    compiler = kiln.compile(backend="eager", fullgraph=True)
    with clean():
        for b in [4, 9, 4, 23]:
            x = torch.randn(b, 8)
            model(x).pow(2).sum().backward()
            with ca.enable(compiler):
                ref(x).pow(2).sum().backward()  # `ref` under compiled autograd
        frames = dict(kiln.counters["frames"])
        counters = ca_counters()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(q.grad, p.grad)
    assert counters["compiles"] == 2
    assert frames["total"] <= 2, frames


def _saved_size_fn(x, w):
    # the backward of sum(1) needs x's batch size and nothing saves x: a saved int (kiln_sizes)
    return (x.sum(1) * 2).view(-1, 2).sum(0) * w


@pytest.mark.parametrize("backend", ["aot_eager", "kiln"])
def test_symbolic_forward_backward_is_captured(backend):
    """A frame compiled with symbolic sizes: its ahead-of-time backward is inlined into the
    compiled-autograd graph (no eager fallback), grads equal eager, two compiles for all sizes."""
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    ref = copy.deepcopy(mlp)
    cmlp = kiln.compile(mlp, backend=backend, dynamic=True)
    cfn = kiln.compile(_saved_size_fn, backend=backend, dynamic=True)
    compiler = kiln.compile(backend=backend, fullgraph=True)
    w = torch.randn(2, requires_grad=True)
    with clean():
        for b in [4, 6, 10, 8, 30]:
            x = torch.randn(b, 8, requires_grad=True)
            x_ref = x.detach().clone().requires_grad_()
            w_ref = w.detach().clone().requires_grad_()
            (ref(x_ref).pow(2).sum() + _saved_size_fn(x_ref, w_ref).pow(2).sum()).backward()
            with ca.enable(compiler):
                out = cmlp(x).pow(2).sum() + cfn(x, w).pow(2).sum()
                out.backward()
            torch.testing.assert_close(x.grad, x_ref.grad)
            torch.testing.assert_close(w.grad, w_ref.grad)
            w.grad = None
        counters = ca_counters()
    for p, q in zip(ref.parameters(), mlp.parameters()):
        torch.testing.assert_close(q.grad, p.grad)
    assert counters.get("fallbacks", 0) == 0, counters
    assert counters["calls"] == 5 and counters["compiles"] == 2, counters


def test_symbolic_backward_inlined_with_saved_sizes():
    """The inlined backward reads the saved size from the graph (`aot0_` nodes compute b // 2)."""
    cfn = kiln.compile(_saved_size_fn, backend="aot_eager", dynamic=True)
    w = torch.randn(2, requires_grad=True)
    with clean("compiled_autograd") as log:
        for b in [4, 6, 12]:
            x = torch.randn(b, 3, requires_grad=True)
            out = cfn(x, w)
            assert out.grad_fn.kiln_sizes, "the symbolic plan saves the batch size as an int"
            with ca.enable(None):
                out.sum().backward()
            x_ref = x.detach().clone().requires_grad_()
            _saved_size_fn(x_ref, w.detach()).sum().backward()
            torch.testing.assert_close(x.grad, x_ref.grad)
        counters = ca_counters()
    assert "aot0_" in log.getvalue() and "floordiv" in log.getvalue()
    assert counters.get("fallbacks", 0) == 0 and counters["compiles"] == 2, counters


def test_train_step_with_mark_dynamic_under_config():
    """config.compiled_autograd: a compiled training step over varying batches (mark_dynamic)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    ref = copy.deepcopy(model)

    def train(m, x):
        loss = m(x).pow(2).mean()
        loss.backward()
        return loss.detach()

    step = kiln.compile(train, backend="aot_eager")
    prev = config.compiled_autograd
    config.compiled_autograd = True
    try:
        with clean():
            for b in [3, 5, 9, 6]:
                x = torch.randn(b, 4)
                kiln.mark_dynamic(x, 0)
                torch.testing.assert_close(step(model, x), train(ref, x))
                for p, q in zip(ref.parameters(), model.parameters()):
                    torch.testing.assert_close(q.grad, p.grad)
            counters = ca_counters()
    finally:
        config.compiled_autograd = prev
    assert counters.get("fallbacks", 0) == 0, counters
    assert counters["calls"] == 4 and counters["compiles"] <= 2, counters
