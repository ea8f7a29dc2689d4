"""A `.data` write after a tensor was used for a gradient: eager's backward reads the new values
where an op saved the tensor itself (Note [Output graph: a write autograd cannot see])."""

import pytest
import torch

import kiln


def _sin_then_scale(x):
    y = x.sin()  # sin's backward reads x itself: the doubled x, in eager
    x.data.mul_(2)
    return y


def _mixed(x, w):
    y = (x @ w).tanh() * w.exp()  # tanh saves its result, exp its result, mm its inputs
    w.data.add_(1)
    return y * x.cos()


@pytest.mark.parametrize("backend", ["aot_eager", "kiln"])
@pytest.mark.parametrize("fn", [_sin_then_scale, _mixed])
def test_gradient_after_data_write_is_eagers(fn, backend):
    kiln.reset()
    torch.manual_seed(0)
    n = fn.__code__.co_argcount
    args = [torch.randn(3, 3, requires_grad=True) for _ in range(n)]
    copies = [a.detach().clone().requires_grad_(True) for a in args]
    expected = fn(*args)
    got = kiln.compile(fn, backend=backend)(*copies)
    torch.testing.assert_close(got, expected)
    expected.sum().backward()
    got.sum().backward()
    for a, c in zip(args, copies):
        torch.testing.assert_close(c, a)
        torch.testing.assert_close(c.grad, a.grad)
