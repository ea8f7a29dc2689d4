"""A mutation through as_strided of a view: its strides address the storage (as eager)."""

import pytest
import torch

import kiln


def _bump_through_diagonal(a):
    d = a.diagonal()
    head = d.as_strided((2,), (1,), 0)  # the storage's first two elements: a[0, 0], a[0, 1]
    head.add_(1.0)
    return a


def _bump_root(a):
    a.as_strided((2,), (4,), 1).mul_(3.0)  # as_strided of the input itself: rewritten
    return a + 1


@pytest.mark.parametrize("backend", ["aot_eager", "kiln"])
@pytest.mark.parametrize("fn", [_bump_through_diagonal, _bump_root])
def test_as_strided_mutation_matches_eager(backend, fn):
    ref = torch.arange(8.0).reshape(2, 4)
    got = ref.clone()
    expected = fn(ref)
    out = kiln.compile(fn, backend=backend)(got)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(got, ref)
