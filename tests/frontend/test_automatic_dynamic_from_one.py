"""Automatic dynamic from a size of 1: a dim that goes 1 -> 2 is dynamic at once, as torch has
it, so sizes 1, 2, 3, ... compile twice (Note [Shapes: automatic dynamic])."""

import torch

import kiln
from tests.frontend.frontend_helpers import CountingBackend, assert_same


def _graphs_over(fn, inputs):
    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(fn, backend=backend)
    for args in inputs:
        assert_same(fn(*args), compiled(*args))
    return backend.calls


def test_batch_of_one_then_growing():
    def fn(x):
        return (x * 2).sum(0) + 1

    assert _graphs_over(fn, [(torch.randn(n, 3),) for n in (1, 2, 3, 4, 5)]) == 2


def test_int_and_size_change_together():
    # test_graph_break_correctly_when_passing_numpy_ndarray_to_torch_function's shape: the int
    # and the tensor's last dim change on the same call, from 1
    def fn(n, y):
        return torch.ones(2, n) + y

    inputs = [(n, torch.randn(1, 2, n)) for n in range(1, 6)]
    assert _graphs_over(fn, inputs) == 2


def test_size_to_one_stays_static():
    def fn(x):
        return x + 1

    assert _graphs_over(fn, [(torch.randn(n),) for n in (5, 1, 1)]) == 2
