"""Dict keys that are objects (classes, C functions, typing forms, objects, partials, frozen
dataclasses, tuples of them), with fullgraph=True, compared with eager."""

import dataclasses
import functools
from collections import OrderedDict
from typing import NamedTuple, Optional, Union

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln


class Plain:
    def __init__(self, v):
        self.v = v


class OwnHash:
    def __hash__(self):
        return 1

    def __eq__(self, other):
        return True


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: int


class Pair(NamedTuple):
    fn: object
    n: int


def _add(a, b):
    return a + b


ADD, MUL = list.__add__, list.__mul__


def test_objects_made_in_the_frame_are_keys_by_identity():
    def fn(x):
        k1, k2 = Plain(1), Plain(1)  # equal fields, two objects: two keys
        d = {k1: x * 2}
        d[k2] = x * 3
        return d[k1] + d[k2], len(d), k1 in d, Plain(1) in d

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_partials_and_namedtuples_holding_them():
    def fn(x):
        p = functools.partial(_add, b=1)
        d = {p: 5, Pair(p, 4): 6}
        return x * d[p] + d[Pair(p, 4)] + d[(p, 4)], functools.partial(_add) in d

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_frozen_dataclasses_compare_by_fields():
    def fn(x):
        d = {Point(1, 2): x * 2, Point(3, 4): x * 3}
        d[Point(1, 2)] = d[Point(1, 2)] + 1
        return d[Point(1, 2)] + d[Point(3, 4)], len(d), Point(5, 6) in d

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_classes_c_functions_and_typing_forms():
    def fn(x):
        u, o = Union[int, str], Optional[float]  # noqa: UP007, UP045 (typing forms as keys)
        d = {u: x * 2, o: x * 3, ADD: 4, torch.add: 5, int: 6}
        return (
            d[Union[int, str]] + d[Optional[float]] + d[ADD] + d[torch.add] + d[int],  # noqa: UP007, UP045
            MUL in d,
            Union[int, float] in d,  # noqa: UP007
        )

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_a_dict_keyed_by_objects_is_iterated_and_rebuilt():
    def fn(x):
        k = Plain(7)
        d = OrderedDict()
        d[k] = x + 1
        d[ADD] = 2
        keys = list(d)
        first = keys[0].v
        popped = d.popitem(last=False)
        return first, popped[0] is k, popped[1], d, {k2: v for k2, v in d.items()}

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_an_escaping_object_key_is_rebuilt_once():
    def fn(x):
        k = Plain(7)
        return {k: x + 1}, k

    d, k = kiln.compile(fn, backend="eager", fullgraph=True)(torch.ones(1))
    assert list(d) == [k]


def test_a_class_with_its_own_hash_breaks():
    def fn(x):
        return {OwnHash(): x}

    with pytest.raises(kiln.exc.Unsupported, match="its own __hash__ or __eq__"):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.ones(1))


def _keyed_by_inputs(y, s, t):
    d = dict()
    d[s] = y
    d[t] = y * 2
    e = {s: 1, t: 2}
    return d[s] + 1.0, len(d), e[s], s in d, dict([(s, 1), (t, 2)])[s], [k is s for k in d]


def test_objects_from_outside_the_frame_are_keys_by_identity():
    # Note [Dicts: objects from outside as keys]: which key objects are the same is guarded
    graphs = []
    compiled = kiln.compile(
        _keyed_by_inputs, backend=lambda gm, ex: graphs.append(gm) or gm.forward, fullgraph=True
    )
    a, b, y = Plain(1), Plain(2), torch.ones(2)
    for args in [(y, a, b), (y, a, a), (y, b, a), (y, Plain(3), Plain(4)), (y, b, b)]:
        expected, got = _keyed_by_inputs(*args), compiled(*args)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1:] == expected[1:]
    assert len(graphs) == 2  # distinct objects, then one object twice: nothing pins which


def test_an_object_with_its_own_hash_from_outside_the_frame_breaks():
    def fn(x, obj):
        return {obj: x}

    with pytest.raises(kiln.exc.Unsupported, match="from outside the frame"):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.ones(1), OwnHash())


def test_an_input_dict_read_with_an_object_key():
    registry = {}

    def fn(x, obj, table):
        registry[obj]["seen"] = x  # the inner dict, reached by the object
        hit = _add in table
        return x * 2 + table[3], hit, table.get(Plain, 0), registry[obj]

    a = Plain(1)
    registry[a] = {}
    table = {_add: None, 3: torch.ones(3)}
    compiled = kiln.compile(fn, backend="eager", fullgraph=True)
    x = torch.randn(3)
    got = compiled(x, a, table)
    torch.testing.assert_close(got[0], x * 2 + 1)
    assert got[1:3] == (True, 0) and got[3] is registry[a] and registry[a]["seen"] is x

    b = Plain(2)  # another object: the guard looks it up, finds nothing, recompiles
    registry[b] = {}
    got = compiled(x, b, {3: torch.zeros(3)})
    assert got[1] is False and registry[b]["seen"] is x and "seen" in registry[a]
