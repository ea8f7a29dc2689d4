"""itertools, operator, functools, math and string formatting inside compiled code, with
fullgraph=True, compared with eager."""

import collections
import functools
import itertools
import math
import operator

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln


class Holder:
    def __init__(self, v):
        self.v = v
        self.inner = self


@functools.cache
def doubled(n):
    return n * 2


def iterators(x):
    r = list(itertools.chain([1], [2])) + list(itertools.chain.from_iterable([[3], [4, 5]]))
    r += [a * b for a, b in itertools.product([1, 2], [3])]
    r += [a or 0 for a, b in itertools.zip_longest([1, 2], [3])]
    r += list(itertools.accumulate([1, 2, 3])) + list(itertools.islice([5, 6, 7], 2))
    r += list(itertools.repeat(1, 2)) + list(itertools.starmap(operator.add, [(1, 2)]))
    r += [sum(c) for c in itertools.combinations([1, 2, 3], 2)]
    r += [a * 10 + b for a, b in itertools.permutations([1, 2, 3], 2)]
    r += [len(p) for p in itertools.permutations([1, 2])]
    r += [a + b for a, b in itertools.pairwise([1, 2, 3])]
    r += [k * 10 + len(list(g)) for k, g in itertools.groupby([1, 1, 2, 1])]
    r += [k for k, _ in itertools.groupby(["aa", "ab", "b"], key=lambda s: s[0])]
    return x + len(r), r


def tensors_through_iterators(x):
    parts = [x, x * 2, x * 3]
    total = sum(a * b for a, b in itertools.combinations(parts, 2))
    return total, list(itertools.chain.from_iterable([parts[:1], parts[2:]]))


def getters(x):
    first_two = operator.itemgetter(1, 0)
    v = operator.attrgetter("v")
    deep = operator.attrgetter("inner.v")
    count_ones = operator.methodcaller("count", 1)
    h = Holder(x)
    return (
        first_two([5, x]),
        operator.itemgetter("k")({"k": x}),
        v(h) + deep(h),
        count_ones([1, 1, 2]),
        sorted([(2, "b"), (1, "a")], key=operator.itemgetter(0)),
    )


def operator_functions(x):
    return (
        x * operator.mul(2, 3) + operator.neg(1) + operator.getitem([1, 2], 0),
        operator.truth(1),
        operator.contains([1], 1),
        operator.index(3),
        operator.floordiv(7, 2),
        operator.add(x, 1),
    )


def functools_calls(x):
    return (
        x + functools.reduce(operator.add, [1, 2, 3]) + doubled(3),
        functools.partial(operator.add, 1)(2),
        functools.reduce(lambda a, b: a * b, [x, x, 2]),
    )


def maths(x):
    return (
        x * math.sqrt(4) + math.floor(2.5) + math.ceil(2.1) + math.log(math.e),
        math.prod([2, 3]),
        math.gcd(4, 6),
        math.isclose(1.0, 1.0),
        math.inf > 1,
    )


def strings(x):
    return (
        x + 1,
        f"{3.14159:.2f}|{7:03d}|{'a':>3}|{x.shape[0]!r}",
        "%s-%d-%.1f" % ("a", 2, 1.5),  # noqa: UP031
        "{}+{b}".format(x.shape[0], b=2),  # noqa: UP032
        ",".join(["a", "b"]).split(","),
        "Abc".startswith("A"),
        " x ".strip().upper(),
        "a_b".replace("_", "-"),
        "abc".find("c"),
    )


@pytest.mark.parametrize(
    "fn",
    [
        iterators,
        tensors_through_iterators,
        getters,
        operator_functions,
        functools_calls,
        maths,
        strings,
    ],
)
def test_stdlib(fn):
    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_getters_made_inside_are_returned():
    def fn(x):
        return (
            x + 1,
            operator.itemgetter(1),
            operator.attrgetter("v", "inner"),
            operator.methodcaller("pop", 0),
        )

    kiln.reset()
    out = kiln.compile(fn, backend="eager", fullgraph=True)(torch.zeros(1))
    assert out[1]([4, 5]) == 5
    h = Holder(3)
    assert out[2](h) == (3, h)
    assert out[3]([7, 8]) == 7


def test_lru_cached_function_of_a_tensor_breaks():
    @functools.lru_cache
    def cached(t):
        return t + 1

    def fn(x):
        return cached(x) * 2

    run_and_compare(fn, torch.randn(3), expected_breaks=1)


def test_itertools_count_made_inside():
    def fn(x):
        c = itertools.count(2, 3)
        ticket = itertools.count()
        y = x * next(c) + next(c)
        pairs = [(next(ticket), v) for v in (5, 6)]
        return y, pairs, next(ticket)

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_itertools_count_escapes_where_it_stands():
    def fn(x):
        c = itertools.count(1)
        next(c)
        return x + next(c), c

    kiln.reset()
    y, c = kiln.compile(fn, backend="eager", fullgraph=True)(torch.zeros(2))
    assert y.tolist() == [2.0, 2.0] and next(c) == 3


def test_itertools_count_across_a_graph_break():
    def fn(x):
        c = itertools.count(10)
        a = next(c)
        kiln.graph_break()
        return x + a + next(c)

    # (the resumed frame gets the count object itself; next() on it is Python's, as for
    # iter(list) objects: a second break, with the right numbers)
    run_and_compare(fn, torch.randn(3))


def _class_methods_of_immutable_types(x):
    table = str.maketrans("ab", "xy")
    return (
        x + 1,
        "abc".translate(table),
        str.capitalize("a b"),
        int.from_bytes(b"\x01\x00", "big"),
        (255).to_bytes(2, "big"),
        bytes([65, 66]),
        " ".join(map(str.upper, "a b".split())),
    )


def test_class_methods_of_immutable_types_fold():
    run_and_compare(_class_methods_of_immutable_types, torch.randn(2), fullgraph=True)


def _counter(x):
    c = collections.Counter("abca")
    c.update(["b", "b"])
    return x * c["a"] + c["b"], dict(c)


def test_counter_counts_in_python():
    # collections._count_elements (C) traced as its Python equivalent
    run_and_compare(_counter, torch.randn(2), fullgraph=True)


def _product_repeat(x):
    return x + len(list(itertools.product([1, 2], "ab", repeat=2)))


def test_itertools_product_with_repeat():
    run_and_compare(_product_repeat, torch.randn(2), fullgraph=True)
