"""Stores through a user-defined __setattr__ on objects from outside the frame (Note [Side
effects: stores through a user __setattr__]): the __setattr__ is traced (validation, key
mapping, super().__setattr__ / object.__setattr__), the final store replayed after the graph."""

import pytest
import torch
from frontend_helpers import run_on_fresh_objects

import kiln


class Validated:
    aliases = {"n": "count"}

    def __init__(self):
        object.__setattr__(self, "count", 0)
        object.__setattr__(self, "calls", [])

    def __setattr__(self, name, value):
        self.calls.append(name)  # (a list of the object's: mutated in place)
        if name == "count" and not isinstance(value, int):
            raise TypeError("count must be an int")
        name = self.aliases.get(name, name)
        super().__setattr__(name, value)


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a):
        self.a = a


def set_alias(x, obj):
    obj.n = 3  # stored as obj.count
    return x * obj.count, obj.count


def set_then_object_setattr(x, obj):
    obj.label = "y"
    object.__setattr__(obj, "other", 5)
    return x + obj.other


def bad_value(x, obj):
    y = x + 1
    obj.count = "three"
    return y


def reads_slots(x, s):
    return x * s.a


def test_store_through_setattr_maps_key_and_replays():
    backend = run_on_fresh_objects(set_alias, Validated, torch.randn(3))
    assert backend.calls == 1
    assert kiln.counters["stats"]["graph_breaks"] == 0
    assert kiln.counters["stats"]["recompiles"] == 0


def test_store_through_setattr_then_object_setattr():
    backend = run_on_fresh_objects(set_then_object_setattr, Validated, torch.randn(3))
    assert backend.calls == 1
    assert kiln.counters["stats"]["graph_breaks"] == 0


def test_setattr_raising_is_eager_exact():
    run_on_fresh_objects(
        bad_value, Validated, torch.randn(3)
    )  # TypeError raised by Python at the store


def test_slots_are_read():
    backend = run_on_fresh_objects(reads_slots, lambda: Slotted(3), torch.randn(3))
    assert backend.calls == 1
    assert kiln.counters["stats"]["graph_breaks"] == 0


@pytest.mark.parametrize("value", [None, "single"])
def test_store_then_read_sees_new_value(value):
    def fn(x, obj):
        if obj.kind is None:
            obj.kind = "single"
        return x * 2 if obj.kind == "single" else x

    class Cfg(Validated):
        def __init__(self):
            super().__init__()
            object.__setattr__(self, "kind", value)

    run_on_fresh_objects(fn, Cfg, torch.randn(2))
    assert kiln.counters["stats"]["graph_breaks"] == 0
