"""Tensor.data inside an autograd.Function's backward (checked while tracing the forward for the
backends that trace the backward): gradients equal eager's on every backend."""

import pytest
import torch

import kiln


class ClipNegative(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        out = g.clone()
        out.data[x.data < 0] = 0
        return out * 3


def fn(x):
    return ClipNegative.apply(x).sin()


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
def test_data_in_backward(backend):
    kiln.reset()
    compiled = kiln.compile(fn, backend=backend, fullgraph=True)
    for values in ([-2.0, 1.0, 3.0], [4.0, -1.0, -0.5]):
        x = torch.tensor(values, requires_grad=True)
        fn(x).sum().backward()
        expected = x.grad
        y = torch.tensor(values, requires_grad=True)
        out = compiled(y)
        torch.testing.assert_close(out, fn(y))
        out.sum().backward()
        torch.testing.assert_close(y.grad, expected)


def test_data_in_forward_still_breaks():
    def g(x):
        return x.data + 1

    with pytest.raises(kiln.exc.Unsupported, match="Tensor.data"):
        kiln.compile(g, fullgraph=True)(torch.ones(2, requires_grad=True))
