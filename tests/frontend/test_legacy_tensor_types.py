"""`torch.LongTensor(seq)` and the other CPU tensor types of a sequence of numbers: a tensor of
that dtype, in the graph (Note [Tensors: legacy constructors])."""

import numpy as np
import pytest
import torch
from frontend_helpers import run_and_compare

import kiln


def of_numpy_scalars():
    x = np.array([1, 2, 3, 4, 5, 6], dtype=np.int64)
    return torch.LongTensor([x[0], x[2], x[4]])


def of_constants(x):
    return (
        torch.FloatTensor([1, 2.5]) + x,
        torch.BoolTensor((1, 0, 1)),
        torch.IntTensor([len(x), 7]),
        torch.DoubleTensor([0.5]),
        torch.ByteTensor([255, 3]),
    )


def test_long_tensor_of_numpy_scalars():
    run_and_compare(of_numpy_scalars, fullgraph=True, expected_graphs=1)


def test_tensor_types_of_constants():
    run_and_compare(of_constants, torch.randn(2), fullgraph=True, expected_graphs=1)


def of_sizes():
    return torch.LongTensor(3)  # (an uninitialized tensor of 3 elements)


def test_sizes_are_a_graph_break():
    kiln.reset()
    with pytest.raises(kiln.exc.Unsupported, match="flat sequence of numbers"):
        kiln.compile(of_sizes, fullgraph=True)()
    assert kiln.compile(of_sizes)().shape == (3,)
