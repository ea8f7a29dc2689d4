"""`torch.unique_consecutive(x)` in the graph under fullgraph=True: a result sized by tensor data
(Note [Shapes: results sized by tensor data])."""

import pytest
import torch

from kiln.exc import Unsupported
from tests.frontend.frontend_helpers import assert_same, counted_compile


def runs(x):
    values = torch.unique_consecutive(x)
    return values * 2, x.unique_consecutive().sum(), values.shape[0] + 1


@pytest.mark.parametrize("backend", [None, "kiln"])
def test_unique_consecutive_one_graph_for_every_count(backend):
    compiled, graphs = counted_compile(runs, True, backend)
    for x in ([1, 1, 2, 2, 1, 3], [5, 5, 5, 5, 5, 5], [1, 2, 3, 4, 5, 6], [0, 0, 1, 1, 0, 0]):
        x = torch.tensor(x)
        assert_same(runs(x), compiled(x))
    assert len(graphs) == 1
    assert "unique_consecutive" in str(graphs[0].graph)


def test_unique_consecutive_with_counts_is_a_break():
    def fn(x):
        return torch.unique_consecutive(x, return_counts=True)

    compiled, _ = counted_compile(fn, True)
    with pytest.raises(Unsupported, match="unique_consecutive with an inverse"):
        compiled(torch.tensor([1, 1, 2]))
