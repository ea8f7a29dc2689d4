"""autograd.Function calls eager rejects: kiln's break reason names eager's error, and the call,
run in Python, raises it."""

import pytest
import torch

import kiln


class DirtyInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.add_(1)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g


def test_mark_dirty_of_a_view_of_a_leaf_raises_as_eager_does():
    def fn(x):
        return DirtyInPlace.apply(x.view_as(x))

    x = torch.randn(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad") as eager:
        fn(x)
    # not captured: the call runs in Python and raises eager's error
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad") as res:
        kiln.compile(fn, backend="eager")(x)
    assert type(res.value) is type(eager.value)
    # under fullgraph the break's reason names the same problem
    with pytest.raises(kiln.exc.Unsupported, match="a view of a leaf Variable that requires grad"):
        kiln.compile(fn, backend="eager", fullgraph=True)(x)
    torch.testing.assert_close(x.grad, None)
