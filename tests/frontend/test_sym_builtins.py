"""Builtins on symbolic sizes: divmod, pow, round, min/max with floats (dynamic=True)."""

import pytest
import torch

import kiln
from tests.frontend.frontend_helpers import assert_same

XS = [torch.randn(7, 3), torch.randn(9, 3), torch.randn(12, 3)]


def _run(fn):
    """fn compiled with dynamic sizes on three sizes: results as eager; the graphs compiled."""
    kiln.reset()
    f = kiln.compile(fn, backend="eager", dynamic=True, fullgraph=True)
    for x in XS:
        assert_same(fn(x), f(x))
    return kiln.counters["stats"]["unique_graphs"]


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x + divmod(x.shape[0], 3)[0] * 10 + divmod(x.shape[0], 3)[1],
        lambda x: x + pow(x.shape[0], 2),
        lambda x: x + x.shape[0] ** 3,
        lambda x: x + round(x.shape[0]),
        lambda x: x + max(x.shape[0], 8),
    ],
    ids=["divmod", "pow", "pow_op", "round", "max"],
)
def test_size_builtins_stay_symbolic(fn):
    assert _run(fn) == 1


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x + min(x.shape[0], 8.5),
        lambda x: x + pow(x.shape[0], 2, 5),
        lambda x: x + x.shape[0] ** -1,
        lambda x: x + abs(x.shape[0] - 10),
        lambda x: x + round(x.shape[0] / 2),
    ],
    ids=["min_float", "pow_mod", "pow_negative", "abs", "round_div"],
)
def test_size_builtins_specialised_stay_correct(fn):
    _run(fn)
