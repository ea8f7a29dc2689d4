"""A dict input is guarded by the keys the trace reads (Note [Dicts: inputs guarded by the keys
read]): changes elsewhere in it reuse the compiled entry; whole-dict reads guard every key."""

import collections

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln

CONFIG = {"scale": 2, "step": 0, "name": "run"}


def scaled(x):
    return x * CONFIG["scale"]


@pytest.fixture
def strict():
    """error_on_recompile for the second and later calls."""
    yield lambda: setattr(kiln.config, "error_on_recompile", True)
    kiln.config.error_on_recompile = False


def test_keys_not_read_change_without_recompiling(strict):
    kiln.reset()
    compiled = kiln.compile(scaled, backend="eager", fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x * 2)
    strict()
    CONFIG["step"] += 1  # a value not read
    CONFIG["extra"] = torch.ones(1)  # a key added
    del CONFIG["name"]  # a key removed
    try:
        torch.testing.assert_close(compiled(x), scaled(x))
    finally:
        CONFIG.pop("extra")
        CONFIG["name"] = "run"


def test_the_value_read_is_guarded():
    kiln.reset()
    compiled = kiln.compile(scaled, backend="eager", fullgraph=True)
    x = torch.randn(3)
    compiled(x)
    CONFIG["scale"] = 5
    try:
        torch.testing.assert_close(compiled(x), x * 5)
        assert kiln.counters["stats"]["recompiles"] == 1
    finally:
        CONFIG["scale"] = 2


def test_a_key_read_then_removed_raises_as_eager():
    kiln.reset()
    compiled = kiln.compile(scaled, backend="eager")
    x = torch.randn(3)
    compiled(x)
    del CONFIG["scale"]
    try:
        with pytest.raises(KeyError):
            scaled(x)
        with pytest.raises(KeyError):
            compiled(x)
    finally:
        CONFIG["scale"] = 2


def membership(x, d):
    if "skip" in d:
        return x - 1
    return x * d.get("gain", 3) + d.get("bias", 0)


def test_in_and_get_guard_absent_keys_too():
    kiln.reset()
    compiled = kiln.compile(membership, backend="eager")
    x = torch.randn(3)
    for d in ({"gain": 2}, {"gain": 2, "other": 1}, {"gain": 2, "bias": 1}, {"skip": 0}):
        torch.testing.assert_close(compiled(x, d), membership(x, d))
    # the first two share an entry; "bias" and "skip" appearing each recompile
    assert kiln.counters["stats"]["recompiles"] == 2


def equal_keys(x, d):
    return x + d[1] + d[True]  # 1 and True are one key


def test_equal_keys_read_the_same_item():
    run_and_compare(equal_keys, torch.ones(2), {1: 5, "a": 0})


def whole_reads(x, d):
    out = x * d["a"]
    return out + len(d), [k for k in d], sorted(d.values())


def test_reading_the_whole_dict_guards_every_key():
    kiln.reset()
    compiled = kiln.compile(whole_reads, backend="eager", fullgraph=True)
    x = torch.randn(2)
    for d in ({"a": 1, "b": 2}, {"a": 1, "b": 2, "c": 3}, {"b": 2, "a": 1}):
        got, want = compiled(x, d), whole_reads(x, d)
        torch.testing.assert_close(got[0], want[0])
        assert got[1:] == want[1:]
    assert kiln.counters["stats"]["recompiles"] == 2  # new key, new order


def store_after_read(x, d):
    y = x * d["a"]
    d["b"] = d.get("b", 0) + 1
    return y


def test_a_store_after_reads_is_replayed_on_the_dict():
    run_and_compare(store_after_read, torch.ones(2), {"a": 2, "c": torch.zeros(1)})
    run_and_compare(store_after_read, torch.ones(2), {"a": 2, "b": 7})


def unread_tensor(x, d):
    return x + d["w"]


def test_tensors_not_read_are_not_graph_inputs():
    kiln.reset()
    seen = []

    def backend(gm, example_inputs):
        seen.append(len(example_inputs))
        return gm.forward

    compiled = kiln.compile(unread_tensor, backend=backend, fullgraph=True)
    x = torch.randn(2)
    d = {"w": torch.ones(2), "big": torch.ones(1000), "other": torch.zeros(3)}
    torch.testing.assert_close(compiled(x, d), x + 1)
    assert seen == [2]  # x and d["w"]
    d["big"] = torch.ones(5, 5)  # a tensor not read changes shape: no recompile
    torch.testing.assert_close(compiled(x, d), x + 1)
    assert seen == [2]


class ReversedDict(dict):
    def __iter__(self):
        return reversed(list(self.keys()))


def subclass_with_python_iter(x, d):
    d.sample = 1
    d["baz"] = 4
    return x * d["foo"] * d["bar"], [k for k in d], list(d.items())


def test_dict_subclass_with_a_python_iter_is_traced_without_recompiles(strict):
    kiln.reset()
    x = torch.randn(4)
    d_eager, d_comp = ReversedDict(foo=1, bar=2), ReversedDict(foo=1, bar=2)
    compiled = kiln.compile(subclass_with_python_iter, backend="eager", fullgraph=True)
    for call in range(3):
        if call == 2:
            strict()  # the first call added "baz": the second compiled for it, the third reuses
        want, got = subclass_with_python_iter(x, d_eager), compiled(x, d_comp)
        torch.testing.assert_close(got[0], want[0])
        assert got[1:] == want[1:]
        assert list(d_comp) == list(d_eager) and d_comp == d_eager and d_comp.sample == 1


class SlotSetter(collections.OrderedDict):
    """An OrderedDict subclass with its own __iter__, an object kiln leaves opaque."""

    def __iter__(self):
        return iter(sorted(dict.keys(self)))


def setitem_on_opaque(x, d):
    d.__setitem__("k", 1)  # a method-wrapper bound to the input: guarded by type and name
    return x + 1


def test_a_bound_slot_wrapper_is_not_guarded_by_identity(strict):
    kiln.reset()
    compiled = kiln.compile(setitem_on_opaque, backend="eager")
    x = torch.randn(2)
    d = SlotSetter(a=1)
    compiled(x, d)
    strict()
    torch.testing.assert_close(compiled(x, d), x + 1)
    assert d == {"a": 1, "k": 1}
