"""types.MappingProxyType objects from outside the frame: live read-only views of their dict,
with fullgraph=True, compared with eager."""

import dataclasses
import types

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln

SHARED = {"a": 2, "b": 3}
PROXY = types.MappingProxyType(SHARED)


class Holder:
    scale = 4

    def method(self):
        return 1


def test_reads_of_a_proxy_input():
    def fn(x, mp):
        y = x * mp["a"] + mp.get("zz", 5) + len(mp)
        for v in mp.values():
            y = y + v
        return y, dict(mp), list(mp.items()), "b" in mp, isinstance(mp, types.MappingProxyType)

    run_and_compare(fn, torch.randn(3), types.MappingProxyType({"a": 2, "b": 3}), fullgraph=True)


def test_the_proxy_is_guarded_on_its_dict():
    def fn(x, mp):
        return x * mp["a"]

    d = {"a": 2}
    mp = types.MappingProxyType(d)
    compiled = kiln.compile(fn, backend="eager", fullgraph=True)
    assert compiled(torch.ones(1), mp).item() == 2
    d["a"] = 7
    assert compiled(torch.ones(1), mp).item() == 7
    d["new"] = 1
    assert compiled(torch.ones(1), mp).item() == 7


def test_changes_of_the_dict_show_through_the_proxy():
    def fn(x):
        SHARED["c"] = 4  # the same dict, reached by another name
        return x * PROXY["c"], len(PROXY), list(PROXY)

    try:
        expected = fn(torch.ones(1))
        del SHARED["c"]
        got = kiln.compile(fn, backend="eager", fullgraph=True)(torch.ones(1))
    finally:
        SHARED.pop("c", None)
    assert got[0].item() == expected[0].item() and got[1:] == expected[1:]


def test_a_proxy_input_is_returned_as_itself():
    def fn(x, mp):
        return x + 1, mp

    mp = types.MappingProxyType({"a": 1})
    assert kiln.compile(fn, backend="eager", fullgraph=True)(torch.ones(1), mp)[1] is mp


def test_writes_raise_as_eager():
    def fn(x, mp):
        try:
            mp["a"] = 3
        except TypeError as e:
            return x + 1, str(e)
        return x

    run_and_compare(fn, torch.randn(3), types.MappingProxyType({"a": 2}), fullgraph=True)


def test_a_class_dict():
    def fn(x):
        return x * Holder.__dict__["scale"], "method" in Holder.__dict__

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


@pytest.mark.parametrize("key", ["a", "b"])
def test_a_missing_key_raises_key_error(key):
    def fn(x, mp):
        try:
            return x * mp[key + "_missing"]
        except KeyError as e:
            return x + 1, repr(e)

    run_and_compare(fn, torch.randn(3), types.MappingProxyType({"a": 2}), fullgraph=True)


def test_field_metadata_over_a_dict_the_frame_changes():
    """A dataclass field's metadata over a dict the frame keeps is a live view, no constant
    (Note [Objects: a mappingproxy as a constant]); the empty default metadata stays one."""

    @dataclasses.dataclass
    class Point:
        x: int = dataclasses.field(metadata=SHARED_META)
        y: int = 0

    def fn(t, meta):
        before = len(dataclasses.fields(Point)[0].metadata)
        meta["unit"] = "m"
        after = dict(dataclasses.fields(Point)[0].metadata)
        plain = len(dataclasses.fields(Point)[1].metadata)
        return t + before, after, plain

    for _ in range(2):
        SHARED_META.clear()
        expected = fn(torch.ones(2), SHARED_META)
        SHARED_META.clear()
        kiln.reset()
        got = kiln.compile(fn, backend="eager")(torch.ones(2), SHARED_META)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1:] == expected[1:] == ({"unit": "m"}, 0)


SHARED_META = {}
