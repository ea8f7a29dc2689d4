"""Shared helpers: a clean compiled-autograd state, log capture, and eager-vs-compiled parity."""

import contextlib
import copy
import io
import sys

import torch

import kiln.compiled_autograd as ca
from kiln import logs


@contextlib.contextmanager
def clean(channels=""):
    """Empty cache and counters; the given log channels on; yields a StringIO of the log."""
    ca.reset()
    logs.counters.clear()
    prev = set(logs._enabled)
    logs.set_logs(channels)
    buf = io.StringIO()
    old = sys.stderr
    sys.stderr = buf
    try:
        yield buf
    finally:
        sys.stderr = old
        logs._enabled.clear()
        logs._enabled.update(prev)


def ca_counters():
    return dict(logs.counters["compiled_autograd"])


def grads(model):
    return {n: (None if p.grad is None else p.grad.clone()) for n, p in model.named_parameters()}


def assert_same_grads(a, b, atol=1e-6, rtol=1e-5):
    assert a.keys() == b.keys()
    for n in a:
        if a[n] is None or b[n] is None:
            assert a[n] is None and b[n] is None, n
        else:
            torch.testing.assert_close(a[n], b[n], atol=atol, rtol=rtol, msg=n)


def parity(model, step, steps=2, compiler_fn=None, atol=1e-6, rtol=1e-5, setup=None):
    """Run `step(model)` `steps` times eagerly and under compiled autograd on a copy; compare
    every parameter's .grad after each step (grads accumulate across steps) and what step returns.
    `setup(m)` registers hooks on both models (deepcopy does not copy tensor hooks).
    """
    ref, test = model, copy.deepcopy(model)
    if setup is not None:
        setup(ref)
        setup(test)
    for _ in range(steps):
        out_ref = step(ref)
        with ca.enable(compiler_fn):
            out_test = step(test)
        assert_same_grads(grads(ref), grads(test), atol, rtol)
        for a, b in zip(_flat(out_ref), _flat(out_test)):
            if isinstance(a, torch.Tensor):
                torch.testing.assert_close(a, b, atol=atol, rtol=rtol)
            else:
                assert a == b
    return ref, test


def _flat(x):
    if x is None:
        return []
    if isinstance(x, (list, tuple)):
        return [y for v in x for y in _flat(v)]
    return [x]


def copy_model(m):
    return copy.deepcopy(m)
