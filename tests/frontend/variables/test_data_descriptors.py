"""A data descriptor on the class (a Python __get__ with __set__) wins over the instance dict."""

import torch

import kiln


class Stored:
    """Keeps the value under a private name; reads add 1 so the descriptor's path shows."""

    def __set_name__(self, owner, name):
        self.slot = "_" + name

    def __get__(self, obj, cls):
        if obj is None:
            return self
        return getattr(obj, self.slot) + 1

    def __set__(self, obj, value):
        setattr(obj, self.slot, value)


class Holder:
    v = Stored()

    def __init__(self, v):
        self.v = v


def test_descriptor_read_on_an_input_object():
    h = Holder(10)
    h.__dict__["v"] = 1000  # shadowed: the data descriptor still decides

    def fn(t, obj):
        return t + obj.v

    t = torch.randn(3)
    expected = fn(t, h)
    got = kiln.compile(fn, backend="eager", fullgraph=True)(t, h)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got, t + 11)


def test_descriptor_read_follows_a_new_value():
    h = Holder(1)
    compiled = kiln.compile(lambda t, obj: t * obj.v, backend="eager", fullgraph=True)
    t = torch.ones(2)
    torch.testing.assert_close(compiled(t, h), t * 2)
    h.v = 4
    torch.testing.assert_close(compiled(t, h), t * 5)


def test_object_made_in_frame_with_dict_entry_behind_property():
    class Box:
        @property
        def size(self):
            return 7

    def fn(t):
        b = Box()
        b.__dict__["size"] = 100
        return t + b.size

    t = torch.zeros(2)
    torch.testing.assert_close(kiln.compile(fn, backend="eager")(t), fn(t))


def test_object_made_in_frame_with_dict_entry_behind_descriptor():
    def fn(t):
        h = Holder(2)
        h.__dict__["v"] = 50
        return t + h.v

    t = torch.zeros(2)
    torch.testing.assert_close(kiln.compile(fn, backend="eager")(t), fn(t))
