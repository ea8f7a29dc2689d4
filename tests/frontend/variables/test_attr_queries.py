"""hasattr/getattr on partials, namedtuples, functions and objects with __getattr__, compiled
with fullgraph=True and compared with eager."""

import functools
from collections import namedtuple

import pytest
import torch
from frontend_helpers import run_and_compare

Point = namedtuple("Point", "a b")


def target(x, y=2, *, z=3):
    "the doc"
    return x + y + z


@functools.wraps(target)
def wrapper(*args, **kwargs):
    return target(*args, **kwargs)


bound = functools.partial(target, 1, z=4)


def partial_made_inside(x):
    p = functools.partial(target, x, z=5)
    return p.func(*p.args, **p.keywords), hasattr(p, "func"), hasattr(p, "nope"), len(p.args)


def partial_from_outside(x):
    return x + bound.args[0] + bound.keywords["z"], bound.func is target, hasattr(bound, "args")


def namedtuple_queries(x):
    p = Point(x, 2)
    q = p._replace(b=5)
    return (
        q.b * p.a,
        p._asdict()["b"],
        len(Point._fields),
        hasattr(p, "_fields"),
        hasattr(p, "_replace"),
        hasattr(p, "c"),
        getattr(p, "c", 7),
    )


def namedtuple_of_constants_keeps_its_class(x):
    return x + hasattr(Point(1, 2), "_fields"), Point(1, 2)


def function_attributes(x):
    return (
        x + target.__defaults__[0] + target.__kwdefaults__["z"],
        target.__name__,
        target.__qualname__,
        target.__module__,
        target.__doc__,
        wrapper.__wrapped__ is target,
        wrapper.__name__,
        hasattr(target, "__wrapped__"),
        hasattr(wrapper, "__wrapped__"),
    )


def with_calls(x):
    return x * with_calls.scale


with_calls.scale = 3


class Lazy:
    def __init__(self):
        self.real = {"w": 2}

    def __getattr__(self, name):
        if name in ("w",):
            return 5
        raise AttributeError(name)


class KeyErrorGetattr:
    def __getattr__(self, name):
        raise KeyError(name)


def getattr_hook(x):
    o = Lazy()
    return x + o.w + hasattr(o, "q") + getattr(o, "q", 7) + hasattr(o, "w")


def getattr_hook_keyerror(x):
    try:
        hasattr(KeyErrorGetattr(), "q")  # not an AttributeError: it propagates
    except KeyError as e:
        return x + len(e.args)
    return x


def container_hasattr(x):
    d, s, t = {"a": x}, {1}, (x, x)
    return (
        x,
        hasattr(d, "keys"),
        hasattr(d, "foo"),
        hasattr(s, "add"),
        hasattr(t, "index"),
        hasattr(t, "append"),
    )


@pytest.mark.parametrize(
    "fn",
    [
        partial_made_inside,
        partial_from_outside,
        namedtuple_queries,
        namedtuple_of_constants_keeps_its_class,
        function_attributes,
        with_calls,
        getattr_hook,
        getattr_hook_keyerror,
        container_hasattr,
    ],
)
def test_attribute_queries(fn):
    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_function_attribute_is_guarded():
    import kiln

    kiln.reset()
    compiled = kiln.compile(with_calls, backend="eager", fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x * 3)
    with_calls.scale = 4
    try:
        torch.testing.assert_close(compiled(x), x * 4)
    finally:
        with_calls.scale = 3


class Slotted:
    __slots__ = ("x", "y")


class SlottedSet(set):
    __slots__ = ("x", "y", "__dict__")


def slots_made_inside(x):
    p, s = Slotted(), SlottedSet([1])
    p.x = 1
    s.x = 2
    return x + 1, hasattr(p, "x"), hasattr(p, "y"), hasattr(s, "x"), hasattr(s, "y")


def slots_of_an_input(x, p):
    return x + 1, hasattr(p, "x")


def test_hasattr_on_unset_slots():
    run_and_compare(slots_made_inside, torch.ones(2), fullgraph=True)
    p = Slotted()
    p.x = 3
    run_and_compare(slots_of_an_input, torch.ones(2), p, fullgraph=True)
    run_and_compare(slots_of_an_input, torch.ones(2), Slotted(), expected_breaks=1)
