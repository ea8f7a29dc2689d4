"""`x.nonzero()` in the graph under fullgraph=True or config.capture_dynamic_output_shape_ops: a
result sized by tensor data (Note [Shapes: results sized by tensor data])."""

import pytest
import torch

import kiln
from kiln.exc import Unsupported
from tests.frontend.frontend_helpers import assert_same, counted_compile


def _counted(fn, fullgraph=True, backend=None):
    return counted_compile(fn, fullgraph, backend)


def squares_of_positions(x):
    nz = torch.nonzero(x)
    squared = nz * nz
    sliced = torch.ops.aten.slice.Tensor(squared, dim=1, start=-2, end=None)
    return sliced.unsqueeze(dim=0).squeeze(dim=0) + 1


def gather_positive(x, y):
    idx = (x > 0).nonzero(as_tuple=True)
    return y[idx] * 2, idx, x.nonzero()


_INPUTS = [  # (one shape: each count of nonzero elements, none and all included)
    torch.tensor([[0.0, 1.0, 0.0], [2.0, 0.0, 3.0]]),
    torch.zeros(2, 3),
    torch.ones(2, 3),
    torch.tensor([[0.0, 0.0, 0.0], [0.0, 5.0, 0.0]]),
]


@pytest.mark.parametrize("backend", [None, "kiln"])
def test_nonzero_under_fullgraph_one_graph_for_every_count(backend):
    compiled, graphs = _counted(squares_of_positions, backend=backend)
    for x in _INPUTS:
        assert_same(squares_of_positions(x), compiled(x))
    assert len(graphs) == 1
    assert "nonzero" in str(graphs[0].graph)


def test_nonzero_as_tuple_indexes_another_tensor():
    compiled, graphs = _counted(gather_positive)
    for seed in range(3):
        torch.manual_seed(seed)
        x, y = torch.randn(6), torch.randn(6)
        expected, got = gather_positive(x, y), compiled(x, y)
        assert_same(expected, got)
        assert got[2].stride() == expected[2].stride()  # (eager's column-major result)
    x = -torch.ones(6)  # no positive element: empty results
    assert_same(gather_positive(x, x), compiled(x, x))
    assert len(graphs) == 1


def test_nonzero_outside_fullgraph_is_a_break_by_default():
    compiled, graphs = _counted(squares_of_positions, fullgraph=False)
    x = _INPUTS[0]
    assert_same(squares_of_positions(x), compiled(x))
    assert not any("nonzero" in str(gm.graph) for gm in graphs)


def test_the_switch_captures_it_outside_fullgraph(monkeypatch):
    monkeypatch.setattr(kiln.config, "capture_dynamic_output_shape_ops", True)
    compiled, graphs = _counted(squares_of_positions, fullgraph=False)
    for x in _INPUTS:
        assert_same(squares_of_positions(x), compiled(x))
    assert len(graphs) == 1 and "nonzero" in str(graphs[0].graph)


def test_a_branch_on_the_count_is_a_data_dependent_error_under_fullgraph():
    def fn(x):
        if x.nonzero().shape[0] > 2:
            return x + 1
        return x - 1

    kiln.reset()
    with pytest.raises(Unsupported, match="data-dependent"):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.ones(4))


def masked_sum(x, w):
    keep = x > 0
    return x[keep].sum() * w, x[keep], w[keep[:, 0]]


@pytest.mark.parametrize("backend", [None, "kiln"])
def test_boolean_mask_indexing_under_fullgraph(backend):
    compiled, graphs = _counted(masked_sum, backend=backend)
    for seed in range(3):
        torch.manual_seed(seed)
        x, w = torch.randn(5, 3), torch.randn(5, 2)
        assert_same(masked_sum(x, w), compiled(x, w))
    x = -torch.ones(5, 3)  # nothing kept
    assert_same(masked_sum(x, w), compiled(x, w))
    assert len(graphs) == 1


def test_two_dimensional_nonzero_as_tuple():
    def fn(x):
        rows, cols = x.nonzero(as_tuple=True)
        return rows * 10 + cols, x[rows, cols]

    compiled, graphs = _counted(fn)
    for x in _INPUTS:
        assert_same(fn(x), compiled(x))
    assert len(graphs) == 1


def positions_by_where(x):
    rows, cols = torch.where(x > 0)  # (one argument: eager's x.nonzero(as_tuple=True))
    return rows * 10 + cols, torch.where(x > 0, x, -x)


def test_where_with_one_argument_is_nonzero():
    compiled, graphs = _counted(positions_by_where)
    for x in _INPUTS:
        assert_same(positions_by_where(x), compiled(x))
    assert len(graphs) == 1
