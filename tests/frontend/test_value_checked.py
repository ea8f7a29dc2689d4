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


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
def test_one_hot_checks_run_in_the_graph(backend):
    log = []

    def fn(labels, out):
        oh = F.one_hot(labels, num_classes=4)
        out.add_(1)  # after the checks: not done when they fail
        log.append(1)
        return oh

    f = kiln.compile(fn, backend=backend, fullgraph=True)
    out = torch.zeros(2)
    torch.testing.assert_close(f(torch.tensor([[3, 0]]), out), F.one_hot(torch.tensor([[3, 0]]), 4))
    assert out.tolist() == [1.0, 1.0] and log == [1]
    for bad, msg in ((torch.tensor([[4, 0]]), "smaller"), (torch.tensor([[-2, 9]]), "negative")):
        with pytest.raises(RuntimeError) as eager:
            F.one_hot(bad, 4)
        with pytest.raises(RuntimeError, match=msg) as got:
            f(bad, out)
        assert str(got.value) == str(eager.value)
        assert out.tolist() == [1.0, 1.0] and log == [1]
    empty = torch.zeros(0, 2, dtype=torch.long)
    assert f(empty, out).shape == (0, 2, 4)


def test_one_hot_without_num_classes_is_a_graph_break_under_fullgraph():
    with pytest.raises(kiln.exc.Unsupported, match="one_hot"):
        kiln.compile(lambda x: F.one_hot(x), fullgraph=True)(torch.tensor([1]))
    assert kiln.compile(lambda x: F.one_hot(x))(torch.tensor([1])).tolist() == [[0, 1]]
