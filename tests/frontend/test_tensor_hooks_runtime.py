"""Hooks on tensors made in the frame that are called at backward time, as they are (Note [Hooks:
given at run time] in kiln/symbolic/hook_ops.py): closures over user objects, bound methods,
partials of objects, hooks with side effects. Outputs, gradients and what each hook saw are
compared with eager under eager, aot_eager and kiln; one graph serves every object."""

import functools
import gc

import pytest
import torch

import kiln
import kiln.compiled_autograd
from kiln.symbolic import hook_ops

BACKENDS = ["eager", "aot_eager", "kiln"]


class Box:
    def __init__(self, val):
        self.val = val
        self.calls = []

    def scale(self, grad):
        self.calls.append(grad.clone())
        return grad * self.val


def closure_hook(x, box):
    y = x.cos()
    y.register_hook(lambda g: g + box.val)
    return (y * x).sum()


def method_hook(x, box):
    y = x * 3
    y.register_hook(box.scale)
    return y.sin().sum()


def offset(grad, *, box):
    box.calls.append(len(box.calls))
    return grad - box.val


def partial_hooks_in_order(x, box):
    y = x.exp()
    z = y * 2  # a use of y before the registrations: its gradient goes through the hooks too
    y.register_hook(box.scale)
    y.register_hook(functools.partial(offset, box=box))
    y.register_hook(lambda g: None)  # None keeps the gradient
    return (z + y * y).sum()


def _run(fn, call, x0, val):
    box = Box(val)
    x = x0.clone().requires_grad_()
    out = call(x, box)
    box.val = val + 1.5  # read at backward time, in eager and compiled alike
    out.backward()
    return out.detach(), x.grad, box.calls


@pytest.fixture(autouse=True)
def fresh():
    kiln.reset()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [closure_hook, method_hook, partial_hooks_in_order])
def test_hook_runs_at_backward_like_eager(fn, backend):
    compiled = kiln.compile(fn, backend=backend, fullgraph=True)
    torch.manual_seed(0)
    x0 = torch.randn(5)
    for val in (2.0, -0.5, 3.0):  # other objects, other values: the same graph
        want = _run(fn, fn, x0, val)
        got = _run(fn, compiled, x0, val)
        torch.testing.assert_close(got[0], want[0])
        torch.testing.assert_close(got[1], want[1])
        assert len(got[2]) == len(want[2])
        for a, b in zip(got[2], want[2]):
            torch.testing.assert_close(a, b)
    stats = kiln.counters["stats"]
    assert stats["graph_breaks"] == 0 and stats["unique_graphs"] == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_call_keeps_its_own_hooks(backend):
    """Two forward calls before either backward: each backward runs its own call's hook."""
    compiled = kiln.compile(closure_hook, backend=backend, fullgraph=True)
    x0 = torch.randn(4)
    grads = {}
    for name, call in (("eager", closure_hook), ("compiled", compiled)):
        xa, xb = x0.clone().requires_grad_(), x0.clone().requires_grad_()
        out_a, out_b = call(xa, Box(1.0)), call(xb, Box(10.0))
        out_b.backward()
        out_a.backward()
        grads[name] = (xa.grad, xb.grad)
    torch.testing.assert_close(grads["compiled"], grads["eager"])
    assert not torch.equal(grads["eager"][0], grads["eager"][1])


def test_hooks_freed_with_the_autograd_graph():
    compiled = kiln.compile(closure_hook, backend="aot_eager", fullgraph=True)
    gc.collect()
    before = len(hook_ops._BOXES)
    out = compiled(torch.randn(3, requires_grad=True), Box(1.0))
    assert len(hook_ops._BOXES) == before + 1
    out.backward()
    del out
    gc.collect()
    assert len(hook_ops._BOXES) == before
    out = compiled(torch.randn(3, requires_grad=True), Box(1.0))  # no backward at all
    del out
    gc.collect()
    assert len(hook_ops._BOXES) == before


def test_compiled_autograd_one_backward_graph_for_every_object():
    compiled = kiln.compile(closure_hook, backend="aot_eager", fullgraph=True)
    backward_graphs = []

    def count(gm, example_inputs):
        backward_graphs.append(gm)
        return gm

    x0 = torch.randn(4)
    for val in (88.0, 99.0):
        want = _run(closure_hook, closure_hook, x0, val)
        with kiln.compiled_autograd.enable(functools.partial(kiln.compile, backend=count)):
            got = _run(closure_hook, compiled, x0, val)
        torch.testing.assert_close(got[1], want[1])
    assert len(backward_graphs) == 1
    assert "run_hooks" in backward_graphs[0].code


def twin_hooks(x, box):
    a = x.sin()
    b = x.sin()  # the same computation: its own hooks all the same
    a.register_hook(lambda g: box.calls.append("a") or g * 2)
    b.register_hook(lambda g: box.calls.append("b") or g * box.val)
    return (a + b * b).sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_equal_tensors_keep_their_own_hooks(backend):
    x0 = torch.randn(3)
    want = _run(twin_hooks, twin_hooks, x0, 3.0)
    got = _run(twin_hooks, kiln.compile(twin_hooks, backend=backend, fullgraph=True), x0, 3.0)
    torch.testing.assert_close(got[1], want[1])
    assert sorted(got[2]) == sorted(want[2]) == ["a", "b"]


def hook_then_break(x, box):
    y = x * 3
    y.register_hook(lambda g: box.calls.append(g.clone()) or g * 2)
    print("a graph break")  # the hook is attached after the first graph
    return y.sin().sum() + y.sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_hook_attached_before_a_graph_break(backend, capsys):
    x0 = torch.randn(3)
    want = _run(hook_then_break, hook_then_break, x0, 1.0)
    got = _run(hook_then_break, kiln.compile(hook_then_break, backend=backend), x0, 1.0)
    torch.testing.assert_close(got[1], want[1])
    assert len(got[2]) == len(want[2]) == 1
    torch.testing.assert_close(got[2][0], want[2][0])
    assert kiln.counters["stats"]["graph_breaks"] == 1


def triple(g):
    return g * 3


def traced_then_run_time(x, box):
    y = x.exp()
    y.register_hook(triple)  # traced into the graph ...
    y.register_hook(lambda g: g + box.val)  # ... until a hook that runs at backward time
    y.register_hook(lambda g: g * 0.5)
    return (y * y).sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_traced_hooks_keep_their_order_with_run_time_ones(backend):
    compiled = kiln.compile(traced_then_run_time, backend=backend, fullgraph=True)
    x0 = torch.randn(4)
    want = _run(traced_then_run_time, traced_then_run_time, x0, 2.0)
    got = _run(traced_then_run_time, compiled, x0, 2.0)
    torch.testing.assert_close(got[1], want[1])
