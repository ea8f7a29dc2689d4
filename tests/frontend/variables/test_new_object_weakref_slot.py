"""`obj.__weakref__` of an object made in the frame is None (nothing refers to it weakly yet)."""

import weakref

import torch

import kiln


class Plain:
    pass


def test_fresh_object_has_no_weakref():
    def fn(x):
        obj = Plain()
        return x.cos() if obj.__weakref__ else x.sin()

    x = torch.randn(3)
    torch.testing.assert_close(kiln.compile(fn, backend="eager", fullgraph=True)(x), fn(x))


def test_object_held_by_a_weak_set_has_one():
    holder = weakref.WeakSet()

    def fn(x):
        obj = Plain()
        holder.add(obj)
        return (x.cos() if obj.__weakref__ is not None else x.sin()), obj

    x = torch.randn(3)
    got, _ = kiln.compile(fn, backend="eager")(x)
    torch.testing.assert_close(got, x.cos())
