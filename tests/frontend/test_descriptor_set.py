"""`obj.name = value` through a data descriptor whose __set__ is Python (Note [Objects: data
descriptors]): the __set__ is inlined, its stores into the instance dict replayed after the
graph; on objects from outside the frame and objects made in it."""

import torch
from frontend_helpers import assert_same, run_on_fresh_objects

import kiln


class Doubling:
    def __set__(self, obj, value):
        obj.__dict__["field"] += value * 2


class Holder:
    field = Doubling()

    def __init__(self):
        self.__dict__["field"] = 0


class Prefixing:
    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return obj.__dict__.get("_internal", "default")

    def __set__(self, obj, value):
        obj.__dict__["_internal"] = f"desc_{value}"


class Tagged:
    desc = Prefixing()


def set_through_descriptor(x, foo):
    foo.field = 10
    return x + foo.field


def set_then_overwrite_dict(x, obj):
    obj.desc = "hello"
    first = obj.desc
    obj.__dict__["_internal"] = "direct"
    return x + len(first), obj.desc


def made_in_frame(x):
    obj = Tagged()
    obj.desc = "new"
    return x * len(obj.desc), obj.desc


def test_set_descriptor_on_input_object():
    backend = run_on_fresh_objects(set_through_descriptor, Holder, torch.zeros(2))
    assert backend.calls == 1
    assert kiln.counters["stats"]["graph_breaks"] == 0


def test_set_descriptor_then_instance_dict_store():
    backend = run_on_fresh_objects(set_then_overwrite_dict, Tagged, torch.zeros(2))
    assert backend.calls == 1
    assert kiln.counters["stats"]["graph_breaks"] == 0


def test_set_descriptor_on_object_made_in_frame():
    kiln.reset()
    x = torch.randn(3)
    compiled = kiln.compile(made_in_frame, fullgraph=True)
    assert_same(made_in_frame(x), compiled(x))
    assert_same(made_in_frame(x), compiled(x))
