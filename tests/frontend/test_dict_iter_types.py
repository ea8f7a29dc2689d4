"""Iterators of dicts made in the frame, live at a graph break, are Python's own type there
(Note [Dicts: iterators of dicts made in the frame])."""

import collections
import sys

import torch

import kiln
from tests.frontend.frontend_helpers import run_and_compare


def _seen_at_break(it):
    """What Python code at the break sees of the iterator: its type, size and the rest."""
    return type(it).__name__, sys.getsizeof(it)


def ordered_iter_at_break(x):
    od = collections.OrderedDict()
    od.update([("a", 1), ("b", 2), ("c", 3)])
    it = iter(od.items())
    first = next(it)
    kiln.graph_break()
    seen = _seen_at_break(it)
    od["b"] = 20  # a value stored after: the real iterator sees it
    return x + first[1], seen, type(it).__name__, list(it)


def test_ordered_dict_iterator_is_an_odict_iterator_after_a_break():
    run_and_compare(ordered_iter_at_break, torch.randn(3))


def dict_keys_iter_at_break(x):
    d = {"p": 1, "q": 2}
    it = iter(d)
    kiln.graph_break()
    return x * 2, type(it).__name__, sys.getsizeof(it), list(it)


def test_dict_iterator_is_a_dict_keyiterator_after_a_break():
    run_and_compare(dict_keys_iter_at_break, torch.randn(3))


def type_traced_before_the_break(x):
    od = collections.OrderedDict(a=1)
    d = {"k": 2}
    return x + 1, type(iter(od)).__name__, type(iter(d.values())).__name__


def test_dict_iterator_type_in_the_trace():
    run_and_compare(type_traced_before_the_break, torch.randn(3))


class _Ordered(collections.OrderedDict):
    pass


def subclass_iters_at_break(x):
    od = _Ordered()
    od.update([(i, i * 2) for i in range(3)])
    keys, items = iter(od), iter(od.items())
    next(items)
    kiln.graph_break()
    seen = _seen_at_break(keys), _seen_at_break(items)
    return x - 1, seen, list(keys), list(items)


def test_ordered_dict_subclass_iterators_after_a_break():
    run_and_compare(subclass_iters_at_break, torch.randn(3))


class _Plain(dict):
    pass


def input_subclass_iters(x, od, d):
    keys, values = iter(od), iter(d)
    next(values)
    kiln.graph_break()
    return x + 1, _seen_at_break(keys), _seen_at_break(values), list(keys), list(values)


def test_iterators_of_dict_subclass_inputs_after_a_break():
    # (not run_and_compare: each call's new dicts are other inputs to the resume functions)
    x = torch.randn(2)
    expected = input_subclass_iters(x, _Ordered(a=1, b=2), _Plain(p=1, q=2, r=3))
    got = kiln.compile(input_subclass_iters, backend="eager")(
        x, _Ordered(a=1, b=2), _Plain(p=1, q=2, r=3)
    )
    assert got[1:] == expected[1:]
    assert expected[1][0] == "odict_iterator"
    torch.testing.assert_close(got[0], expected[0])
