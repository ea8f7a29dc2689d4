"""One ndarray read twice in a frame (twice by one name, or by two names) is one graph input."""

import numpy as np

import kiln

table = np.arange(6.0)


def test_global_array_read_twice():
    def fn(y):
        return y + table + table

    compiled = kiln.compile(fn, backend="eager", fullgraph=True)
    y = np.ones(6)
    np.testing.assert_array_equal(compiled(y), fn(y))


def test_same_array_by_two_names_then_distinct():
    def fn(a, b):
        a += 1  # written through one name, read through the other
        return b * 2

    compiled = kiln.compile(fn, backend="eager", fullgraph=True)
    for make_b in (lambda a: a, lambda a: a.copy()):
        a1, a2 = np.arange(4.0), np.arange(4.0)
        expected = fn(a1, make_b(a1))
        got = compiled(a2, make_b(a2))
        np.testing.assert_array_equal(got, expected)
        np.testing.assert_array_equal(a2, a1)
