"""Namedtuple classes made inside compiled code, and methods of namedtuple subclasses: each case
compares kiln with eager Python."""

import collections
from collections import namedtuple
from typing import NamedTuple

import pytest
import torch
from frontend_helpers import CountingBackend, run_and_compare

import kiln


def _compile(fn):
    backend = CountingBackend()
    return kiln.compile(fn, backend=backend, fullgraph=True), backend


def _fields_of(value):
    return type(value).__name__, type(value)._fields, type(value).__module__, tuple(value)


def _same_tuple(eager, got):
    e_name, e_fields, e_module, e_items = _fields_of(eager)
    g_name, g_fields, g_module, g_items = _fields_of(got)
    assert (e_name, e_fields, e_module) == (g_name, g_fields, g_module)
    assert len(e_items) == len(g_items)
    for a, b in zip(e_items, g_items):
        if isinstance(a, torch.Tensor):
            torch.testing.assert_close(b, a)
        else:
            assert a == b


def _made_and_returned(a, b):
    pair = collections.namedtuple("pair", ["x", "y", "total"])
    p = pair(a, b, a + b)
    return pair(p.x * 2, p[1], p.total - b)


def test_namedtuple_class_made_in_frame_returned_instance():
    kiln.reset()
    a, b = torch.randn(3), torch.randn(3)
    fn, backend = _compile(_made_and_returned)
    first, second = fn(a, b), fn(a, b)
    _same_tuple(_made_and_returned(a, b), first)
    # each call makes a new class, as the eager call does
    assert type(first) is not type(second)
    assert backend.calls == 1


def _with_defaults(a, b):
    point = collections.namedtuple("point", "x y z", defaults=(None, 3))
    p = point(a, z=b)
    return point(p.x + p.z, p.y, 7), p.y


def test_namedtuple_defaults_and_keywords():
    kiln.reset()
    a, b = torch.randn(2), torch.randn(2)
    fn, _ = _compile(_with_defaults)
    got, eager = fn(a, b), _with_defaults(a, b)
    _same_tuple(eager[0], got[0])
    assert got[1] is None and eager[1] is None


def _class_returned(a):
    row = collections.namedtuple("row", ["v"])
    return row, row(a + 1), isinstance(row(a), row), isinstance(row(a), tuple)


def test_namedtuple_class_leaves_the_frame():
    kiln.reset()
    a = torch.randn(4)
    fn, _ = _compile(_class_returned)
    got = fn(a)
    cls, inst = got[0], got[1]
    assert isinstance(inst, cls) and cls._fields == ("v",) and cls.__name__ == "row"
    assert cls.__module__ == _class_returned.__module__
    torch.testing.assert_close(inst.v, a + 1)
    assert got[2:] == (True, True)
    assert fn(a)[0] is not cls


def _constant_items(a):
    pt = collections.namedtuple("pt", "i j")
    return pt(1, 2), a * 2


def test_namedtuple_of_constants_made_in_frame():
    kiln.reset()
    fn, _ = _compile(_constant_items)
    got = fn(torch.ones(2))
    _same_tuple(_constant_items(torch.ones(2))[0], got[0])
    assert type(got[0]) is not type(fn(torch.ones(2))[0])


def _across_break(a):
    pair = collections.namedtuple("pair", "x y")
    p = pair(a, a + 1)
    torch._dynamo.graph_break()
    return pair(p.y, p.x), type(p) is pair


def test_namedtuple_class_live_at_a_graph_break():
    kiln.reset()
    a = torch.randn(3)
    fn = kiln.compile(_across_break, backend="eager")
    got = fn(a)
    _same_tuple(_across_break(a)[0], got[0])
    assert got[1] is True


def _tensor_default(a):
    pair = collections.namedtuple("pair", "x y", defaults=(a,))
    return pair(1).y


def test_namedtuple_with_a_tensor_default_breaks():
    kiln.reset()
    with pytest.raises(kiln.exc.Unsupported, match="defaults"):
        kiln.compile(_tensor_default, backend="eager", fullgraph=True)(torch.ones(2))


class _Pair(NamedTuple):
    first: torch.Tensor
    second: torch.Tensor

    def total(self, scale=1):
        return (self.first + self.second) * scale

    @staticmethod
    def one():
        return 1

    @classmethod
    def name(cls):
        return cls.__name__ + "!"

    @property
    def diff(self):
        return self.first - self.second


def _pair_methods(a, b):
    p = _Pair(a, b)
    return p.total(), p.total(scale=3), p.one(), p.name(), p.diff, p._replace(first=b).total()


def test_namedtuple_subclass_methods():
    run_and_compare(_pair_methods, torch.randn(3), torch.randn(3), fullgraph=True)


def _pair_input_methods(p):
    return p.total(2) + p.diff, p.name()


def test_namedtuple_subclass_methods_on_an_input():
    run_and_compare(_pair_input_methods, _Pair(torch.randn(2), torch.randn(2)), fullgraph=True)


def _factory_as_key(d):
    if namedtuple in d:  # (the global name, as `from collections import namedtuple` binds it)
        return d[3] * 2, namedtuple is d.get("f")
    return d[3] * 3, False


def test_the_factory_itself_as_a_value():
    # collections.namedtuple looked up, compared and returned as the function it is
    t = torch.randn(3)
    run_and_compare(_factory_as_key, {collections.namedtuple: None, 3: t}, fullgraph=True)
    run_and_compare(_factory_as_key, {3: t, "f": namedtuple, namedtuple: 1}, fullgraph=True)


class Pair(NamedTuple):
    a: torch.Tensor
    b: torch.Tensor


class PairWithDict(Pair):  # no __slots__: instances have a __dict__
    pass


def _store_on_input(tup):
    tup.c = torch.tensor(3.0)
    return tup, tup.c + tup.a


def _read_instance_attr(tup):
    return tup.d * tup.a + tup.b


def test_attributes_stored_on_an_input_namedtuple_with_a_dict():
    # Note [Namedtuples: attributes of an instance with a __dict__]
    fn, backend = _compile(_store_on_input)
    eager_in = PairWithDict(torch.tensor([1.0]), torch.tensor(2.0))
    got_in = PairWithDict(torch.tensor([1.0]), torch.tensor(2.0))
    expected, got = _store_on_input(eager_in), fn(got_in)
    assert got[0] is got_in and len(backend.graphs) == 1
    torch.testing.assert_close(got_in.c, eager_in.c)
    torch.testing.assert_close(got[1], expected[1])
    with pytest.raises(AttributeError):  # a field: Python refuses, kiln breaks and runs it
        kiln.compile(lambda t: setattr(t, "a", 1), backend="eager")(got_in)


def test_instance_dict_attribute_of_an_input_namedtuple_is_read_and_guarded():
    fn, backend = _compile(_read_instance_attr)
    for d in (2.0, 5.0):
        tup = PairWithDict(torch.tensor([1.0]), torch.tensor(2.0))
        tup.d = d
        torch.testing.assert_close(fn(tup), _read_instance_attr(tup))
    assert len(backend.graphs) == 2  # the float read through the source is guarded


def _attribute_queries(tup):
    tup.c = 1
    return tup.a + 1, hasattr(tup, "c"), hasattr(tup, "d"), getattr(tup, "d", 5), hasattr(tup, "a")


def test_hasattr_and_getattr_with_default_on_an_input_namedtuple_with_a_dict():
    fn, backend = _compile(_attribute_queries)
    plain, with_d = (PairWithDict(torch.ones(1), torch.ones(1)) for _ in range(2))
    with_d.d = 7
    for tup in (plain, with_d):
        eager_tup = PairWithDict(*tup)
        eager_tup.__dict__.update(tup.__dict__)
        got, expected = fn(tup), _attribute_queries(eager_tup)
        assert got[1:] == expected[1:] and tup.c == eager_tup.c == 1
    assert len(backend.graphs) == 2  # the instance dict's keys are guarded
