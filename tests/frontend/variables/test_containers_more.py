"""dict / OrderedDict / defaultdict / set / views / copy / user mappings inside compiled code,
with fullgraph=True, compared with eager (outputs and mutated inputs)."""

import collections
import collections.abc
import copy
import types
import typing
from collections import OrderedDict, defaultdict

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln


def dict_or(x):
    d = {"a": x, "b": 2}
    e = d | {"c": 3}
    d |= {"b": 4}
    d |= [("z", 1)]
    return e, d, {**d, "q": x}


def dict_or_input(x, d):
    d |= {"new": x}
    return d["new"] + 1


def fromkeys(x):
    d = dict.fromkeys(["p", "q"], 0)
    e = dict.fromkeys("ab")
    return x + len(d), d, e


def view_set_ops(x):
    d = {"a": x, "b": 2, "c": 3}
    k = d.keys()
    return (
        k & {"a", "z"},
        k | {"z"},
        k - {"a"},
        k ^ {"a", "y"},
        "b" in k,
        k == {"a", "b", "c"},
        {"b": 2, "c": 3}.items() & {("b", 2)},
        x + len(k),
    )


def ordered_dict(x):
    d = OrderedDict(a=x, b=2, c=3)
    d.move_to_end("a")
    d.move_to_end("c", last=False)
    first = d.popitem(last=False)
    last = d.popitem()
    d["z"] = x + 1
    return first, last, list(d), d


def ordered_dict_input(x, d):
    d.move_to_end("a")
    k, v = d.popitem(last=False)
    return x + v, k


def default_dict(x):
    d = defaultdict(list)
    d["a"].append(x)
    d["b"]
    e = defaultdict(int)
    e["q"] += 3
    return d, e, d.default_factory is list, len(d), e["q"] * x


def copies(x):
    inner = {"a": 1}
    lst = [x, inner]
    shallow = copy.copy(lst)
    deep = copy.deepcopy({"a": [1, 2], "t": (1, "s")})
    deep["a"].append(3)
    same = [inner, inner]
    deep_shared = copy.deepcopy(same)
    return (
        shallow[0] + 1,
        shallow[1] is inner,
        deep,
        deep_shared[0] is deep_shared[1],
        copy.copy((1, 2)),
    )


def deepcopy_tensor(x):
    y = x + 1
    c = copy.deepcopy({"y": y, "l": [y, y]})
    c["y"].add_(1)  # a new storage: y is unchanged
    return y, c, c["l"][0] is c["l"][1]


def sorted_reversed(x):
    d = {"b": 1, "a": 2}
    return (
        x,
        sorted(d),
        sorted([3, 1, 2], reverse=True),
        list(reversed(d)),
        list(reversed([1, 2, 3])),
    )


class Config(collections.abc.Mapping):
    def __init__(self):
        self._d = {"a": 1, "b": 2}

    def __getitem__(self, k):
        return self._d[k]

    def __iter__(self):
        return iter(self._d)

    def __len__(self):
        return len(self._d)


class Store(collections.abc.MutableMapping):
    def __init__(self):
        self._d = {}

    def __getitem__(self, k):
        return self._d[k]

    def __setitem__(self, k, v):
        self._d[k] = v

    def __delitem__(self, k):
        del self._d[k]

    def __iter__(self):
        return iter(self._d)

    def __len__(self):
        return len(self._d)


def user_mapping(x):
    c = Config()
    return x + sum(dict(c).values()), len(c), "a" in c, c.get("z", 9), list(c.keys())


def user_mutable_mapping(x):
    m = Store()
    m["a"] = x
    m.update(b=2)
    values = m.values()
    m["c"] = 3  # a view is live: it sees the new key
    popped = m.pop("c")
    del m["b"]
    return sum(values) + popped, len(m), list(m.items())[0][0], "a" in m.keys(), dict(m)


def sets_and_frozensets(x):
    s = {1, 2}
    s.add(3)
    s.discard(1)
    f = frozenset([2, 5])
    return x + len(s | f), s & f, s - f, s ^ f, f <= {2, 5, 6}, s.isdisjoint({9}), s.union([7])


@pytest.mark.parametrize(
    "fn",
    [
        dict_or,
        fromkeys,
        view_set_ops,
        ordered_dict,
        default_dict,
        copies,
        deepcopy_tensor,
        sorted_reversed,
        user_mapping,
        user_mutable_mapping,
        sets_and_frozensets,
    ],
)
def test_containers(fn):
    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_dict_ior_of_an_input_is_replayed():
    run_and_compare(dict_or_input, torch.randn(3), {"a": 1}, fullgraph=True, expected_breaks=0)


def test_ordered_dict_input_mutations_are_replayed():
    kiln.reset()
    compiled = kiln.compile(ordered_dict_input, backend="eager", fullgraph=True)
    x = torch.randn(3)
    for _ in range(2):  # compile, then a cache hit
        d_eager, d_compiled = OrderedDict(a=1, b=2, c=3), OrderedDict(a=1, b=2, c=3)
        expected = ordered_dict_input(x, d_eager)
        got = compiled(x, d_compiled)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1] == expected[1]
        assert list(d_compiled.items()) == list(d_eager.items())


def test_popitem_of_an_empty_dict_raises_as_eager():
    def fn(x):
        try:
            {}.popitem()
        except KeyError as e:
            return x + 1, str(e)
        return x

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_deepcopy_of_a_tensor_requiring_grad_breaks():
    def fn(x):
        return copy.deepcopy([x])[0] + 1

    run_and_compare(fn, torch.randn(3, requires_grad=True), expected_breaks=1)


def test_set_operators_with_a_non_set_raise_as_eager():
    def fn(x, op):
        try:
            op({1, 2}, 1)
        except TypeError as e:
            return x + 1, str(e)
        return x, "no error"

    import operator

    for op in (operator.sub, operator.or_, operator.lt, operator.ge):
        run_and_compare(fn, torch.randn(3), op, fullgraph=True, expected_breaks=0)
    run_and_compare(lambda x: (x, {1} == 1, {1} != 1), torch.randn(3), fullgraph=True)


def test_torch_ordered_set_is_traced():
    from torch.utils._ordered_set import OrderedSet

    def fn(x):
        s = OrderedSet(["c", "b", "a"])
        s.add("d")
        s.discard("b")
        u = s | OrderedSet(["z"])
        return x + len(s), list(s), list(u), "c" in s, u

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_dict_of_a_dict_subclass_overriding_iter_uses_keys():
    class ReversedDict(dict):
        def keys(self):
            return reversed(list(dict.keys(self)))

        __iter__ = keys

    def fn(x):
        d = ReversedDict([("a", 1), ("b", 2)])
        return x + 1, list(dict(d).items())  # not the fast copy: keys() decides the order

    kiln.reset()
    expected = fn(torch.zeros(1))
    got = kiln.compile(fn, backend="eager")(torch.zeros(1))
    assert got[1] == expected[1] == [("b", 2), ("a", 1)]


def test_container_methods_called_on_the_class():
    def fn(x):
        p, q = frozenset("abc"), frozenset("bef")
        s = set("ab")
        set.add(s, "z")
        return (
            x + 1,
            frozenset.__and__(p, q),
            frozenset.__or__(p, q),
            frozenset.__lt__(p, p),
            frozenset.issubset(q, p),
            frozenset.__contains__(p, "a"),
            s,
            set.__sub__(s, {"a"}),
        )

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


class _Plain:
    pass


def test_set_methods_under_assert_raises_and_identity_of_new_objects():
    import unittest

    class Case(unittest.TestCase):
        def runTest(self):
            pass

    case = Case()

    def fn(x):
        s = {1, 2}
        case.assertRaises(TypeError, s.issubset, 1)  # 'int' object is not iterable
        a, b = _Plain(), _Plain()
        return x + 1, s.issubset.__name__, a is b, a is a

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_a_set_never_equals_a_list_dict_or_str():
    def fn(x):
        p = set("abc")
        return (
            x + 1,
            p == dict.fromkeys("abc"),
            p != dict.fromkeys("abc"),
            p == list("abc"),
            ["a"] == {"a"},
            p != "abc",
            frozenset("ab") == {"a", "b"},
            {"a"} == {"a": 1}.keys(),
        )

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def _scale(x):
    return x * 2


def _shift(x):
    return x + 1


# Note [Dicts: identity-keyed tables]: a module table keyed by classes and typing forms
_BY_TYPE = {list: _scale, tuple: _shift, typing.Union: _shift, types.UnionType: _scale, "n": 3}
_OPTIONAL_INT = int | None  # (a field's annotation, as the validators read it)


def test_a_table_keyed_by_classes_and_typing_forms_is_read_and_guarded():
    def fn(x, items):
        f = _BY_TYPE[type(items)]
        g = _BY_TYPE.get(typing.get_origin(_OPTIONAL_INT), _shift)
        h = _BY_TYPE.get(dict)  # absent
        return f(x), g(x), h, dict in _BY_TYPE, tuple in _BY_TYPE, len(_BY_TYPE), _BY_TYPE["n"]

    compiled = run_and_compare(fn, torch.randn(3), [1], fullgraph=True, expected_breaks=0)
    x = torch.randn(3)
    _BY_TYPE[list] = _shift  # the guard sees the table changed: recompiled, not stale
    try:
        assert torch.equal(compiled(x, [1])[0], x + 1)
    finally:
        _BY_TYPE[list] = _scale
    assert torch.equal(compiled(x, (1,))[0], x + 1)


def test_a_missing_key_of_an_identity_keyed_table_raises_as_eager():
    def fn(x):
        try:
            return _BY_TYPE[set](x)
        except KeyError as e:
            return x - 1, e.args[0] is set

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_writing_an_identity_keyed_table_breaks_with_its_reason():
    table = {list: _scale}

    def fn(x):
        table[tuple] = _shift
        return x + 1

    run_and_compare(fn, torch.randn(3), expected_breaks=1)
    assert table == {list: _scale, tuple: _shift}
    assert any("keyed by objects" in r for r in kiln.counters["graph_break"])


def set_queries_over_generators(x):
    taken = []

    def numbers():
        for i in (1, 2, 3, 4):
            taken.append(i)
            yield i

    disjoint = {2, 9}.isdisjoint(numbers())  # stops at 2
    superset = {1, 2, 7}.issuperset(numbers())  # stops at 3
    subset = {1}.issubset(numbers())  # builds a set of all of them
    rest = iter([5, 6, 7])
    superset_of_iter = {5}.issuperset(rest)  # stops at 6: 7 is left for next()
    return x + 1, disjoint, superset, subset, superset_of_iter, next(rest), taken


def test_set_queries_take_items_only_until_one_decides():
    # CPython stops isdisjoint/issuperset at the deciding item; the rest stays unconsumed
    run_and_compare(set_queries_over_generators, torch.randn(2), fullgraph=True)
