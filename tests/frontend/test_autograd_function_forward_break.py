"""A graph break inside an autograd.Function's forward: the apply call runs in Python with the
forward as its own compiled frame (Note [Autograd functions: a break inside forward]). Outputs,
gradients and grad_fn equal eager; the user's class is never changed, during the call either."""

import pytest
import torch

import kiln


class BreakInForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        y = x * k
        kiln.graph_break()
        y = y + x.sin()
        ctx.save_for_backward(x)
        ctx.k = k
        return y

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (ctx.k + x.cos()), None


class RaisesAfterBreak(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x + 1
        kiln.graph_break()
        if y.sum() > -1e9:
            raise ValueError("from forward")
        return y

    @staticmethod
    def backward(ctx, g):
        return g


class Counting:
    """A backend that counts the graphs it is given."""

    def __init__(self):
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return gm.forward


def _leaf(t):
    return t.detach().clone().requires_grad_(True)


@pytest.mark.parametrize("requires_grad", [True, False])
def test_forward_break_compiles_the_forward_and_matches_eager(requires_grad):
    forward = BreakInForward.__dict__["forward"]

    def fn(x):
        return BreakInForward.apply(x * 2, 3.0) + 1

    base = torch.randn(5)
    x_ref, x_test = _leaf(base), _leaf(base)
    if not requires_grad:
        x_ref, x_test = base.clone(), base.clone()
    ref = fn(x_ref)
    counter = Counting()
    res = kiln.compile(fn, backend=counter)(x_test)
    torch.testing.assert_close(res, ref)
    # the frame before the apply, the forward's two pieces, the frame after it
    assert counter.graphs == 4
    assert BreakInForward.__dict__["forward"] is forward
    assert res.requires_grad == ref.requires_grad
    if requires_grad:
        node, ref_node = res.grad_fn.next_functions[0][0], ref.grad_fn.next_functions[0][0]
        assert node.name() == ref_node.name() == "BreakInForwardBackward"
        ref.sum().backward()
        res.sum().backward()
        torch.testing.assert_close(x_test.grad, x_ref.grad)


def test_forward_break_through_a_module_attribute():
    class Mod(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fn = BreakInForward.apply

        def forward(self, x):
            return self.fn(x, 0.5)

    class Direct(torch.nn.Module):
        def forward(self, x):
            return BreakInForward.apply(x, 0.5)

    m = Mod()
    x_ref, x_test = _leaf(torch.randn(4)), None
    x_test = _leaf(x_ref)
    ref = m(x_ref)
    counter, direct = Counting(), Counting()
    res = kiln.compile(m, backend=counter)(x_test)
    torch.testing.assert_close(res, ref)
    ref.sum().backward()
    res.sum().backward()
    torch.testing.assert_close(x_test.grad, x_ref.grad)
    # the forward compiled as its own frames, as for `BreakInForward.apply` read directly
    kiln.compile(Direct(), backend=direct)(_leaf(x_ref))
    assert counter.graphs == direct.graphs >= 2


def test_forward_break_that_raises_restores_the_class():
    forward = RaisesAfterBreak.__dict__["forward"]
    f = kiln.compile(lambda x: RaisesAfterBreak.apply(x), backend="eager")
    with pytest.raises(ValueError, match="from forward"):
        f(torch.randn(3, requires_grad=True))
    assert RaisesAfterBreak.__dict__["forward"] is forward
    with pytest.raises(ValueError, match="from forward"):
        RaisesAfterBreak.apply(torch.randn(3, requires_grad=True))


class SeesItsClass(torch.autograd.Function):
    """Its forward records what the class holds as forward while it runs (after a break)."""

    seen = []

    @staticmethod
    def forward(ctx, x):
        y = x.cos()
        kiln.graph_break()
        SeesItsClass.seen.append(SeesItsClass.__dict__["forward"])
        SeesItsClass.seen.append(SeesItsClass.apply(y.detach()[0]) if y.dim() > 1 else None)
        return y * 2

    @staticmethod
    def backward(ctx, g):
        return -g * 2


def test_forward_break_leaves_the_class_untouched_during_the_call():
    def fn(x):
        return SeesItsClass.apply(x + 1)

    x = torch.randn(3)
    SeesItsClass.seen.clear()
    ref = fn(_leaf(x))
    eager_seen = list(SeesItsClass.seen)
    SeesItsClass.seen.clear()
    x_test = _leaf(x)
    res = kiln.compile(fn, backend="eager")(x_test)
    torch.testing.assert_close(res, ref)
    assert SeesItsClass.seen == eager_seen
    assert SeesItsClass.seen[0] is SeesItsClass.__dict__["forward"]
    res.sum().backward()
    torch.testing.assert_close(x_test.grad, torch.full((3,), -2.0))


def test_forward_break_reentrant_apply_of_the_same_class():
    def fn(x):
        return SeesItsClass.apply(x) * 3

    x = torch.randn(2, 3)
    SeesItsClass.seen.clear()
    ref = fn(_leaf(x))
    eager_seen = [type(v) for v in SeesItsClass.seen]
    SeesItsClass.seen.clear()
    res = kiln.compile(fn, backend="eager")(_leaf(x))
    torch.testing.assert_close(res, ref)
    assert [type(v) for v in SeesItsClass.seen] == eager_seen
    # the nested apply's result equals eager's (the forward on a detached row)
    torch.testing.assert_close(SeesItsClass.seen[-1], x[0].cos().cos() * 2)
    assert all(f is SeesItsClass.__dict__["forward"] for f in SeesItsClass.seen[:2])
