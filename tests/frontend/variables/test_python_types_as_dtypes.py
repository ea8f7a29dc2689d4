"""`t.to(float)`, `dtype=int`: a Python number type where torch takes a dtype is that dtype in
the graph, as torch's argument parser reads it (bool, int64, float64, complex128)."""

import pytest
import torch

from tests.frontend.frontend_helpers import run_and_compare


@pytest.mark.parametrize("typ", [bool, int, float, complex])
def test_to_a_python_type(typ):
    def fn(x):
        return (x * 5).to(typ) + 1

    run_and_compare(fn, torch.randn(5), expected_graphs=1, expected_breaks=0)


def test_chain_of_python_types():
    def fn(x):
        return (x * 5).to(bool).to(float).to(int) + 8

    run_and_compare(fn, torch.randn(5), expected_graphs=1, expected_breaks=0)


def test_factory_dtype_keyword():
    def fn(x):
        return torch.zeros(3, dtype=float) + x, torch.ones_like(x, dtype=int)

    run_and_compare(fn, torch.randn(3), expected_graphs=1, expected_breaks=0)


def test_type_where_a_number_goes_is_the_same_error():
    def fn(x):
        return torch.full((2,), float) + x

    run_and_compare(fn, torch.randn(2))
