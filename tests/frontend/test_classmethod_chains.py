"""classmethod over something that is not a function: up to Python 3.12 `cls.f` chains to the
wrapped object's own __get__ (3.13 binds it as it is); kiln leaves that to Python, but for a
property's getter, inlined."""

import sys
import types
from enum import IntEnum

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln


class BindsToOwner:
    """A decorator whose instances bind to the class, like a classmethod written in Python."""

    def __init__(self, func):
        self.func = func

    def __call__(self, cls):
        if hasattr(self.func, "__get__"):
            return self.func.__get__(cls, cls)()
        return self.func(cls)

    def __get__(self, instance, owner=None):
        return types.MethodType(self, type(instance) if owner is None else owner)


def classmethods_of_a_class_made_in_the_frame(x):
    class A:
        @BindsToOwner
        @classmethod
        def over_classmethod(cls):
            return cls

        @classmethod
        @classmethod
        def twice(cls):
            return cls

        @classmethod
        def plain(cls):
            return cls

    bound = [A.over_classmethod, A.twice, A.plain]
    kiln.graph_break()  # the bound methods are rebuilt by the transformed code
    results = []
    for method in bound:
        try:
            results.append(method() is A)
        except TypeError as e:  # 3.13: a classmethod object is not callable
            results.append(str(e))
    return x + 1, results


class Outer:
    @classmethod
    @classmethod
    def twice(cls):
        return cls

    @BindsToOwner
    def bound(cls):
        return cls


def classmethods_of_a_global_class(x):
    bound = Outer.twice
    kiln.graph_break()
    try:
        twice = bound() is Outer
    except TypeError as e:
        twice = str(e)
    return x * 2, twice, Outer.bound() is Outer, Outer().bound() is Outer


def test_classmethod_of_a_local_class_over_other_descriptors():
    # (one call: the resume function guards on the identity of the class, new in every call)
    run_and_compare(classmethods_of_a_class_made_in_the_frame, torch.randn(3), calls=1)


def test_classmethod_of_a_global_class_over_a_classmethod():
    run_and_compare(classmethods_of_a_global_class, torch.randn(3))


def test_classmethod_of_a_new_object_reads_an_object_class_attribute():
    class Holder:
        x = 5

    class Mock:
        class_variable = Holder()

        @classmethod
        def get_class_variable(cls):
            return cls.class_variable.x

        def run(self, x):
            return self.get_class_variable() * x

    def fn(x):
        return Mock().run(x)

    compiled = run_and_compare(fn, torch.randn(4), fullgraph=True, expected_graphs=1)
    Mock.class_variable.x = 7  # (read through a source: guarded, recompiled)
    torch.testing.assert_close(compiled(torch.ones(2)), fn(torch.ones(2)))
    Mock.class_variable = Holder()
    Mock.class_variable.x = -1
    torch.testing.assert_close(compiled(torch.ones(2)), fn(torch.ones(2)))


class Index(IntEnum):
    _X = 0
    _Y = 1

    @classmethod
    @property
    def POINT(cls):
        return slice(cls._X, cls._Y + 1)


class Scaled:
    k = 3

    @classmethod
    @property
    def K(cls):
        return cls.k * 2


def class_properties(x, obj):
    x = x.clone()
    x[..., Index.POINT] = x[..., Index.POINT].tanh() * 32
    return x * Scaled.K * type(obj).K * obj.K


@pytest.mark.skipif(sys.version_info >= (3, 13), reason="3.13: classmethod no longer chains")
def test_classmethod_over_a_property_is_its_getter_for_the_class():
    compiled = run_and_compare(
        class_properties, torch.randn(3, 5), Scaled(), fullgraph=True, expected_graphs=1
    )
    Scaled.k = 4  # (read through the class's source: guarded, recompiled)
    torch.testing.assert_close(
        compiled(torch.ones(2), Scaled()), class_properties(torch.ones(2), Scaled())
    )
