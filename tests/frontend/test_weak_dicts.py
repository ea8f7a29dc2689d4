"""A weakref.WeakKeyDictionary from outside the frame, read by object keys (Note [Dicts: weak-key
dictionaries]): one graph, and a changed dictionary recompiles; eager is the oracle."""

import weakref

import torch

import kiln
from tests.frontend.frontend_helpers import CountingBackend, assert_same


class Tag:
    """A plain object usable as a weak key."""


def test_membership_and_items_of_a_weak_key_dictionary():
    table = weakref.WeakKeyDictionary()
    seen, unseen, scaled = torch.nn.Linear(2, 2), Tag(), Tag()
    table[seen] = 1
    table[scaled] = 2.5

    def fn(x):
        if seen in table:
            x = x + table[seen]
        if unseen in table:
            x = x * 100
        return x * table.get(scaled, 1.0) + table.get(unseen, 3)

    kiln.reset()
    counting = CountingBackend()
    compiled = kiln.compile(fn, backend=counting, fullgraph=True)
    x = torch.randn(3)
    for change in [None, None, "add", "remove", "value"]:
        if change == "add":
            table[unseen] = 4
        elif change == "remove":
            del table[seen]
        elif change == "value":
            table[scaled] = -1.0
        assert_same(fn(x), compiled(x))
    assert len(counting.graphs) == 4  # the first call, then one per change
    assert kiln.counters["graph_break"] == {}


def test_a_missing_key_read_by_index_runs_in_python():
    table = weakref.WeakKeyDictionary()
    key = Tag()

    def fn(x):
        try:
            return x + table[key]
        except KeyError:
            return x - 1

    kiln.reset()
    x = torch.randn(2)
    assert_same(fn(x), kiln.compile(fn, backend="eager")(x))
