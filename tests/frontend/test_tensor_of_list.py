"""torch.tensor of a nested list holding tensors / ndarrays of the graph: eager's result, in one
graph; what eager refuses or reads another way is a graph break (Note [Tensors: torch.tensor of
graph values])."""

import pytest
import torch

import kiln
from kiln.exc import Unsupported
from tests.frontend.frontend_helpers import assert_same


def _one_graph(fn, *args):
    kiln.reset()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    got = kiln.compile(fn, backend=backend, fullgraph=True)(*args)
    assert len(graphs) == 1
    return got


@pytest.mark.parametrize(
    "make",
    [
        lambda x: torch.tensor([x[0], x[1] * 2]),
        lambda x: torch.tensor([x[:1].reshape(1, 1, 1), x[2]]),
        lambda x: torch.tensor([[x[0], 3], [x[1], 4.5]]),
        lambda x: torch.tensor([x[0].to(torch.int32), 7]),
        lambda x: torch.tensor([x[0].to(torch.float64), 1]),
        lambda x: torch.tensor([x[0], x[1]], dtype=torch.float16),
        lambda x: torch.tensor((x[0] > 0, True)),
        lambda x: torch.tensor([x[0].to(torch.int64), 2], dtype=torch.float64, device="cpu"),
    ],
)
def test_tensor_leaves_are_scalars(make):
    x = torch.tensor([1.25, -3.5, 8.0], requires_grad=True)
    expected = make(x)
    got = _one_graph(make, x)
    assert_same(expected, got)
    assert got.dtype == expected.dtype and not got.requires_grad


def test_ndarray_leaves_keep_their_shape():
    def fn(x):
        a = x.numpy() * 2
        return torch.tensor([a, a + 1, a]), torch.tensor([a, a], dtype=torch.float32)

    x = torch.arange(6.0, dtype=torch.float64).reshape(3, 2)
    assert_same(fn(x), _one_graph(fn, x))


@pytest.mark.parametrize(
    "make",
    [
        lambda x: torch.tensor([x, x]),  # more than one element: eager raises
        lambda x: torch.tensor([x[0], 2], dtype=torch.int64),  # float into int: eager raises
        lambda x: torch.tensor([x[:1], x[:2]]),
    ],
)
def test_what_eager_refuses_breaks(make):
    x = torch.tensor([1.5, 2.5, 3.5])
    with pytest.raises(Exception):
        make(x)
    kiln.reset()
    with pytest.raises(Unsupported):
        kiln.compile(make, fullgraph=True)(x)
