"""Strings made while tracing stay new objects across a graph break, as in eager (Note
[Constants: string identity])."""

import operator

import torch
from frontend_helpers import run_and_compare

import kiln

ADD = "__add__"


def strings_made_in_the_frame(x):
    a = b = "xyzpdq"
    c = a[:3] + b[3:]  # equal to a, not a
    name = str(b"__add__", "ascii")  # equal to an interned name, not it
    kiln.graph_break()  # c and name are rebuilt by the transformed code
    return x + 1, operator.is_(a, b), operator.is_(a, c), name is ADD, name == ADD, c == a


def test_string_made_while_tracing_is_not_the_interned_constant():
    run_and_compare(strings_made_in_the_frame, torch.randn(2))


def identity_of_distinct_values(x, items, wanted):
    hits = [i for i, item in enumerate(items) if item is wanted or item == wanted]
    nan = float("nan")
    return x * len(hits), hits, operator.is_not(3, wanted), operator.is_("a", "b"), nan is nan


def test_is_between_two_different_constants_is_false():
    compiled = kiln.compile(identity_of_distinct_values, backend="eager", fullgraph=True)
    x = torch.randn(2)
    for items, wanted in (([1, 2, 3, 2], 2), (["a", "b"], "c"), ([1.5, 2.5], 2.5)):
        out, want = compiled(x, items, wanted), identity_of_distinct_values(x, items, wanted)
        torch.testing.assert_close(out[0], want[0])
        assert out[1:] == want[1:]


def identity_of_numbers(x, a, b):
    return x + 1, a is b, a is not b, a is 4, b is a  # noqa: F632


def test_identity_of_ints_and_floats_made_dynamic_is_eager_identity():
    """Ints and floats that changed between calls are symbols: `a is b` is the identity of the
    objects passed, not a fold of two symbols (it was False for `h(5, 5)`)."""
    compiled = kiln.compile(identity_of_numbers, backend="eager")
    x = torch.randn(2)
    big = 10**6
    calls = [(i, i) for i in range(6)] + [(i, 4) for i in range(6)] + [(big, big + 0), (big, 10**6)]
    calls += [(1.5, 1.5), (2.5, 2.5), (3.5, 3.5), (2.5, 3.5)]
    for a, b in calls:
        out, want = compiled(x, a, b), identity_of_numbers(x, a, b)
        torch.testing.assert_close(out[0], want[0])
        assert out[1:] == want[1:], (a, b)


LETTERS = frozenset("abc")
PAIR = (1, 2, 3)


def new_and_old_containers():
    u = LETTERS.union()  # (a new frozenset, equal to LETTERS)
    v = tuple(list(PAIR))  # (a new tuple, equal to PAIR)
    return u, LETTERS, v, PAIR, u is LETTERS


def test_tuples_and_frozensets_come_back_as_the_objects_they_are():
    got = kiln.compile(new_and_old_containers, backend="eager")()
    want = new_and_old_containers()
    assert got == want
    same = [(a is b) for a in got[:4] for b in got[:4]]
    assert same == [(a is b) for a in want[:4] for b in want[:4]]
    assert got[1] is LETTERS and got[3] is PAIR
