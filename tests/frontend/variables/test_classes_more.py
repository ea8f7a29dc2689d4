"""Class machinery inside compiled code: metaclasses keeping type.__call__, dataclasses, every
form of super(), typing generics, enums and id(), with fullgraph=True, compared with eager."""

import dataclasses
import enum
import gc
import typing

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln


class Meta(type):
    pass


class WithMeta(metaclass=Meta):
    def __init__(self, v):
        self.v = v


@dataclasses.dataclass
class Settings:
    scale: int = 2
    names: list = dataclasses.field(default_factory=lambda: ["a"])


class Base:
    def f(self):
        return 1

    @classmethod
    def make(cls):
        return 10

    @staticmethod
    def s():
        return 100


class Left(Base):
    def f(self):
        return super().f() + 2

    @classmethod
    def make(cls):
        return super().make() + 1


class Right(Base):
    def f(self):
        return super().f() + 3


class Both(Left, Right):
    def f(self):
        return super().f() * 10  # Left, then Right (the MRO), then Base

    @classmethod
    def make(cls):
        return super().make() * 2


T = typing.TypeVar("T")


class Box(typing.Generic[T]):
    def __init__(self, v):
        self.v = v


class SlotBox(typing.Generic[T]):
    __slots__ = ("v",)

    def __init__(self, v):
        self.v = v


class Color(enum.Enum):
    RED = 1
    GREEN = 2


registry = {"k": Base()}


def metaclass_instance(x):
    return x * WithMeta(3).v


def dataclass_defaults(x):
    s = Settings()
    t = dataclasses.replace(s, scale=5)
    return (
        x * s.scale + t.scale,
        s.names,
        len(dataclasses.fields(s)),
        dataclasses.asdict(s),
        dataclasses.astuple(t),
    )


def supers(x):
    return x + Left().f() + Left.make() + Right().f() + Both().f() + Both.make() + Left.s()


def generics(x):
    b = Box[int](x)
    runtime_aliases = (typing.List[int], typing.Optional[int])  # noqa: UP006, UP045
    return b.v + 1, isinstance(b, Box), Box[int], list[int], runtime_aliases


def enums(x):
    c = Color.RED
    return x + c.value, c is Color.RED, c == Color.GREEN, c.name, Color(2), Color["GREEN"]


def ids(x):
    a = registry["k"]
    return x + (id(a) == id(registry["k"])), id(Base) == id(Base)


@pytest.mark.parametrize(
    "fn", [metaclass_instance, dataclass_defaults, supers, generics, enums, ids]
)
def test_classes(fn):
    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def slotted_generic(x):
    b = SlotBox[int](x)  # typing's __orig_class__ store raises on a __slots__ class: ignored
    b.v = b.v + 1
    try:
        b.other = 1
    except AttributeError:
        pass
    gc.collect()  # a break: b is rebuilt, with its slot and no __orig_class__
    return b.v, hasattr(b, "__orig_class__")


def test_a_generic_alias_call_on_a_slots_class():
    run_and_compare(slotted_generic, torch.randn(3), expected_breaks=1)


def test_dataclass_replace_of_an_input():
    s = Settings(scale=7)

    def fn(x, s):
        return x * dataclasses.replace(s, names=["b"]).scale

    run_and_compare(fn, torch.randn(3), s, fullgraph=True, expected_breaks=0)


def test_id_is_guarded_on_the_object():
    def fn(x, o):
        return x + 1, id(o)

    kiln.reset()
    compiled = kiln.compile(fn, backend="eager", fullgraph=True)
    a, b = Base(), Base()
    assert compiled(torch.zeros(1), a)[1] == id(a)
    assert compiled(torch.zeros(1), b)[1] == id(b)  # another object: recompiled


def test_id_of_an_object_made_inside_breaks():
    def fn(x):
        return x + 1, id(Base()) > 0

    kiln.reset()
    assert kiln.compile(fn, backend="eager")(torch.zeros(1))[1] is True
    assert any("id()" in reason for reason in kiln.counters["graph_break"])


# a frozenset of non-literals, as 3.13's dataclasses has
_TYPES = frozenset({int, float, str, type(None)})


def frozenset_of_types_membership(x):
    return x + 1, int in _TYPES, type(x) in _TYPES, list not in _TYPES


def test_membership_in_a_frozenset_from_a_global():
    run_and_compare(frozenset_of_types_membership, torch.randn(3), fullgraph=True)


def staticmethod_on_a_local_instance(x):
    class Doubler:
        @staticmethod
        def twice(t):
            return t + t

    return Doubler().twice(x)


def test_staticmethod_through_an_instance_made_inside():
    run_and_compare(staticmethod_on_a_local_instance, torch.ones(2, 3), fullgraph=True)


def _make_vector_sum():
    class Vec:  # a class of the enclosing function: its methods read it from a cell
        def __init__(self, val):
            self.val = val

        def __add__(self, other):
            return Vec(self.val + other.val)

        def __mul__(self, other):
            return Vec(self.val * other.val)

    def vector_sum(a, b):
        return (Vec(a) + Vec(b) * Vec(a)).val

    return vector_sum


def test_methods_of_a_closure_class_that_name_it():
    run_and_compare(_make_vector_sum(), torch.ones(2), torch.full((2,), 3.0), fullgraph=True)
