"""Instances of dict subclasses: the C methods they keep, on instances from outside the frame
(reads and writes of their items) and on instances made in the frame (operators, bool,
fromkeys), with fullgraph=True, compared with eager."""

from collections import OrderedDict

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln


class Plain(dict):
    pass


class Ordered(OrderedDict):
    pass


class AttrDict(dict):
    __getattr__ = dict.get


class Counting(dict):
    def __getitem__(self, key):
        return super().__getitem__(key) + 1


class WithMissing(dict):
    def __missing__(self, key):
        return 0


def test_reads_of_an_instance_from_outside_the_frame():
    def fn(x, d, o, a):
        total = x * d.get("a") + len(d) + ("b" in d) + ("z" in d)
        for k in d:
            total = total + d[k]
        for _k, v in o.items():
            total = total * v
        if d:
            total = total + 1
        return total + a.get("q", 7) + a.scale, sorted(d.keys()), list(o.values())

    a = AttrDict(scale=2)
    run_and_compare(
        fn, torch.randn(3), Plain(a=1, b=2), Ordered(p=3), a, fullgraph=True, expected_breaks=0
    )


def test_the_keys_of_an_instance_are_guarded():
    def fn(x, d):
        return x + len(d) + ("b" in d)

    compiled = kiln.compile(fn, backend="eager", fullgraph=True)
    t = torch.zeros(1)
    assert compiled(t, Plain(a=1)).item() == 1
    assert compiled(t, Plain(a=1, b=2)).item() == 3


def test_writes_to_an_instance_from_outside_the_frame_are_replayed():
    def fn(x, d):
        d["c"] = 3
        popped = d.pop("a")
        d.update(e=5)
        got = d.setdefault("f", 6)
        return x * popped + d["c"] + got + len(d), list(d.items())

    d = Plain(a=1, b=2)
    compiled = kiln.compile(fn, backend="eager", fullgraph=True)
    expected_d = Plain(a=1, b=2)
    expected = fn(torch.ones(2), expected_d)
    got = compiled(torch.ones(2), d)
    torch.testing.assert_close(got[0], expected[0])
    assert got[1] == expected[1]
    assert type(d) is Plain and list(d.items()) == list(expected_d.items())


def test_an_overridden_getitem_is_inlined_and_reads_the_items():
    def fn(x, d):
        d["d"] = 4
        return x * d["a"] + d["d"]

    d, e = Counting(a=2), Counting(a=2)
    compiled = kiln.compile(fn, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(torch.ones(2), d), fn(torch.ones(2), e))
    assert d == e


def test_a_missing_key_of_a_class_with_missing_breaks():
    def fn(x, d):
        return x + super(WithMissing, d).__getitem__("nope")

    with pytest.raises(kiln.exc.Unsupported, match="__missing__"):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.ones(2), WithMissing(a=1))


def test_operators_of_an_instance_made_in_the_frame():
    def fn(x):
        d1, d2 = Plain(a=1, b=2), Plain(b=3)
        merged = d1 | d2
        d1 |= {"z": 0}
        ior = dict.__ior__(d2, {"y": 9})
        try:
            d1 | 1
        except TypeError as e:
            err = str(e)
        return (
            x + 1,
            type(merged),
            merged,
            d1.__eq__(Plain(a=1, b=2, z=0)),
            d1.__ne__({"a": 1}),
            d1.__eq__(1),
            type(d1.__or__(d2)),
            ior is d2,
            d2,
            err,
            bool(Plain()),
            bool(d1),
        )

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_fromkeys_of_a_subclass():
    def fn(x):
        d = Plain.fromkeys(["a", "b"], 1)
        o = Ordered.fromkeys("xy")
        try:
            Plain.fromkeys(1)
        except TypeError as e:
            err = str(e)
        return x + d["a"], type(d), d, type(o), o, err

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_setdefault_with_an_unhashable_key_raises_as_eager():
    def fn(x):
        d = Plain(a=1)
        try:
            d.setdefault([[]])
        except TypeError as e:
            return x + 1, str(e)
        return x

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


class WithNew(dict):
    def __new__(cls, *args, **kwargs):
        return super().__new__(cls, *args, **kwargs)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.made = True


class OrderedWithNew(OrderedDict):
    def __new__(cls, *args, **kwargs):
        return super().__new__(cls)


def test_a_subclass_with_its_own_new_made_in_the_frame():
    def fn(x):
        c = WithNew(a=1)
        c["key"] = x
        o = OrderedWithNew(z=2)
        return c["key"] + c["a"], "key" in c, c.made, type(c), c, type(o), o

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_dict_new_of_a_class_argument():
    def fn(x, klass):
        d = dict.__new__(klass)
        d["x"] = x * 2
        if isinstance(d, Plain):
            d.attr = 3
        return d

    for klass in (Plain, dict, OrderedDict):
        kiln.reset()
        got = kiln.compile(fn, backend="eager", fullgraph=True)(torch.ones(2), klass)
        want = fn(torch.ones(2), klass)
        assert type(got) is type(want) and list(got) == list(want)
        torch.testing.assert_close(got["x"], want["x"])
        assert getattr(got, "attr", None) == getattr(want, "attr", None)


def _views_of_a_subclass_made_in_frame(x):
    class Dict(dict):
        pass

    d = Dict()
    keys, items, mapping = d.keys(), d.items(), d.keys().mapping
    d["foo"] = x
    d.update(bar=1)
    return list(keys), [k for k, _ in items], dict(mapping)["foo"] + 1, len(mapping)


def test_views_of_a_dict_subclass_made_in_the_frame_are_live():
    # the views read the object's items as they are now, not when the view was made
    run_and_compare(_views_of_a_subclass_made_in_frame, torch.randn(2))
