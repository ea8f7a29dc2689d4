"""Sizes read from tensor data (`.item()` under config.capture_scalar_outputs) used by narrow and
by `Tensor.split`: views whose sizes are the unbacked values, one graph for every value, where
torch._check has bounded them; otherwise a break that says which check is missing."""

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


def _outcome(fn, *args):
    try:
        return fn(*args), None
    except RuntimeError as e:
        return None, type(e)


def _compare(fn, compiled, x, y):
    xe, xc = x.clone(), x.clone()
    expected, got = _outcome(fn, xe, y), _outcome(compiled, xc, y)
    assert expected[1] is got[1]
    if expected[1] is None:
        assert_same(expected[0], got[0])
    assert_same(xe, xc, "x (mutated)")


def narrow_checked(x, y):
    n = y.item()
    torch._check(n >= 0)
    torch._check(n <= x.size(0) - 1)
    part = x.narrow(0, 1, n)
    part.mul_(10)  # a view: x changes too
    return part.sum(0), part.shape[0] + 1


def narrow_dim1(x, y):
    n = y.item()
    torch._check(n >= 0)
    torch._check(n <= 4)
    return x.narrow(-1, 0, n).sum(-1)


def test_narrow_by_a_checked_item_is_a_view_for_every_value(capture):
    compiled, graphs = _counted(narrow_checked)
    for v in (0, 3, 5, 6, -1):  # 6 and -1 fail the checks: eager's RuntimeError
        _compare(narrow_checked, compiled, torch.randn(6, 2), torch.tensor([v]))
    compiled, graphs2 = _counted(narrow_dim1)
    for v in (1, 4, 0):
        _compare(narrow_dim1, compiled, torch.randn(3, 4), torch.tensor([v]))
    assert len(graphs) == 1 and len(graphs2) == 1


def narrow_unchecked(x, y):
    return x.narrow(0, 0, y.item())


def test_narrow_by_an_unchecked_item_says_which_check_is_missing(capture):
    with pytest.raises(Unsupported, match=r"torch._check\(0 <= n <= size - start\)"):
        _counted(narrow_unchecked)[0](torch.randn(4), torch.tensor([2]))
    compiled, _ = _counted(narrow_unchecked, fullgraph=False)
    _compare(narrow_unchecked, compiled, torch.randn(4), torch.tensor([2]))


def split_method(x, y):
    n = y.item()
    torch._check(n >= 0)
    torch._check(n <= x.size(0))
    a, b = x.split([n, x.size(0) - n])
    a.add_(1)
    return b.sum(0), a.shape[0]


def test_tensor_split_by_an_item_and_the_rest(capture):
    compiled, graphs = _counted(split_method)
    for v in (2, 0, 5):
        _compare(split_method, compiled, torch.randn(5, 3), torch.tensor([v]))
    assert len(graphs) == 1


def slices(x, y):
    n = y.item()
    torch._check(n >= 1)
    torch._check(n <= x.size(0))
    head, tail, middle = x[:n], x[n:], x[1:n]
    middle.mul_(3)  # a view: x changes too
    return head.sum(0), tail.sum(0), middle.shape[0]


def test_slices_by_a_checked_item_are_views_for_every_value(capture):
    compiled, graphs = _counted(slices)
    for v in (1, 3, 5, 0, 6):  # 0 and 6 fail the checks: eager's RuntimeError
        _compare(slices, compiled, torch.randn(5, 2), torch.tensor([v]))
    assert len(graphs) == 1


def slice_unchecked(x, y):
    return x[: y.item()]


def test_slice_by_an_unchecked_item_says_which_check_is_missing(capture):
    with pytest.raises(Unsupported, match=r"torch._check\(0 <= start <= stop <= size\)"):
        _counted(slice_unchecked)[0](torch.randn(4), torch.tensor([2]))
    compiled, _ = _counted(slice_unchecked, fullgraph=False)
    for v in (2, -1, 9):  # Python's slice clamps: eager's result after the break
        _compare(slice_unchecked, compiled, torch.randn(4), torch.tensor([v]))


def factories_unchecked(x, t):
    n = x.item()
    y = torch.zeros(n)
    if y.size(0) < 0:  # decided by the asserted fact n >= 0
        return y.sum() - 1
    return y, y.sum() + 1, torch.full([n, 2], 2.0), t.new_full((n,), 7.0), t.new_zeros(n).shape[0]


def test_a_factory_sized_by_an_unchecked_item_asserts_it_is_nonnegative(capture):
    compiled, graphs = _counted(factories_unchecked)
    for v in (0, 3, 1, -1):  # -1: RuntimeError in both (the texts differ: the note says why)
        _compare(factories_unchecked, compiled, torch.tensor([v]), torch.randn(2))
    assert len(graphs) == 1
