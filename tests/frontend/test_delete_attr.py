"""`del obj.name` in a compiled frame: of objects made there, and of an attribute the frame itself
stored on an input object (nothing left to replay), compared with eager."""

import pytest
import torch

import kiln


class Pair:
    def __init__(self, a, b):
        self.a = a
        self.b = b


class WithDefault:
    b = 7

    def __init__(self):
        self.b = 1


def deletes(x, obj):
    del obj.a
    obj.c = x + 1
    del obj.c
    tmp = Pair(x + 2, x + 3)
    del tmp.b
    w = WithDefault()
    del w.b
    return tmp, hasattr(tmp, "b"), w.b, hasattr(obj, "a"), hasattr(obj, "c")


def _state(value):
    """What a result looks like, objects by their attributes."""
    if isinstance(value, (Pair, WithDefault)):
        return type(value), {k: _state(v) for k, v in vars(value).items()}
    if isinstance(value, tuple):
        return tuple(_state(v) for v in value)
    if isinstance(value, torch.Tensor):
        return value.tolist()
    return value


def test_deletions_match_eager():
    x = torch.zeros([])
    eager_obj, compiled_obj = Pair(x, x), Pair(x, x)
    expected = deletes(x, eager_obj)
    got = kiln.compile(deletes, backend="eager", fullgraph=True)(x, compiled_obj)
    assert _state(got) == _state(expected)
    assert _state(compiled_obj) == _state(eager_obj)  # a gone, c never left behind


def test_deleting_twice_raises_attribute_error_as_eagerly():
    def fn(x):
        t = Pair(x, x)
        del t.a
        del t.a

    with pytest.raises(AttributeError, match="'Pair' object has no attribute 'a'"):
        fn(torch.ones(1))
    with pytest.raises(AttributeError, match="'Pair' object has no attribute 'a'"):
        kiln.compile(fn, backend="eager")(torch.ones(1))


def test_a_deleted_attribute_returns_from_a_compiled_frame_as_missing():
    class Flagged:
        def __init__(self, val):
            self.val = val
            self.deleted = False

    def fn(x):
        a, b = Flagged(1), Flagged(2)
        del a.val
        del b.val
        return x + 1, hasattr(a, "val"), hasattr(b, "val"), a.deleted, a

    x = torch.ones(2)
    expected = fn(x)
    got = kiln.compile(fn, backend="eager", fullgraph=True)(x)
    torch.testing.assert_close(got[0], expected[0])
    assert got[1:4] == expected[1:4]
    assert vars(got[4]) == vars(expected[4])


def test_an_attribute_stored_and_deleted_on_an_input_leaves_nothing_behind():
    """Was a wrong result: the replay ran `del obj.c` alone and raised AttributeError."""

    class Plain:
        pass

    def fn(x, obj):
        obj.c = x + 1
        del obj.c
        return x * 2

    obj = Plain()
    out = kiln.compile(fn, backend="eager")(torch.ones(1), obj)
    torch.testing.assert_close(out, torch.full((1,), 2.0))
    assert vars(obj) == {}


class KeepsVal:
    def __init__(self, val):
        self.val = val
        self.attempted = False

    def __delattr__(self, name):
        if name == "val":
            self.attempted = True
        else:
            super().__delattr__(name)


def test_a_class_own_delattr_runs_as_eagerly():
    def fn(x):
        k = KeepsVal(x)
        del k.val  # refused by the class's __delattr__
        del k.attempted  # passed on to object.__delattr__
        return x + 1, hasattr(k, "val"), hasattr(k, "attempted"), k.val

    x = torch.ones(2)
    expected = fn(x)
    got = kiln.compile(fn, backend="eager", fullgraph=True)(x)
    assert _state(got) == _state(expected)
