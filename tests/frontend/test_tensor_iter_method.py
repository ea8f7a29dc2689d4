"""`x.__iter__()` called by name iterates the tensor's rows as `iter(x)` does, in one graph."""

import torch

import kiln


def add_through_rows(x):
    it = x.__iter__()
    for y in it:
        y.add_(1.0)
    return y


def first_two_rows(x):
    it = x.__iter__()
    return next(it) * 2, next(it) + 1


def test_dunder_iter_called_by_name():
    for fn in (add_through_rows, first_two_rows):
        kiln.reset()
        x = torch.arange(6.0).reshape(3, 2)
        xc = x.clone()
        expected = fn(x)
        got = kiln.compile(fn, backend="eager", fullgraph=True)(xc)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(xc, x)
        assert kiln.counters["stats"]["unique_graphs"] == 1
