"""Operators and builtins on user objects run their classes' Python dunders (Note [Objects:
operator protocol]), compared with eager."""

import pytest
import torch

from tests.frontend.frontend_helpers import run_and_compare


def t(*shape):
    return torch.randn(*shape)


class Bag:
    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]

    def __iter__(self):
        return iter(self.items)

    def __contains__(self, v):
        return v in self.items

    def __eq__(self, other):
        return isinstance(other, Bag) and self.items == other.items

    def __add__(self, other):
        if not isinstance(other, Bag):
            return NotImplemented
        return Bag(self.items + other.items)

    def __radd__(self, other):
        return Bag([other, *self.items])

    def __repr__(self):
        return f"Bag({self.items!r})"


class Gen:
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        for i in range(self.n):
            yield i * 2

    def __bool__(self):
        return self.n > 0


class Plain:
    pass


class Vec:
    def __init__(self, t):
        self.t = t

    def __mul__(self, k):
        return Vec(self.t * k)

    def __rmul__(self, k):
        return Vec(self.t * k + 1)

    def __lt__(self, other):
        return self.n() < other.n()

    def n(self):
        return self.t.shape[0]


BAG = Bag([1, 2, 3])


def protocol_new_object(x):
    b = Bag([1, 2])
    c = b + Bag([3])
    d = 0 + b
    return (
        x + len(c) + sum(c) + (2 in c) + bool(b) + bool(Bag([])),
        b == Bag([1, 2]),
        b != Bag([1, 2]),
        b == 3,
        repr(d),
        str(c),
        list(c),
    )


def protocol_input_object(x, bag):
    first, *rest = bag
    return x + len(bag) + bag[0] + first + len(rest) + (3 in bag) + (bag == BAG)


def generator_iter_and_bool(x):
    g = Gen(3)
    out = x
    for v in g:
        out = out + v
    return out + bool(g) + bool(Gen(0)) + max(Gen(4))


def tensor_holding_object(x):
    v = 2 * Vec(x) * 3
    return v.t, Vec(x) < Vec(x[:2]), Vec(x[:1]) < Vec(x)


def identity_equality(x):
    p, q = Plain(), Plain()
    return x + (p == p) + (p == q) + (p != q) + bool(p)


CASES = [
    (protocol_new_object, (t(3),)),
    (protocol_input_object, (t(3), BAG)),
    (generator_iter_and_bool, (t(3),)),
    (tensor_holding_object, (t(3),)),
    (identity_equality, (t(3),)),
]


@pytest.mark.parametrize("fn,args", CASES, ids=[c[0].__name__ for c in CASES])
def test_protocol(fn, args):
    run_and_compare(fn, *args, expected_graphs=1, expected_breaks=0)


class Namespace:
    def __init__(self, **kw):
        self.values = kw

    def __getattr__(self, name):
        values = self.values  # (found the ordinary way: no recursion)
        if name in values:
            return values[name]
        raise AttributeError(name)


NS = Namespace(scale=3)


def getattr_hook_new_object(x):
    ns = Namespace(a=2)
    return x * ns.a + hasattr(ns, "a") + hasattr(ns, "b") + getattr(ns, "c", 5)


def getattr_hook_input(x):
    return x * NS.scale + getattr(NS, "missing", 1)


@pytest.mark.parametrize("fn", [getattr_hook_new_object, getattr_hook_input])
def test_getattr_hook(fn):
    run_and_compare(fn, t(3), expected_graphs=1, expected_breaks=0)


def test_getattr_hook_input_is_guarded():
    compiled = run_and_compare(getattr_hook_input, t(3), expected_graphs=1)
    x = t(3)
    NS.values["missing"] = 10  # what the inlined __getattr__ read: guarded
    try:
        torch.testing.assert_close(compiled(x), getattr_hook_input(x))
    finally:
        del NS.values["missing"]


def len_of_object_without_len(x):
    p = Plain()
    try:
        len(p)
    except TypeError:
        return x + 1
    except AttributeError:
        return x + 2  # (what a missing special method must not become)
    return x


def test_missing_special_method_is_not_an_attribute_error():
    run_and_compare(len_of_object_without_len, t(3))


def equal_inputs(x, a, b):
    return x + (a == b) + (a != b)


def test_identity_equality_of_inputs_is_guarded():
    p, q = Plain(), Plain()
    compiled = run_and_compare(equal_inputs, t(3), p, p, expected_graphs=1)
    x = t(3)
    torch.testing.assert_close(compiled(x, p, q), equal_inputs(x, p, q))


class CountingDict(dict):
    """A dict subclass whose __eq__ declines plain dicts, as collections.Counter's does."""

    def __eq__(self, other):
        if not isinstance(other, CountingDict):
            return NotImplemented
        return dict.__eq__(self, other)

    __hash__ = None


def dict_subclass_declining_eq(x, d):
    plain = {"a": 1, "b": 2}
    return x + 1, d == plain, plain == d, d != plain, d == {"a": 1}


def test_declined_eq_falls_to_the_builtin_base():
    run_and_compare(dict_subclass_declining_eq, torch.ones(2), CountingDict(a=1, b=2))
