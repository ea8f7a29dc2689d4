"""`desc.__get__(obj)` of a C getset/member descriptor, compiled vs eager (Note [Objects: a C
descriptor's __get__ called])."""

import inspect

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln

_get_dunder_dict = type.__dict__["__dict__"].__get__


class _Point:
    __slots__ = ("x", "y")

    def __init__(self, x, y):
        self.x, self.y = x, y


class _Holder:
    a = 1
    b = 2
    param = inspect.Parameter("x", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=42)


def test_type_dict_get_of_a_class():
    def fn(x):
        d = _get_dunder_dict(_Holder)
        return x + len(d) + d["a"] + d["param"].default

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_graphs=1)


def test_tensor_getset_passed_in():
    def fn(g, x):
        torch.sin(x)
        return g.__get__(x), g.__get__(x, torch.Tensor)

    run_and_compare(fn, torch.Tensor.shape, torch.ones(2, 3), fullgraph=True, expected_graphs=1)


def test_slot_member_descriptor():
    def fn(x, p):
        return x * _Point.__dict__["x"].__get__(p) + _Point.y.__get__(p)

    run_and_compare(fn, torch.ones(2), _Point(3.0, 4.0), fullgraph=True, expected_graphs=1)


def test_a_descriptor_of_another_class_is_a_break():
    def fn(x, obj):
        return x + len(_get_dunder_dict(obj))

    with pytest.raises(kiln.exc.Unsupported, match="another class"):
        kiln.compile(fn, fullgraph=True)(torch.ones(1), _Point(1, 2))
    with pytest.raises(TypeError):  # (as eager: the descriptor refuses a non-class)
        fn(torch.ones(1), _Point(1, 2))
