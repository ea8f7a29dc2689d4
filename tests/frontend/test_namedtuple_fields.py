"""`nt._fields` of a namedtuple (an input or one made in the frame): the class's field names,
read without a graph break."""

import collections

import torch
from frontend_helpers import assert_same

import kiln

Point = collections.namedtuple("Point", ["x", "y", "z"])


def count_fields(packed):
    a, b, c = packed
    return a + b * len(packed._fields), packed._fields


def fields_of_new(x):
    p = Point(x, x + 1, 2)
    return {name: getattr(p, name) for name in p._fields}


def test_fields_of_input_namedtuple():
    kiln.reset()
    compiled = kiln.compile(count_fields, fullgraph=True)
    p = Point(torch.randn(2), torch.randn(2), torch.randn(2))
    assert_same(count_fields(p), compiled(p))


def test_fields_of_namedtuple_made_in_frame():
    kiln.reset()
    compiled = kiln.compile(fields_of_new, fullgraph=True)
    x = torch.randn(3)
    assert_same(fields_of_new(x), compiled(x))
