"""Builtin max()/min() with one-element tensors (Note [Tensors: builtin max/min])."""

import pytest
import torch

import kiln
from tests.frontend.frontend_helpers import run_and_compare


def clamp_like(a, b):
    c = a + b
    a = a.sum()
    b = b.sum()
    a = min(max(a, 0), 1)
    b = max(0, min(1, b))
    return max(a, b) - min(a, b) + c


@pytest.mark.parametrize("scale", [0.1, 1.0, 10.0, -10.0])
def test_clamp_with_builtins_is_one_graph(scale):
    torch.manual_seed(0)
    a, b = torch.randn(3, 3) * scale, torch.randn(3, 3)
    run_and_compare(clamp_like, a, b, fullgraph=True, expected_graphs=1)


def test_ties_and_nan_pick_what_eager_picks():
    def fn(a, b):
        return max(a, b) * 2, min(a, b) * 3, max(b, a, 0.5)

    nan = torch.tensor(float("nan"))
    for a, b in [(torch.tensor(1.0), torch.tensor(1.0)), (nan, torch.tensor(2.0))]:
        run_and_compare(fn, a, b, fullgraph=True, expected_graphs=1)
        run_and_compare(fn, b, a, fullgraph=True, expected_graphs=1)


def test_gradient_goes_to_the_winner_on_ties():
    def fn(a, b):
        return max(a, b) * 3

    a = torch.tensor([2.0], requires_grad=True)
    b = torch.tensor([2.0], requires_grad=True)
    f = kiln.compile(fn, backend="eager", fullgraph=True)
    f(a, b).sum().backward()
    a2, b2 = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    fn(a2, b2).sum().backward()
    assert a.grad.item() == a2.grad.item() == 3.0
    assert b2.grad is None and not b.grad.any()  # the loser: a zero gradient (see the note)


def test_integer_tensor_and_int():
    def fn(a):
        return max(a, 3) + min(-1, a) + a * 0  # (a tensor whichever wins)

    run_and_compare(fn, torch.tensor(5), fullgraph=True, expected_graphs=1)
    run_and_compare(fn, torch.tensor(1), fullgraph=True, expected_graphs=1)


def test_many_elements_break_and_eager_raises():
    def fn(a):
        return max(a, a + 1)

    with pytest.raises(RuntimeError, match="ambiguous"):
        kiln.compile(fn, backend="eager")(torch.randn(3))
    with pytest.raises(kiln.exc.Unsupported, match="more than one element"):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.randn(3))


def test_dtype_changing_mix_is_not_traced():
    def fn(a):
        return max(a, 0.5)

    with pytest.raises(kiln.exc.Unsupported, match="dtype would change"):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.tensor(1))
    run_and_compare(fn, torch.tensor(1), expected_breaks=1)
