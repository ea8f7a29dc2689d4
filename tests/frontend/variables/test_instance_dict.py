"""`obj.__dict__` of a user object from outside the frame: a live view that sees the attribute
stores made in the frame and whose writes are attribute stores, compared with eager."""

import pytest
import torch
from frontend_helpers import CountingBackend, assert_same

import kiln


class Point:
    def __init__(self):
        self.a = 1
        self.b = 2


class Backed:
    """A property whose value lives in the instance dict under the same name."""

    def __init__(self, x):
        self.__dict__["x"] = x

    @property
    def x(self):
        return self.__dict__["x"] + 100

    @x.setter
    def x(self, value):
        self.__dict__["x"] = value


def compare(fn, make):
    """fn(x, make()) eager and compiled (fullgraph, compiled twice on fresh objects): the
    results and the objects' dicts after the call are the same."""
    kiln.reset()
    x = torch.randn(3)
    obj = make()
    expected = fn(x, obj)
    compiled = kiln.compile(fn, backend="eager", fullgraph=True)
    for _ in range(2):
        other = make()
        got = compiled(x, other)
        assert_same(expected[:-1], got[:-1])
        assert got[-1] is other
        assert list(obj.__dict__.items()) == list(other.__dict__.items())


def test_reads_see_the_stores_made_in_the_frame():
    def fn(x, obj):
        obj.c = 3
        obj.a = 10
        d = obj.__dict__
        return (
            x * d["a"],
            "c" in d,
            "z" in d,
            d.get("z", 5),
            d.get("b"),
            len(d),
            list(d),
            list(d.keys()),
            sorted(d.values()),
            dict(d.items()),
            dict(d),
            [k for k in d],
            obj,
        )

    compare(fn, Point)


def test_new_keys_keep_the_order_they_were_first_stored_in():
    def fn(x, obj):
        obj.p = 1
        obj.q = 2
        obj.p = 3  # p keeps its place before q
        return x + 1, list(obj.__dict__), obj

    compare(fn, Point)


def test_writes_through_the_dict_are_attribute_stores():
    def fn(x, obj):
        obj.__dict__["a"] = 10
        obj.__dict__.update(e=5)
        got = obj.__dict__.setdefault("f", 6)
        return x * obj.a + obj.e + got, obj.__dict__.copy(), obj

    compare(fn, Point)


def test_copy_does_not_alias_the_instance_dict():
    def fn(x, obj):
        c = obj.__dict__.copy()
        c["zz"] = 4
        return x + 1, "zz" in obj.__dict__, c, obj

    compare(fn, Point)


def test_a_property_backed_by_the_dict():
    def fn(x, obj):
        before = obj.__dict__["x"]
        obj.x = before + 1  # the setter writes the dict
        obj.__dict__["x"] = obj.__dict__["x"] * 2  # a dict write, not the setter
        return x + obj.x, obj.__dict__.get("x"), obj

    compare(fn, lambda: Backed(3))


def test_the_dict_keys_are_guarded():
    def fn(x, obj):
        return x + len(obj.__dict__) + ("c" in obj.__dict__)

    backend = CountingBackend()
    compiled = kiln.compile(fn, backend=backend, fullgraph=True)
    obj = Point()
    t = torch.zeros(1)
    assert compiled(t, obj).item() == 2
    obj.c = 1
    assert compiled(t, obj).item() == 4  # recompiled for the new keys
    assert backend.calls == 2


def test_a_value_read_through_the_dict_is_guarded():
    def fn(x, obj):
        return x + obj.__dict__["x"]

    compiled = kiln.compile(fn, backend="eager", fullgraph=True)
    obj = Backed(3)
    t = torch.zeros(1)
    assert compiled(t, obj).item() == 3  # the dict's value, not the property's
    obj.__dict__["x"] = 5
    assert compiled(t, obj).item() == 5


class Slotted:
    value = 9  # a class attribute behind the instance one

    def __init__(self):
        self.value = 1
        self.other = 2


def test_deleting_an_attribute_from_outside_the_frame():
    def fn(x, obj):
        del obj.a
        missing = not hasattr(obj, "a")
        try:
            obj.a  # noqa: B018 (the read raises)
        except AttributeError as e:
            err = str(e)
        return x * len(obj.__dict__), "a" in obj.__dict__, missing, err, list(obj.__dict__), obj

    compare(fn, Point)


def test_reading_a_deleted_attribute_the_class_also_has_breaks():
    def fn(x, obj):
        del obj.value
        return x + obj.value

    with pytest.raises(kiln.exc.Unsupported, match="after its deletion"):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.ones(1), Slotted())


def test_storing_a_deleted_attribute_again_breaks():
    def fn(x, obj):
        del obj.a
        obj.a = 5  # eager moves it to the end of the dict
        return x + obj.a

    with pytest.raises(kiln.exc.Unsupported, match="after its deletion"):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.ones(1), Point())
