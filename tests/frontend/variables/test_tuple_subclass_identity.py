"""A namedtuple subclass's instance made while tracing has a __dict__: it is rebuilt once at a
break, so attributes set on it afterwards stay on the object the code goes on with."""

import collections

import torch
from frontend_helpers import run_and_compare


class Point(collections.namedtuple("PointBase", "x y")):
    pass


def set_attribute_after_making(x):
    p = Point(3, 4)
    p.extra = 5  # (breaks: set in Python on the rebuilt object)
    return x + p.x, p.extra, vars(p), tuple(p)


def test_attributes_stay_on_the_rebuilt_instance():
    run_and_compare(set_attribute_after_making, torch.ones(2))
