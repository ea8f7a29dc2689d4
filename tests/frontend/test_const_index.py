"""A list, tuple or torch.Size indexed by a tensor the frame made from an int constant (Note [Operators: an
index tensor made from a constant])."""

import torch
from frontend_helpers import run_and_compare


def _index_with_made_tensor(a, b):
    items = [a, b, a + 1, b + 1]
    return items[torch.as_tensor(2)] + (a, b)[torch.tensor(-1, dtype=torch.int32)]


def test_list_indexed_by_a_tensor_made_from_a_constant():
    # the tensor's value is known while tracing: no break (Note [Operators: an index tensor
    # made from a constant])
    run_and_compare(_index_with_made_tensor, torch.zeros(2), torch.ones(2), fullgraph=True)


def _index_with_changed_tensor(a, b):
    i = torch.tensor(0)
    i.add_(1)  # its value is data now: indexing with it is a break
    return [a, b][i]


def test_list_indexed_by_a_changed_tensor_breaks():
    run_and_compare(_index_with_changed_tensor, torch.zeros(2), torch.ones(2), expected_breaks=1)


def _size_indexed_by_made_tensor(x):
    idx = torch.tensor(1)
    return x.reshape(-1, x.shape[idx]) * x.size()[torch.tensor(-1)]


def test_shape_indexed_by_a_tensor_made_from_a_constant():
    # torch.Size is a tuple: its __getitem__ reads the index's __index__ too
    run_and_compare(_size_indexed_by_made_tensor, torch.randn(2, 3, 4), fullgraph=True)
