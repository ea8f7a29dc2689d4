"""Classes made by class statements inside compiled frames (Note [Classes: local classes]):
bound methods of the class, bases whose metaclass or __init_subclass__ runs code, and the
objects rebuilt after a break keeping their class's shared keys."""

import sys

import torch
from frontend_helpers import assert_same, run_and_compare

import kiln


def same_as_eager(fn, x):
    """Eager and compiled (twice) return the same; each call makes new classes, and the resume
    functions guard on them, so recompiles are expected here (not run_and_compare)."""
    expected = fn(x)
    compiled = kiln.compile(fn, backend="eager")
    for _ in range(2):
        assert_same(expected, compiled(x))


made = []


class Registered(type):
    def __new__(mcls, name, bases, ns):
        made.append(name)
        return super().__new__(mcls, name, bases, ns)


class Base(metaclass=Registered):
    pass


class Hooked:
    def __init_subclass__(cls):
        made.append(cls.__name__)


def mro_of_a_local_class(x):
    class A:
        pass

    class B(A):
        pass

    order = B.mro()  # C method bound to the class made while tracing
    return x + 1, order == [B, A, object], order[1] is A


def test_bound_c_method_of_a_local_class():
    run_and_compare(mro_of_a_local_class, torch.ones(2))


def subclass_with_metaclass(x):
    del made[:]

    class Child(Base):
        pass

    class Other(Hooked):
        pass

    return x + len(made), list(made), type(Child).__name__, Other.__name__


def test_local_subclass_runs_metaclass_and_init_subclass():
    same_as_eager(subclass_with_metaclass, torch.ones(2))


def attribute_sizes(x):
    class A:
        pass

    a, b = A(), A()
    b.x = 1
    b.y = 2
    kiln.graph_break()
    return x + 1, sys.getsizeof(vars(b)), sys.getsizeof(vars(a)), list(vars(b))


def test_rebuilt_objects_share_their_class_keys():
    same_as_eager(attribute_sizes, torch.ones(2))


def super_call_that_breaks_in_a_local_class(x):
    marker = object()  # a free variable of the class body: the class is made in Python

    class Base:
        def method(self, t):
            return t + 1, marker

    class Child(Base):
        def method(self, t, /):
            return super().method(t)  # breaks inside: Child.method runs as the run's function

    out, got = Child().method(x)
    return out, got is marker


def test_method_of_a_local_class_is_the_runs_own_at_a_break():
    # the method a break hands to Python is the one the run's class statement made: its
    # __class__ cell (zero-argument super) and free variables are the run's, not the trace's
    same_as_eager(super_call_that_breaks_in_a_local_class, torch.randn(3))


def static_and_class_methods_that_break(x):
    class Base:
        @staticmethod
        def scale(cls, t):
            return t * 2, cls.__name__

        @classmethod
        def shift(cls, t):
            return t - 1, cls.__name__

    class Mid(Base):
        def scale(cls, t):  # a plain function, called on the class
            return super().scale(cls, t)  # breaks: super(cls, cls).scale is a staticmethod

    class Leaf(Mid):
        @staticmethod
        def scale(cls, t):
            return super().scale(cls, t)

        @classmethod
        def shift(cls, t):
            kiln.graph_break()
            return super().shift(t + 1)

    out = [Leaf.scale(Leaf, x), Leaf.shift(x)]
    return out, Leaf.scale(Leaf, x + 1)


def test_static_and_class_methods_of_a_local_class_at_a_break():
    # the function of a staticmethod or classmethod handed to Python at a break is the run's own
    # too: its zero-argument super() sees the class the run made
    same_as_eager(static_and_class_methods_that_break, torch.randn(3))
