"""Tensor hooks and autograd.grad inside compiled code: a hook on an input is registered after
the graph (Note [Side effects: tensor hooks replayed after the graph]); a hook on an
intermediate tensor is an identity node whose backward runs it (Note [Side effects: hooks on
intermediate tensors]); handles escape (Note [Side effects: hook handles]); gradients equal eager
under eager, aot_eager and kiln."""

import functools

import pytest
import torch
from torch.utils.hooks import RemovableHandle

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
def test_hook_on_intermediate_one_graph(backend):
    stats = run(intermediate_hook, backend)
    assert stats["graph_breaks"] == 0 and stats["unique_graphs"] == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_autograd_grad_after_a_registration_breaks_first(backend):
    stats = run(hook_then_grad, backend)
    assert stats["graph_breaks"] == 1 and stats["unique_graphs"] == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_autograd_grad_inside_one_graph(backend):
    stats = run(grad_inside, backend)
    assert stats["unique_graphs"] == 1 and stats["graph_breaks"] == 0


def test_returned_handle_is_captured():
    stats = run(returns_handle, "eager")
    assert stats["graph_breaks"] == 0 and stats["unique_graphs"] == 1


def no_grad_hook(x):
    x.register_hook(triple)
    return x * 2


def test_hook_on_tensor_without_grad_raises_like_eager():
    with pytest.raises(RuntimeError) as eager:
        no_grad_hook(torch.randn(2))
    with pytest.raises(RuntimeError) as compiled:
        kiln.compile(no_grad_hook, backend="eager")(torch.randn(2))
    assert str(compiled.value) == str(eager.value)


def add_k(g, *, k):
    return g + k


def hook_before_and_after_uses(x, w):
    y = x * w
    z = y + 1  # used before the registration: its gradient goes through the hook too
    y.register_hook(lambda g: g * 2)
    y.register_hook(functools.partial(add_k, k=3.0))  # runs second
    y.register_hook(lambda g: None)  # None keeps the gradient
    return (z * y).sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_intermediate_hooks_all_uses_in_order(backend):
    stats = run(hook_before_and_after_uses, backend)
    assert stats["graph_breaks"] == 0 and stats["unique_graphs"] == 1


seen = []


def recording_hook_on_intermediate(x, w):
    y = x * w

    def hook(g):
        seen.append(g)
        return g

    y.register_hook(hook)
    return y.sum()


def test_intermediate_hook_with_side_effect_runs_at_backward():
    """A hook with a side effect is called at backward time (Note [Hooks: given at run time])."""
    x0, w0 = torch.randn(3), torch.randn(3)
    got = []
    for call in (
        recording_hook_on_intermediate,
        kiln.compile(recording_hook_on_intermediate, fullgraph=True),
    ):
        seen.clear()
        x = x0.clone().requires_grad_()
        out = call(x, w0)
        assert seen == []  # nothing runs before the backward
        out.backward()
        got.append((list(seen), x.grad))
    (eager_seen, eager_grad), (seen_c, grad_c) = got
    assert len(seen_c) == len(eager_seen) == 1
    torch.testing.assert_close(seen_c[0], eager_seen[0])
    torch.testing.assert_close(grad_c, eager_grad)
    assert kiln.counters["stats"]["graph_breaks"] == 0


def removed_in_frame(x, w):
    h = x.register_hook(triple)
    out = (x * w).sum()
    h.remove()
    h.remove()
    return out, h, h


def test_handle_removed_in_frame():
    stats = run(removed_in_frame, "eager")  # the gradients compared: the hook never ran
    assert stats["graph_breaks"] == 0
    _, h, h2 = kiln.compile(removed_in_frame, backend="eager")(
        torch.randn(3, requires_grad=True), torch.randn(3)
    )
    assert isinstance(h, RemovableHandle) and h is h2
    h.remove()  # removing an empty handle again does nothing, as in eager


class Holder:
    handle = None


def stores_handle(x, w, obj):
    obj.handle = x.register_hook(triple)
    return (x * w).sum()


def test_escaping_handle_removes_the_real_hook():
    obj = Holder()
    x, w = torch.ones(3, requires_grad=True), torch.full((3,), 2.0)
    compiled = kiln.compile(stores_handle, backend="eager", fullgraph=True)
    compiled(x, w, obj).backward()
    assert torch.equal(x.grad, torch.full((3,), 6.0))
    obj.handle.remove()  # the hook registered by the first call is gone
    x.grad = None
    compiled(x, w, Holder()).backward()  # registers again (a new hook)
    assert torch.equal(x.grad, torch.full((3,), 6.0))


class Scale:
    def __init__(self, val):
        self.val = val


SCALE = Scale(torch.tensor(5.0))


def closure_hooks_on_input(x, w):
    obj = SCALE
    y = x.sin()
    x.register_hook(lambda g: g * obj.val + y)  # closes over an argument and a graph value
    x.register_hook(functools.partial(add_k, k=2.0))
    return (y * w).sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_input_hooks_closures_and_partials(backend):
    stats = run(closure_hooks_on_input, backend)
    assert stats["graph_breaks"] == 0 and stats["unique_graphs"] == 1


def scale_own_grad(t):
    t.grad.mul_(5)


def post_hook_on_input(x, w):
    x.register_post_accumulate_grad_hook(scale_own_grad)
    return (x * w).sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_post_accumulate_grad_hook_on_input(backend):
    stats = run(post_hook_on_input, backend)  # x.grad compared: five times eager's gradient
    assert stats["graph_breaks"] == 0 and stats["unique_graphs"] == 1


def post_hook_on_intermediate(x, w):
    y = x * w
    y.register_post_accumulate_grad_hook(scale_own_grad)
    return y.sum()


def test_post_accumulate_grad_hook_on_intermediate_raises_like_eager():
    with pytest.raises(RuntimeError) as eager:
        post_hook_on_intermediate(torch.randn(2, requires_grad=True), torch.randn(2))
    with pytest.raises(RuntimeError) as compiled:
        kiln.compile(post_hook_on_intermediate, backend="eager")(
            torch.randn(2, requires_grad=True), torch.randn(2)
        )
    assert str(compiled.value) == str(eager.value)


def bad_index_hook(g):
    return g[10]  # fails only when a backward runs it


def hook_failing_in_backward(x, w):
    y = x * w
    y.register_hook(bad_index_hook)
    return y.sum()


def test_intermediate_hook_that_raises_raises_in_backward_like_eager():
    x, w = torch.randn(3, requires_grad=True), torch.randn(3)
    out = kiln.compile(hook_failing_in_backward, backend="eager")(x, w)  # no error here
    with pytest.raises(IndexError):
        out.backward()
    with pytest.raises(IndexError):
        hook_failing_in_backward(x, w).backward()
