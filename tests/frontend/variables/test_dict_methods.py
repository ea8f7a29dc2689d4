"""dict methods read from the class, dict errors raised as eager raises them, and the in-place
and mixed set operators of dict views, with fullgraph=True, compared with eager."""

import operator
import types
from collections import OrderedDict, defaultdict

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln


def test_dict_methods_called_on_the_class():
    def fn(x):
        d = {"a": 1, "b": 2}
        same = {"a": 1, "b": 2}
        od = OrderedDict(p=3)
        dict.update(d, c=3)
        dict.setdefault(d, "e", 5)
        popped = dict.pop(d, "e")
        it = dict.__iter__(d)
        return (
            x + dict.get(d, "a") + dict.get(od, "p"),  # OrderedDict keeps dict's get
            dict.__eq__(d, same),
            dict.__ne__(d, same),
            d.__eq__(1),  # NotImplemented, as eager
            "c" in dict.keys(d),
            sorted(dict.values(d)),
            dict.copy(d),
            dict.__ior__(same, {"z": 0}),
            popped,
            next(it),
            d,
        )

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


class _OwnKeys(dict):
    def keys(self):
        return ["z"]


def test_dict_method_the_subclass_overrides_breaks():
    def fn(x):
        return x + len(dict.keys(_OwnKeys(a=1)))  # bypasses _OwnKeys.keys

    with pytest.raises(kiln.exc.Unsupported, match="overrides it"):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.randn(2))


def test_dict_errors_are_raised_as_eager_raises_them():
    def bad_pair(x):
        try:
            {}.update([(1, 2, 3)])
        except ValueError as e:
            return x + 1, str(e)
        return x

    def two_args(x):
        try:
            {}.update({}, {})
        except TypeError as e:
            return x + 1, str(e)
        return x

    def unhashable_key(x):
        try:
            return {[1, 2]: x}
        except TypeError as e:
            return x + 1, str(e)

    def or_with_an_int(x):
        try:
            return {"a": x} | 1
        except TypeError as e:
            return x + 1, str(e)

    for fn in (bad_pair, two_args, unhashable_key, or_with_an_int):
        run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_an_uncaught_exception_under_fullgraph_says_so():
    def fn(x):
        return {[1]: x}

    with pytest.raises(kiln.exc.Unsupported, match="Observed exception: TypeError"):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.randn(2))


class _MySet(set):
    pass


_OPS = ["or_", "and_", "xor", "sub", "ior", "iand", "ixor", "isub", "lt", "le", "gt", "ge", "eq"]


@pytest.mark.parametrize("name", _OPS)
def test_dict_views_with_sets_views_and_set_subclasses(name):
    op = getattr(operator, name)

    def fn(x):
        keys = {"one": 1, "two": 2, "three": 3}.keys()
        items = {"one": 1, "two": 2}.items()
        s = {"one", "four"}
        u = _MySet({"one", "four"})
        pairs = {("one", 1)}
        results = (
            op(keys, s),
            op(s, keys),  # `s op= keys` makes a new set: s is left as it was
            op(keys, u),
            op(u, keys),
            op(items, u),
            op(u, items),
            op(items, pairs),
            op(pairs, items),
            op(keys, items),
        )
        return x + 1, results, [type(r) for r in results], s, u, pairs

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


class _SubDict(dict):
    pass


def test_ordered_dict_fromkeys_and_class_equality():
    def fn(x):
        d = OrderedDict.fromkeys("abc")
        d.move_to_end("a")
        return (
            x + 1,
            d,
            type(d),
            dict == OrderedDict,  # noqa: E721 (== of classes is what is tested)
            OrderedDict == OrderedDict,  # noqa: E721 (== of classes is what is tested)
            _SubDict != dict,  # noqa: E721 (== of classes is what is tested)
            type(d) == OrderedDict,  # noqa: E721 (== of classes is what is tested)
        )

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_dict_subclass_instances_made_in_the_frame():
    def fn(x):
        a = _SubDict(a=1)
        b = _SubDict(b=2)
        c = a.copy()  # dict.copy: a plain dict
        a["z"] = 3
        last = a.popitem()
        return (
            x + 1,
            a == _SubDict(a=1),
            a != {"a": 1},
            a | b,  # dict.__or__: a plain dict
            type(a | b),
            c,
            type(c),
            last,
            b == a,
            a,
            type(a),
        )

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_defaultdict_with_items_and_keywords_and_dict_repr():
    def fn(x):
        d = dict([("a", 1), ("b", 2)], c=3)
        dd = defaultdict(list, d, d=4, e=5)
        dd["x"].append(42)
        counts = defaultdict(int, a=1, b=2)
        counts["c"] += 1
        return x + 1, d, dd, counts, repr(OrderedDict(a=1, b=2)), repr({"q": (1, 2)})

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_dict_calls_with_bad_arguments_raise_as_eager():
    def fn(x):
        out = []
        d = {"a": 1}
        calls = (
            lambda: d.popitem(1),
            lambda: d.keys(1),
            lambda: d.pop(),
            lambda: d.setdefault([[]]),
            lambda: d.update(1),
            lambda: dict.fromkeys(),
            lambda: dict.fromkeys(1, 2),
            lambda: d.get(),
        )
        for call in calls:
            try:
                call()
                out.append("no error")
            except TypeError as e:
                out.append(str(e))
        sub = _SubDict(a=1, b=2)
        return x + 1, out, d, sorted(_SubDict.values(sub)), _SubDict.get(sub, "a")

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


_GLOBAL_TABLE = {"a": 2, "b": 3}


def test_mapping_proxies_made_in_the_frame_are_live_read_only_views():
    def fn(x):
        d = {"a": 2, "b": 3, "c": 5}  # (literal values: the helper compares the proxies)
        mp = types.MappingProxyType(d)
        y = torch.sin(x * mp["a"])
        for v in mp.values():
            y = y + torch.cos(x * v)
        keys = d.keys().mapping
        d["z"] = 1  # seen through both views
        merged = {"q": 0}
        merged.update(mp)
        try:
            mp["new"] = 1
        except TypeError as e:
            error = str(e)
        return (
            y,
            mp,
            type(mp),
            len(mp),
            "z" in mp,
            dict(keys),
            keys == d,
            merged,
            error,
            isinstance(keys, types.MappingProxyType),
        )

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_a_mapping_proxy_of_a_global_dict_sees_later_changes():
    def fn(x):
        mp = types.MappingProxyType(_GLOBAL_TABLE)
        return x * mp["a"], mp

    _, mp = kiln.compile(fn, backend="eager", fullgraph=True)(torch.randn(3))
    _GLOBAL_TABLE["later"] = 1
    try:
        assert mp["later"] == 1
    finally:
        del _GLOBAL_TABLE["later"]


class _Mapping:
    def keys(self):
        return ["a", "b"]

    def __getitem__(self, key):
        return key * 2


def test_update_with_mappings_reads_them_as_mappings():
    def fn(x):
        d = _SubDict(a=1)
        d.update(_SubDict(d=5))  # (read as pairs before: a ValueError eager does not raise)
        e = {"q": 1}
        e.update(_SubDict(z=2))
        e.update(_Mapping())
        try:
            d.clear(1)
        except TypeError as err:
            msg = str(err)
        return x + 1, d, e, msg, d.clear.__name__

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_setdefault_without_arguments_on_a_dict_subclass_object_raises_as_eager():
    def fn(x):
        d = _SubDict(a=1)
        try:
            d.setdefault()  # (crashed kiln with an IndexError)
        except TypeError as e:
            msg = str(e)
        return x + 1, msg, d.setdefault("b", 2), d

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)
