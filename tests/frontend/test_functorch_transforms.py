"""Compiled functions called inside torch.func transforms run as Python for that call
(Note [Frames: under torch.func transforms])."""

import warnings

import pytest
import torch

import kiln
from kiln.exc import Unsupported
from tests.frontend.frontend_helpers import CountingBackend


def triple_sin(x):
    return (x * 3).sin()


def test_grad_of_a_compiled_function_and_later_calls_still_compile():
    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(triple_sin, backend=backend)
    x = torch.tensor([0.5, 1.0, 2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (no "internal error" warning)
        got = torch.func.grad(lambda t: compiled(t).sum())(x)
    expected = torch.func.grad(lambda t: triple_sin(t).sum())(x)
    torch.testing.assert_close(got, expected)
    assert backend.calls == 0
    torch.testing.assert_close(compiled(x), triple_sin(x))
    assert backend.calls == 1  # the function is compiled once the transform is over


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
def test_an_entry_compiled_outside_is_not_run_inside_vmap(backend):
    kiln.reset()
    compiled = kiln.compile(triple_sin, backend=backend)
    x = torch.ones(3, requires_grad=True)
    compiled(x)  # an entry for a (3,) input that requires grad
    batch = torch.arange(6.0).reshape(2, 3).requires_grad_()
    got = torch.func.vmap(compiled)(batch)
    expected = torch.func.vmap(triple_sin)(batch)
    torch.testing.assert_close(got, expected)
    assert got.requires_grad  # the batch's gradient still flows
    (g,) = torch.autograd.grad(got.sum(), batch)
    torch.testing.assert_close(g, 3 * (batch * 3).cos().detach())


def test_an_old_style_function_raises_as_it_does_eagerly():
    class Twice(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    def fn(x):
        return Twice.apply(x)

    kiln.reset()
    compiled = kiln.compile(fn, backend="eager")
    x = torch.ones(2)
    with pytest.raises(RuntimeError, match="setup_context") as eager_error:
        torch.func.grad(lambda t: fn(t).sum())(x)
    with pytest.raises(RuntimeError) as kiln_error:
        torch.func.grad(lambda t: compiled(t).sum())(x)
    assert str(kiln_error.value) == str(eager_error.value)


def test_fullgraph_under_a_transform_is_an_error():
    kiln.reset()
    compiled = kiln.compile(triple_sin, backend="eager", fullgraph=True)
    with pytest.raises(Unsupported, match="torch.func transform"):
        torch.func.grad(lambda t: compiled(t).sum())(torch.ones(2))
