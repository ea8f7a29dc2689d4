"""np.ones([2, n]) of an int input n that became dynamic: its shape stays symbolic, one graph
for every later n (Note [NumPy: arrays as tensors])."""

import numpy as np
import pytest
import torch

import kiln
from tests.frontend.frontend_helpers import CountingBackend, assert_same


@pytest.mark.parametrize("factory", [np.ones, np.zeros, np.empty])
def test_factory_of_a_dynamic_int(factory):
    def fn(n, y):
        a = factory([2, n]) * 0 + 1
        return torch.from_numpy(a) + y

    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(fn, backend=backend)
    for n in range(2, 7):
        y = torch.randn(2, n, dtype=torch.float64)
        assert_same(fn(n, y), compiled(n, y))
    assert backend.calls == 2  # n = 2 static, then n symbolic
    assert kiln.counters["stats"]["graph_breaks"] == 0


def test_full_and_stack_of_a_dynamic_int():
    def fn(n, y):
        ndarray = np.stack([np.ones([2, n]), np.full((2, n), 3.0)], axis=0)
        tensor = torch.tensor(ndarray, dtype=torch.long)
        tensor.unsqueeze_(0)
        return tensor + y

    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(fn, backend=backend)
    for n in range(2, 7):
        y = torch.randn(1, 2, 2, n)
        assert_same(fn(n, y), compiled(n, y))
    assert backend.calls == 2
