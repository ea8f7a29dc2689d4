"""An input that was a 0-d tensor and is now an int (or back): each call compiles and matches
eager (the automatic-dynamic record of a 0-d tensor's sizes `()` is not an int's value)."""

import torch

import kiln
from tests.frontend.frontend_helpers import assert_same, counted_compile


def scaled(x, n):
    return x * n + 1


def test_a_zero_dim_tensor_input_then_ints():
    compiled, graphs = counted_compile(scaled)
    x = torch.ones(3)
    for n in (torch.tensor(2.0), 3, 4, torch.tensor(5.0), 6):
        assert_same(scaled(x, n), compiled(x, n))
    assert len(graphs) == 2  # (the tensor's graph, then one for every int)
    assert kiln.counters["stats"]["unique_graphs"] == 2
