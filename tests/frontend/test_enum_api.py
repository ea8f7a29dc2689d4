"""Enum's functional API in compiled code (Note [Enums: classes made by the functional API]): the
class is made while tracing from constants; eager is the oracle, and a class or member that
leaves the frame is new per call as in eager."""

import collections
import enum

import torch

import kiln
from tests.frontend.frontend_helpers import CountingBackend, assert_same


def _compiled(fn):
    kiln.reset()
    counting = CountingBackend()
    return kiln.compile(fn, backend=counting), counting


def _from_mapping(x):
    Level = enum.Enum("Level", collections.OrderedDict(low=2, high=7))
    return x * Level.high.value + Level["low"].value, Level.low.name


def _from_names(x):
    Pick = enum.IntEnum("Pick", "first second third", start=10)
    return x + Pick.third + len(Pick), [m.name for m in Pick]


def test_enum_classes_from_constants_are_one_graph():
    x = torch.randn(3)
    for fn in (_from_mapping, _from_names):
        compiled, counting = _compiled(fn)
        assert_same(fn(x), compiled(x))
        assert_same(fn(x), compiled(x))
        assert len(counting.graphs) == 1
        assert kiln.counters["graph_break"] == {}


def _returns_class(x):
    Kind = enum.Enum("Kind", ["a", "b"])
    return x + 1, Kind, Kind.b


def test_a_class_made_by_the_call_is_new_per_call():
    compiled, _ = _compiled(_returns_class)
    x = torch.randn(2)
    first, second = compiled(x), compiled(x)
    assert_same(_returns_class(x)[0], first[0])
    assert first[1] is not second[1] and first[2] is not second[2]
    assert first[2] is first[1].b and first[1].__name__ == "Kind"


def _module_of(x):
    Kind = enum.Enum("Kind", "a")
    return x + Kind.a.value, Kind.__module__


def test_the_module_is_the_callers():
    compiled, _ = _compiled(_module_of)
    x = torch.randn(2)
    assert compiled(x)[1] == __name__ == _module_of(x)[1]
