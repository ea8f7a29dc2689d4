"""Python's operators on traced values where the answer is Python's own rule: dict equality, user
objects whose dunders decline, super().__ne__, f-strings of user objects, calls that do not bind
and the TypeErrors Python raises, compared with eager under fullgraph=True."""

import collections
from collections.abc import MutableSet

import pytest
import torch
from frontend_helpers import run_and_compare


def dict_equality(x):
    a = {"a": None, "b": 1}
    b = {"b": 1, "a": None}
    c = {"a": None, "b": 2}
    return x + 1, a == b, a != b, a == c, a != c, a == {"a": None}, {} == {}


def ordered_dict_equality(x):
    a = collections.OrderedDict(a=1, b=2)
    b = collections.OrderedDict(b=2, a=1)
    return x + 1, a == b, a == dict(b), dict(a) == b, a == collections.OrderedDict(a=1, b=2)


def dict_values_with_tensors(x):
    a = {"t": x}
    return x + 1, a == {"t": x}  # the same object: `is` before ==


@pytest.mark.parametrize("fn", [dict_equality, ordered_dict_equality, dict_values_with_tensors])
def test_dict_equality(fn):
    run_and_compare(fn, torch.ones(2), fullgraph=True)


class Bag(MutableSet):
    """A MutableSet over a dict (as torch's OrderedSet), with its own ==/!= for two Bags."""

    def __init__(self, items=()):
        self._dict = dict.fromkeys(items)

    def __contains__(self, item):
        return item in self._dict

    def __iter__(self):
        return iter(self._dict)

    def __len__(self):
        return len(self._dict)

    def add(self, item):
        self._dict[item] = None

    def discard(self, item):
        self._dict.pop(item, None)

    def __eq__(self, other):
        if isinstance(other, Bag):
            return self._dict == other._dict
        return super().__eq__(other)

    def __ne__(self, other):
        if isinstance(other, Bag):
            return self._dict != other._dict
        return super().__ne__(other)

    def __repr__(self):
        return f"Bag({list(self._dict)})"


class PlainSet(set):
    pass


def bags_compare(x):
    p, q = Bag("abc"), Bag("cba")
    r = Bag("abd")
    return (
        x + 1,
        p == q,
        p != r,
        p == {"a", "b", "c"},
        p != {"a", "b", "e"},
        p == PlainSet("abc"),
        p != PlainSet("abe"),
        p != 1,
        f"{p} and {r!r}",
    )


def test_mutable_set_over_a_dict():
    run_and_compare(bags_compare, torch.ones(2), fullgraph=True)


def _catch(fn):
    try:
        fn()
    except TypeError as e:
        return str(e)
    return "no error"


def bag_type_errors(x):
    p = Bag("ab")
    return (
        x + 1,
        _catch(lambda: p - 1),
        _catch(lambda: 1 & p),
        _catch(lambda: p <= 2.5),
        _catch(lambda: p.isdisjoint()),  # missing argument
        _catch(lambda: p.add(["unhashable"])),
        _catch(lambda: p.isdisjoint(1)),  # iterating an int
        _catch(lambda: Bag.__ne__(p)),
    )


def test_type_errors_raised_in_traced_code():
    run_and_compare(bag_type_errors, torch.ones(2), fullgraph=True)


def two_args(a, b, *, c=1):
    return a + b + c


def bad_calls(x):
    return (
        x + 1,
        _catch(lambda: two_args(1)),
        _catch(lambda: two_args(1, 2, 3)),
        _catch(lambda: two_args(1, 2, d=4)),
        _catch(lambda: dict.fromkeys([[1]])),
        _catch(lambda: {}.get([1])),
        _catch(lambda: [i for i in 5]),
    )


def test_calls_that_do_not_bind():
    run_and_compare(bad_calls, torch.ones(2), fullgraph=True)


def update_until_bad_key(x):
    d = {"a": 1}
    try:
        d.update([("b", 2), ([], 3), ("c", 4)])
    except TypeError as e:
        return x + len(d), str(e), sorted(d)
    return x


def test_dict_update_stops_at_an_unhashable_key():
    run_and_compare(update_until_bad_key, torch.ones(2), fullgraph=True)


class FrozenSub(frozenset):
    pass


def ids_of_objects_made_here(x):
    p = frozenset("abc")
    q = FrozenSub("abc")
    copied = q.copy()
    items = [1]
    alias = items
    return (
        x + 1,
        id(p) == id(p.copy()),
        id(p) == id(frozenset.copy(p)),
        id(copied) != id(q),
        type(copied) is frozenset,
        id(items) == id(alias),
        id(items) == id([1]),
        id({}) != id(items),
        frozenset(p) is p,
    )


def test_id_of_objects_made_in_the_frame():
    run_and_compare(ids_of_objects_made_here, torch.ones(2), fullgraph=True)


def id_escapes(x):
    return x + 1, id([1]) > 0


def test_id_number_escaping_runs_the_frame_eagerly():
    run_and_compare(id_escapes, torch.ones(2), expected_breaks=1)


def ids_of_two_temporaries(x):
    return x + 1, id([]) == id([])  # CPython may reuse the first list's address


def test_ids_of_two_temporaries_are_not_guessed():
    run_and_compare(ids_of_two_temporaries, torch.ones(2), expected_breaks=1)


def set_operators_with_non_sets(x, s, d):
    t = {1, 2}

    def ior_dict():
        u = {1}
        u |= d
        return u

    w = {5}
    w |= Bag([7])  # set's |= declines a Bag: Bag.__ror__ makes a new Bag
    return (
        x + 1,
        _catch(lambda: t | d),
        _catch(ior_dict),
        _catch(lambda: t <= [1]),
        _catch(lambda: s - d),
        type(w).__name__,
        sorted(w),
    )


def test_set_operators_with_non_sets():
    run_and_compare(set_operators_with_non_sets, torch.ones(2), {1, 2, 3}, {1: 2}, fullgraph=True)


CALLS = []


class EqDeclines:
    """Inherits object.__ne__, which runs this __eq__ and declines with it."""

    def __eq__(self, other):
        CALLS.append("EqDeclines.__eq__")
        return NotImplemented


class BothDecline:
    def __eq__(self, other):
        CALLS.append("BothDecline.__eq__")
        return NotImplemented

    def __ne__(self, other):
        CALLS.append("BothDecline.__ne__")
        return NotImplemented


class EqAnswers:
    def __eq__(self, other):
        CALLS.append("EqAnswers.__eq__")
        return isinstance(other, EqAnswers)


def not_equal_order(x):
    CALLS.clear()
    a, b, c = EqDeclines(), BothDecline(), EqAnswers()
    results = [a != b, b != a, c != a, a != c, c != EqAnswers(), a != a]
    return x + 1, results, list(CALLS)


def test_not_equal_runs_object_ne_then_the_reflected_ne():
    # object.__ne__ calls the class's own __eq__ (and declines with it) before the other side's
    # __ne__ is tried; both declining falls back to identity (CPython's test_ne_high_priority)
    run_and_compare(not_equal_order, torch.randn(2), fullgraph=True)
