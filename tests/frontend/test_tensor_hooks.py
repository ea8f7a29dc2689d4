"""Tensor hooks and autograd.grad inside compiled code: a hook on an input is registered after
the graph (Note [Side effects: tensor hooks replayed after the graph]); a hook on an
intermediate tensor breaks; gradients equal eager under eager, aot_eager and kiln."""

import pytest
import torch

import kiln

BACKENDS = ["eager", "aot_eager", "kiln"]


def triple(g):
    return g * 3


def input_hooks(x, w):
    w.register_hook(triple)
    x.register_hook(lambda g: g + 1)
    return (x * 2 * w).sum()


def intermediate_hook(x, w):
    y = x * w
    y.register_hook(triple)
    return (y * y).sum()


def hook_then_grad(x, w):
    x.register_hook(triple)
    (g,) = torch.autograd.grad((x * x * w).sum(), x)
    return g.sum() + (x * w).sum()


def grad_inside(x, w):
    (g,) = torch.autograd.grad((x.sin() * w).sum(), x)
    return (g * w).sum()


def returns_handle(x, w):
    h = x.register_hook(triple)
    return (x * w).sum(), h


def run(fn, backend):
    """Eager and compiled runs on fresh leaves; returns (stats, breaks) after comparing."""
    torch.manual_seed(0)
    x0, w0 = torch.randn(3), torch.randn(3)
    runs = []
    for call in (fn, kiln.compile(fn, backend=backend)):
        x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        out = call(x, w)
        loss = out[0] if isinstance(out, tuple) else out
        loss.backward()
        runs.append((loss.detach(), x.grad, w.grad))
    for a, b in zip(*runs):
        torch.testing.assert_close(b, a)
    return kiln.counters["stats"]


@pytest.fixture(autouse=True)
def fresh():
    kiln.reset()


@pytest.mark.parametrize("backend", BACKENDS)
def test_hooks_on_inputs_one_graph(backend):
    stats = run(input_hooks, backend)
    assert stats["unique_graphs"] == 1 and stats["graph_breaks"] == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_hook_on_intermediate_breaks_and_stays_right(backend):
    stats = run(intermediate_hook, backend)
    assert stats["graph_breaks"] == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_autograd_grad_after_a_registration_breaks_first(backend):
    stats = run(hook_then_grad, backend)
    assert stats["graph_breaks"] == 1 and stats["unique_graphs"] == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_autograd_grad_inside_one_graph(backend):
    stats = run(grad_inside, backend)
    assert stats["unique_graphs"] == 1 and stats["graph_breaks"] == 0


def test_returned_handle_runs_the_frame_in_python():
    stats = run(returns_handle, "eager")
    assert stats["graph_breaks"] == 1


def no_grad_hook(x):
    x.register_hook(triple)
    return x * 2


def test_hook_on_tensor_without_grad_raises_like_eager():
    with pytest.raises(RuntimeError) as eager:
        no_grad_hook(torch.randn(2))
    with pytest.raises(RuntimeError) as compiled:
        kiln.compile(no_grad_hook, backend="eager")(torch.randn(2))
    assert str(compiled.value) == str(eager.value)
