"""`seq.__class__` of a list, tuple or namedtuple is its class: calling it rebuilds that kind."""

import collections

import torch

import kiln

Pair = collections.namedtuple("Pair", ["left", "right"])


def _bump(seq):
    return seq.__class__([v * 2 for v in seq])


def _bump_fields(seq):
    return seq.__class__(*[v * 2 for v in seq])


def test_tuple_and_list_keep_their_class():
    compiled = kiln.compile(_bump, backend="eager", fullgraph=True)
    for inp in ((torch.ones(2), torch.zeros(2)), [torch.ones(3)]):
        got, expected = compiled(inp), _bump(inp)
        assert type(got) is type(expected)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e)


def test_namedtuple_keeps_its_class():
    inp = Pair(torch.ones(1), torch.full((1,), 3.0))
    got = kiln.compile(_bump_fields, backend="eager", fullgraph=True)(inp)
    assert type(got) is Pair
    torch.testing.assert_close(got.right, inp.right * 2)


def test_class_compared_in_frame():
    def fn(seq, t):
        return t + 1 if seq.__class__ is tuple else t - 1

    compiled = kiln.compile(fn, backend="eager", fullgraph=True)
    t = torch.zeros(1)
    torch.testing.assert_close(compiled((1, 2), t), fn((1, 2), t))
    torch.testing.assert_close(compiled([1, 2], t), fn([1, 2], t))
