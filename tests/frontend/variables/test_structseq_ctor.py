"""Calling a torch.return_types class in a compiled frame builds that named tuple, as eagerly."""

import pytest
import torch

import kiln


def test_structseq_from_a_tuple():
    def fn(x, y):
        r = torch.return_types.max((x + 1, y))
        return r, r.values * 2, tuple(r)

    x, y = torch.randn(3), torch.arange(3)
    got = kiln.compile(fn, backend="eager", fullgraph=True)(x, y)
    expected = fn(x, y)
    assert type(got[0]) is torch.return_types.max
    torch.testing.assert_close(got[0].indices, expected[0].indices)
    torch.testing.assert_close(got[1], expected[1])
    assert type(got[2]) is tuple


def test_structseq_holding_none_and_from_a_list():
    def fn(x):
        return torch.return_types.qr([x * 2, None])

    x = torch.ones(2)
    got = kiln.compile(fn, backend="eager", fullgraph=True)(x)
    assert type(got) is torch.return_types.qr and got.R is None
    torch.testing.assert_close(got.Q, x * 2)


def test_structseq_of_the_wrong_length_raises_as_eagerly():
    def fn(x):
        return torch.return_types.max((x,))

    with pytest.raises(TypeError):
        fn(torch.ones(1))
    with pytest.raises(TypeError):
        kiln.compile(fn, backend="eager")(torch.ones(1))
