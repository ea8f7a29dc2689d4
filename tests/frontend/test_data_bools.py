"""`bool()` of values read from tensor data under config.capture_scalar_outputs: computed by the
graph (one graph for every value), eager's bool and errors; a branch on it is still a break
(Note [Shapes: a bool read from tensor data])."""

import math

import pytest
import torch

import kiln
from kiln.exc import Unsupported
from tests.frontend.frontend_helpers import assert_same


@pytest.fixture
def capture(monkeypatch):
    monkeypatch.setattr(kiln.config, "capture_scalar_outputs", True)


def _counted(fn, fullgraph=True):
    kiln.reset()
    graphs = []

    def count(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    return kiln.compile(fn, backend=count, fullgraph=fullgraph), graphs


def bool_of_item(x):
    return bool(x.item()), x + 1


def bool_of_tensor(x):
    return bool(x), x * 2


def item_of_bool_tensor(x):
    return x.item(), bool(x.item())


def bool_of_all(mask):
    return bool((mask == 0).all())


@pytest.mark.parametrize(
    "fn,values",
    [
        (bool_of_item, [torch.tensor([3]), torch.tensor([0]), torch.tensor([-2])]),
        (bool_of_item, [torch.tensor([0.5]), torch.tensor([0.0]), torch.tensor([math.nan])]),
        (bool_of_item, [torch.tensor([-0.0]), torch.tensor([math.inf], dtype=torch.float64)]),
        (
            bool_of_tensor,
            [torch.tensor(42), torch.tensor(0), torch.tensor(3.14), torch.tensor(0.0)],
        ),
        (bool_of_tensor, [torch.tensor([[True]]), torch.tensor([[False]])]),
        (item_of_bool_tensor, [torch.tensor([True]), torch.tensor([False])]),
        (bool_of_all, [torch.zeros(2, 3), torch.tensor([[0, 1], [0, 0]])]),
    ],
)
def test_bool_is_computed_by_the_graph_for_every_value(capture, fn, values):
    compiled, graphs = _counted(fn)
    for x in values:
        expected, got = fn(x.clone()), compiled(x.clone())
        assert_same(expected, got)
        first = expected[0] if isinstance(expected, tuple) else expected
        assert type(first) is bool and type(got[0] if isinstance(got, tuple) else got) is bool
    assert len({(x.dtype, x.dim()) for x in values}) == len(graphs)


def bool_then_write(x):
    flag = bool(x)
    x.zero_()
    return flag, x


def test_bool_is_read_where_it_is_made(capture):
    compiled, graphs = _counted(bool_then_write)
    x = torch.tensor(5.0)
    assert compiled(x.clone()) == bool_then_write(x.clone())
    assert compiled(x.clone())[0] is True and len(graphs) == 1


def ambiguous(x):
    try:
        return bool(x)
    except RuntimeError as e:
        return str(e), x + 1


@pytest.mark.parametrize("x", [torch.tensor([1, 2, 3]), torch.tensor([])])
def test_bool_of_a_tensor_without_one_value_raises_eagers_error(capture, x):
    compiled, graphs = _counted(ambiguous)
    assert_same(ambiguous(x), compiled(x))
    assert len(graphs) == 1


def branch_on_item(x):
    if x.item():
        return x + 1
    return x - 1


def test_a_branch_on_it_is_still_a_break(capture):
    with pytest.raises(Unsupported, match="data-dependent"):
        _counted(branch_on_item)[0](torch.tensor([2]))
    compiled, _ = _counted(branch_on_item, fullgraph=False)
    for v in (2, 0):
        assert_same(branch_on_item(torch.tensor([v])), compiled(torch.tensor([v])))


def test_without_the_switch_bool_of_a_tensor_is_a_break():
    compiled, graphs = _counted(bool_of_tensor, fullgraph=False)
    x = torch.tensor(1.0)
    assert_same(bool_of_tensor(x), compiled(x))
    assert len(graphs) == 1 and "ne" not in str(graphs[0].graph)  # (x * 2 after the break)


def test_under_fullgraph_bool_of_a_tensor_is_computed_by_the_graph():
    compiled, graphs = _counted(bool_of_tensor, fullgraph=True)
    for v in (1.0, 0.0, math.nan):
        x = torch.tensor(v)
        assert_same(bool_of_tensor(x), compiled(x))
    assert len(graphs) == 1
