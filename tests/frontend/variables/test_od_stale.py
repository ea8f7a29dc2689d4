"""OrderedDict's own pop / setdefault / update after dict's methods changed its keys (Note
[Dicts: OrderedDict's methods on a stale order list]): CPython's answers, which differ from a
plain dict's, are the oracle, and they come out of one graph."""

import collections

import pytest
import torch

import kiln
from tests.frontend.frontend_helpers import CountingBackend, assert_same

OD = collections.OrderedDict


def _added_then_own_methods(x):
    od = OD(a=1, b=2)
    dict.update(od, {"c": 3})  # c is stored, but not in od's order list
    try:
        od.pop("c")  # OrderedDict's pop looks c up through the list: KeyError
        seen = 0
    except KeyError:
        seen = 1
    first = od.setdefault("c", 9)  # present in the storage: its value
    od.update(d=4)
    od["c"] = 5  # c gets its place in the list now, after d
    return x + seen + first + od.pop("c", 0) + len(od), list(dict.keys(od))


def _removed_then_own_methods(x):
    od = OD(a=1, b=2, c=3)
    gone = dict.pop(od, "b")
    kept = od.pop("a")  # a is in the list and in the storage
    missing = od.pop("b", -1)  # b is only in the list
    od.update({"c": 7})  # a key the storage holds: no insertion
    return x * kept + gone + missing + od.setdefault("c", 0), len(od)


@pytest.mark.parametrize("fn", [_added_then_own_methods, _removed_then_own_methods])
def test_own_methods_after_dict_changed_the_keys(fn):
    kiln.reset()
    counting = CountingBackend()
    compiled = kiln.compile(fn, backend=counting, fullgraph=True)
    x = torch.randn(2)
    assert_same(fn(x), compiled(x))
    assert len(counting.graphs) == 1


def _insert_after_removal(x):
    od = OD(a=1, b=2)
    dict.pop(od, "b")
    for i in range(6):  # may reallocate the table: CPython then finds no key of the list
        od[f"k{i}"] = i
    try:
        return x + od.pop("a")
    except KeyError:
        return x - 1


def test_insertion_after_a_removal_runs_in_python():
    kiln.reset()
    x = torch.randn(2)
    assert_same(_insert_after_removal(x), kiln.compile(_insert_after_removal, backend="eager")(x))
    assert any("changed its keys" in reason for reason in kiln.counters["graph_break"])
