"""Exact tuples where CPython hands the tuple itself back (`t[:]`, `t * 1`, `t + ()`, `() + t`,
`tuple(t)`): `is` and id() see the same object, for tuples from outside the frame (of tensors,
of ints read item by item, of constants) and made in it (Note [Sequences: + and *])."""

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln


def identities(s, x):
    empty = ()
    return (
        tuple(s) is s,
        s[:] is s,
        s[0:100] is s,
        (s * 1) is s,
        (1 * s) is s,
        (s + ()) is s,
        (empty + s) is s,
        x + 1,
    )


@pytest.mark.parametrize(
    "s", [(1, 2, 3), (torch.ones(1), torch.ones(2)), ("a", "b"), (2.5, None)], ids=str
)
def test_a_tuple_is_its_own_copy_as_in_cpython(s):
    run_and_compare(identities, s, torch.ones(2))


def made_in_the_frame(x):
    t = (x, x + 1, 3)
    return identities(t, x), t[:] is t


def test_a_tuple_made_in_the_frame():
    run_and_compare(made_in_the_frame, torch.ones(2))


def ids(s):
    return id(s * 1) == id(s), id(s[:]) == id(s), s[1:] is s, (s * 2) is s


@pytest.mark.parametrize("s", [(1, 2, 3), (torch.ones(1), torch.ones(2))], ids=str)
def test_ids_and_other_tuples(s):
    compiled = kiln.compile(ids)  # (id() and `is` between two tuples break: Python decides)
    assert compiled(s) == ids(s) == (True, True, False, False)


def same_or_not(a, b, x):
    return a is b, a is not b, x + a[0]


@pytest.mark.parametrize("first", [(1, 2), (torch.ones(1), torch.ones(1))], ids=str)
def test_two_arguments_that_are_one_tuple(first):
    compiled = kiln.compile(same_or_not)
    other = tuple(list(first))  # (equal, another object)
    for a, b in ((first, first), (first, other), (first, first)):
        got, expected = compiled(a, b, torch.ones(1)), same_or_not(a, b, torch.ones(1))
        assert got[:2] == expected[:2]
        torch.testing.assert_close(got[2], expected[2])
