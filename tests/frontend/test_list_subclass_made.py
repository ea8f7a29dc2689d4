"""Instances of a list subclass that only adds methods, made in the frame, compiled vs eager
(Note [Lists: subclass instances made in the frame])."""

import torch
from frontend_helpers import run_and_compare


class Processors(list):
    def __call__(self, x):
        for processor in self:
            x = processor(x)
        return x

    def length_times_10(self):
        return len(self) * 10

    def append_twice(self, x):
        self.extend([x, x])


def test_list_methods_and_own_methods():
    def fn(a, b):
        items = Processors()
        items.extend([True])
        items.append(a)
        items.extend([b])
        items.pop(0)
        items.append(items.length_times_10())
        return sum(items)

    run_and_compare(fn, torch.randn(10), torch.randn(10), fullgraph=True, expected_graphs=1)


def test_returned_instance_keeps_its_class():
    def fn(a, b):
        l1 = Processors([a + 1])
        l2 = Processors([b + 2])
        l1.extend(l2)
        l1.append_twice(a)
        plain = type(l1.copy()) is list, type(l1 + [a]) is list, type(l1[1:]) is list
        return l1, type(l1) is Processors, isinstance(l1, list), len(l1), l1[1:], plain

    run_and_compare(fn, torch.randn(3), torch.randn(3), fullgraph=True, expected_graphs=1)


def test_own_call_over_its_items():
    def fn(x):
        chain = Processors([torch.sin, torch.cos])
        return chain(x), chain.__class__ is Processors

    run_and_compare(fn, torch.randn(4), fullgraph=True, expected_graphs=1)
