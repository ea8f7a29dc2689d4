"""dict's own methods called on an OrderedDict (they read and change its items, bypassing its
order list), OrderedDict's methods read from the class, and `d | od`, compared with eager."""

from collections import OrderedDict

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln


def test_dict_reads_of_an_ordered_dict():
    def fn(x):
        od = OrderedDict(a=1, b=2)
        other = OrderedDict(b=2, a=1)
        return (
            x + len(dict.keys(od)),
            sorted(dict.items(od)),
            ("a", 1) in dict.items(od),
            2 in dict.values(od),
            dict.__eq__(od, other),  # dict's == ignores order
            od == other,  # OrderedDict's does not
            dict.__ne__(od, other),
            type(dict.copy(od)),
            dict.copy(od),
            type(dict.__or__(od, {"c": 3})),
            dict.__or__(od, {"c": 3}),
        )

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_dict_changes_of_an_ordered_dict_read_through_storage():
    def fn(x):
        od = OrderedDict(a=1, b=2)
        dict.update(od, {"c": 3})
        popped = OrderedDict(a=1, b=2)
        key, value = dict.popitem(popped)
        cleared = OrderedDict(a=1)
        dict.clear(cleared)
        merged = OrderedDict(a=1)
        same = dict.__ior__(merged, {"q": 4})
        return (
            x * len(od),
            od["c"],
            "c" in od,
            od.get("c"),
            od == {"a": 1, "b": 2, "c": 3},  # a plain dict: the storages compare
            sorted(dict.keys(od)),
            key,
            value,
            len(popped),
            len(cleared),
            same is merged,
            merged["q"],
        )

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_order_list_read_after_dict_changed_the_keys_breaks():
    def fn(x):
        od = OrderedDict(a=1, b=2)
        dict.update(od, {"c": 3})
        return x + len(list(od))  # CPython walks the stale order list here: ["a", "b"]

    with pytest.raises(kiln.exc.Unsupported, match="order list"):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.randn(2))
    run_and_compare(fn, torch.randn(3))


def test_dict_changing_the_keys_of_an_input_ordered_dict_breaks():
    def fn(x, od):
        dict.update(od, {"c": 3})
        return x + 1

    with pytest.raises(kiln.exc.Unsupported, match="outlives the frame"):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.randn(2), OrderedDict(a=1))


def test_value_change_through_dict_keeps_the_order_list():
    def fn(x, od):
        dict.update(od, {"a": 5})  # same keys: the order list still matches
        dict.__setitem__(od, "b", 7)
        return x + od["a"], list(od), od

    run_and_compare(fn, torch.randn(3), OrderedDict(a=1, b=2), fullgraph=True)


def test_ordered_dict_methods_read_from_the_class():
    def fn(x):
        od = OrderedDict.fromkeys("abcde")
        OrderedDict.move_to_end(od, "a")
        OrderedDict.move_to_end(od, "e", last=False)
        first = od.popitem(False)
        last = OrderedDict.popitem(od, last=True)
        return x + 1, "".join(od), first, last, list(OrderedDict.keys(od))

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_or_with_an_ordered_dict_on_the_right():
    def fn(x):
        od = OrderedDict(a=1)
        plain = {"b": 2}
        left, right = plain | od, od | plain  # OrderedDict's __ror__ runs first
        return x + 1, type(left), left, type(right), right

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_a_defaultdict_without_a_factory_raises_key_error():
    from collections import defaultdict

    def fn(x, given):
        d = defaultdict()
        try:
            d[1] += 42
        except KeyError as e:
            d[1] = 1
            err = repr(e)
        try:
            given["zz"]
        except KeyError as e:
            err2 = repr(e)
        return x + d[1], d, err, err2

    run_and_compare(fn, torch.randn(3), defaultdict(None, {"a": 1}), fullgraph=True)
