"""Builtins, itertools and container methods real code uses (one graph, no break unless noted),
and regressions: an instruction that breaks after consuming an iterator, zero-argument super()
in a resume function."""

import collections
import functools
import itertools
import math
import operator

import pytest
import torch
import torch.nn.functional as F
from frontend_helpers import run_and_compare

import kiln


def t(*shape):
    return torch.randn(*shape)


def sorted_with_key(x):
    d = {"b": 2, "a": 1, "c": 3}
    items = sorted(d.items(), key=lambda kv: kv[1], reverse=True)
    by_len = min(["aa", "b", "ccc"], key=len)
    longest = max(["aa", "b", "ccc"], key=lambda s: len(s))
    return x * items[0][1], by_len, longest, sorted([3, 1, 2], reverse=True)


def list_sort_in_place(x):
    xs = [3, 1, 2]
    xs.sort()
    ys = ["bb", "a", "ccc"]
    ys.sort(key=len, reverse=True)
    return x * xs[0], xs, ys


def map_and_filter(x):
    xs = [x, x * 2, x * 3]
    ys = list(map(lambda v: v + 1, xs))
    pairs = list(map(operator.add, [1, 2], [10, 20]))
    evens = list(filter(lambda i: i % 2 == 0, range(6)))
    truthy = list(filter(None, [0, 1, "", "a"]))
    return ys, pairs, evens, truthy


def itertools_finite(x):
    acc = list(itertools.accumulate([1, 2, 3]))
    mul = list(itertools.accumulate([1, 2, 3], operator.mul))
    pairs = list(itertools.zip_longest([1, 2], [3], fillvalue=0))
    part = list(itertools.islice(range(10), 2, 8, 2))
    rep = list(itertools.repeat(x, 2))
    star = list(itertools.starmap(pow, [(2, 3), (3, 2)]))
    adj = list(itertools.pairwise([1, 2, 4]))
    return x * acc[-1], mul, pairs, part, rep, star, adj


def string_methods(x):
    name = "Layer_1.weight"
    parts = name.lower().split(".")
    idx = int(parts[0].split("_")[1])
    return x * idx, parts, "-".join(parts), name.rsplit(".", 1), name.partition("_")


def delete_items(x):
    d = {"a": x, "b": x * 2, "c": 3}
    del d["a"]
    xs = [1, 2, 3, 4]
    del xs[0]
    del xs[-1]
    return d, xs


def dict_more_methods(x):
    d = {"a": 1}
    d.setdefault("b", 2)
    d.setdefault("a", 5)
    d.update(c=3)
    d.update([("e", 4)])
    k, v = d.popitem()
    e = dict(d)
    e.clear()
    return x * d["b"], d, (k, v), e


def builtin_names(x):
    return x * len(type(x).__name__), int.__name__, len.__name__, pow(2, 5), pow(7, 2, 5)


def tensor_pow_builtin(x):
    return pow(x, 2), pow(2, x)


def closure_counter(x):
    counter = [0]

    def inc():
        counter[0] += 1
        return counter[0]

    inc()
    inc()
    return x * counter[0], counter


def iter_and_next(x):
    it = iter([1, 2, 3])
    a = next(it)
    b = next(it, None)
    return x * (a + b), list(it), next(it, "done")


def reduce_partial(x):
    add2 = functools.partial(torch.add, alpha=2)
    total = functools.reduce(lambda a, b: a + b, [x, x, x])
    return total, add2(x, x)


def math_and_numbers(x):
    scale = math.sqrt(16) + math.log(math.e) + math.ceil(2.1) + math.floor(2.9)
    return x * scale + math.pi, divmod(7, 2), round(2.567, 1), abs(-3)


def sdpa_causal(q):
    return F.scaled_dot_product_attention(q, q, q, is_causal=True)


def created_tensors(x):
    return (
        torch.zeros(3)
        + torch.ones_like(x)
        + torch.arange(3)
        + x.new_zeros(3)
        + torch.full((3,), 2.0)
        + torch.tensor([1.0, 2.0, 3.0])
    )


def ordered_dict_made(x):
    d = collections.OrderedDict()
    d["z"] = x
    d["a"] = x + 1
    d.move_to_end("z") if False else None
    return list(d.keys()), d["a"]


CASES = [
    ("sorted_with_key", sorted_with_key, (t(3),)),
    ("list_sort_in_place", list_sort_in_place, (t(3),)),
    ("map_and_filter", map_and_filter, (t(3),)),
    ("itertools_finite", itertools_finite, (t(3),)),
    ("string_methods", string_methods, (t(3),)),
    ("delete_items", delete_items, (t(3),)),
    ("dict_more_methods", dict_more_methods, (t(3),)),
    ("builtin_names", builtin_names, (t(3),)),
    ("tensor_pow_builtin", tensor_pow_builtin, (t(3),)),
    ("closure_counter", closure_counter, (t(3),)),
    ("iter_and_next", iter_and_next, (t(3),)),
    ("reduce_partial", reduce_partial, (t(3),)),
    ("math_and_numbers", math_and_numbers, (t(3),)),
    ("sdpa_causal", sdpa_causal, (t(2, 4, 8),)),
    ("created_tensors", created_tensors, (t(3),)),
    ("ordered_dict_made", ordered_dict_made, (t(3),)),
]


@pytest.mark.parametrize("name,fn,args", CASES, ids=[c[0] for c in CASES])
def test_builtin_feature(name, fn, args):
    run_and_compare(fn, *args, expected_graphs=1, expected_frames=1, expected_breaks=0)


def breaking_key(kv):
    kiln.graph_break()
    return kv[1]


def sorted_with_untraced_key(x):
    d = {"b": 2, "a": 1}
    y = x + 1
    items = sorted(d.items(), key=breaking_key)  # breaks inside, after reading d.items()
    return y * items[-1][1], items


def test_break_after_an_iterator_was_consumed_sees_it_unconsumed():
    # sorted() read d.items() before breaking; the call runs again in Python on all items
    run_and_compare(sorted_with_untraced_key, t(3), expected_breaks=1)


def tuple_of_a_tuple_is_the_tuple(x, given):
    t = (0, 1, 2, 3)
    return x + 1, tuple(t) is t, tuple(given) is given, tuple([x, 2]), tuple(x.shape)


def test_tuple_of_an_exact_tuple_is_the_same_object():
    # CPython's tuple(t) returns t itself (test_tuple.test_constructors); a rebuilt copy is not
    x = torch.randn(3)
    run_and_compare(tuple_of_a_tuple_is_the_tuple, x, (x, 1), fullgraph=True)
