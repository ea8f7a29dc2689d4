"""Calls whose input values eager checks at run time raise as eager does (they run eagerly)."""

import pytest
import torch
import torch.nn.functional as F

import kiln


def _encode(labels, n):
    return F.one_hot(labels * 1, n).float().sum(0)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
def test_one_hot_out_of_range_class_raises(backend):
    f = kiln.compile(_encode, backend=backend)
    torch.testing.assert_close(f(torch.tensor([0, 2, 2]), 3), torch.tensor([1.0, 0.0, 2.0]))
    with pytest.raises(RuntimeError, match="smaller than num_classes"):
        f(torch.tensor([0, 3]), 3)
    with pytest.raises(RuntimeError, match="non-negative"):
        f(torch.tensor([-1, 0]), 3)


def test_one_hot_is_a_graph_break_under_fullgraph():
    with pytest.raises(kiln.exc.Unsupported, match="one_hot"):
        kiln.compile(_encode, fullgraph=True)(torch.tensor([1]), 2)
