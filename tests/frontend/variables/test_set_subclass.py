"""Instances of user subclasses of set and frozenset made inside compiled code (methods, operators
and their result types, overrides, attributes, escapes), with fullgraph=True, compared with eager."""

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln


class S(set):
    pass


class F(frozenset):
    pass


class Tagged(set):
    def __init__(self, items, tag="t"):
        super().__init__(items)
        self.tag = tag

    def total(self):
        return sum(self) + len(self.tag)


class Shifted(set):
    def add(self, item):
        return super().add(item + 1)

    def __contains__(self, item):
        return set.__contains__(self, item - 1)


class OwnOr(set):
    def __or__(self, other):
        return OwnOr(set.__or__(self, other))

    def __ror__(self, other):
        return "ror"


class OwnIter(set):
    def __iter__(self):
        return iter(sorted(set.__iter__(self), reverse=True))


class FrozenInit(frozenset):
    def __init__(self, items, scale=2):
        self.scale = scale


def basics(x):
    t = S([1, 2, 3])
    t.add(4)
    t.discard(1)
    t.update([7], (8,))
    return x + len(t) + (2 in t) + (5 in t), type(t) is S, isinstance(t, set), sorted(t), bool(t)


def local_class(x):
    class L(set):
        pass

    t = L([1, 2, 3])
    return x + len(t) + (2 in t), type(t).__name__


def result_types(x):
    p, q = S("abc"), S("bef")
    return x, p | q, p & q, p - q, p ^ q, p.union(q), p.copy(), p.intersection("bz"), type(p | q)


def frozen_result_types(x):
    p, q = F("abc"), F("bef")
    return x, p | q, p & q, p - {"a"}, {"a", "z"} | p, p.copy(), type(p.copy())


def comparisons(x):
    p, q, r = S("abc"), S("ab"), F("abc")
    return (
        x,
        p == r,
        p == {"a", "b", "c"},
        {"a", "b", "c"} == p,
        p != q,
        q < p,
        q <= p,
        p > q,
        p >= r,
        p == [1],
        p != "abc",
        p.issubset("abcd"),
        p.isdisjoint(q),
    )


def inplace(x):
    p = S("abc")
    alias = p
    p |= {"z"}
    p -= {"a"}
    p &= {"b", "c", "z"}
    p ^= {"q"}
    f = F("ab")
    g = f
    f |= {"c"}
    plain = {"k"}
    same = plain
    plain |= S("m")
    plain -= F("k")
    try:
        p |= 1
    except TypeError as e:
        msg = str(e)
    return x, p is alias, sorted(p), type(f), f is g, sorted(f), plain is same, plain, msg


def attributes_and_methods(x):
    t = Tagged([1, 2], tag="abc")
    t.extra = x
    return t.total() + t.extra, t.tag, t.__dict__["tag"], sorted(t)


def overrides(x):
    s = Shifted([1, 2])
    s.add(3)
    o = OwnOr([1])
    return x, sorted(s), 2 in s, 9 in s, type(o | {2}), sorted(o | {2}), {3} | o, set.add


def own_iter(x):
    s = OwnIter([1, 3, 2])
    return x, list(s), [i for i in s], set(s) == {1, 2, 3}, s | {4}


def frozen_init(x):
    f = FrozenInit([1, 2], scale=3)
    return x * f.scale, sorted(f), type(f)


def unbound_methods(x):
    p, q = S("abc"), S("bef")
    s = Shifted([1])
    set.add(s, 5)  # the C method, not the override
    return (
        x,
        S.__or__(p, q),
        set.__sub__(p, q),
        S.__eq__(p, p),
        S.issubset(q, p),
        set.__contains__(s, 5),
        frozenset.__and__(F("ab"), F("b")),
    )


def escapes(x):
    t = Tagged([1, 2], tag="z")
    t.add(3)
    f = F([4])
    return x + 1, t, f, t.tag


def errors(x):
    s = S([1])
    try:
        s.remove(7)
    except KeyError:
        x = x + 1
    try:
        x = x + (s < 3)
    except TypeError as e:
        return x, str(e)
    return x


class Named(frozenset):
    def __repr__(self):
        return "Named!"


def copies(x):
    f, p = F("ab"), frozenset("ab")
    return x, f.copy() is f, f.copy() is f.copy(), p.copy() is p, type(f.copy()), S("a").copy()


def text(x):
    s, f, e = S([3]), F(["a"]), S()
    return x, f"{s} {f!r} {e}", repr(s), str(f), f"{Named([1])}", str(Named()), f"{s!s:>8}"


def python_errors(x):
    out = []
    for call in (
        lambda: S([1]).isdisjoint(),
        lambda: F([1]).copy(1),
        lambda: S([1]).add([2]),
        lambda: S([1]).symmetric_difference_update(),
        lambda: {1}.union([[1]]),
        lambda: S([1]) | 1,
        lambda: 1 < F([1]),
    ):
        try:
            call()
        except TypeError as e:
            out.append(str(e))
    s, t = S([1]), S([1])
    for call in (lambda: s.update([2], [[3]]), lambda: t.difference_update((1, {4}))):
        try:
            call()
        except TypeError as e:
            out.append(str(e))
    keys = S([frozenset("ab"), 1])
    keys.discard(F("ab"))
    return (
        x,
        out,
        set() in S([frozenset()]),
        {2} in {frozenset({2})},
        s,
        t,
        keys,
        S("a") in F([frozenset("a")]),
    )


@pytest.mark.parametrize(
    "fn",
    [
        basics,
        local_class,
        result_types,
        frozen_result_types,
        comparisons,
        inplace,
        attributes_and_methods,
        overrides,
        own_iter,
        frozen_init,
        unbound_methods,
        escapes,
        errors,
        text,
        python_errors,
        copies,
    ],
)
def test_set_subclass_instances(fn):
    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_escaped_instance_keeps_its_class_and_attributes():
    def fn(x):
        t = Tagged([1, 2], tag="q")
        t.seen = True
        return x, t

    _, got = kiln.compile(fn, backend="eager", fullgraph=True)(torch.randn(2))
    assert type(got) is Tagged and got == {1, 2} and vars(got) == {"tag": "q", "seen": True}


def test_stored_into_an_input():
    def fn(x, box):
        box.append(S([1, 2]))
        box.append(F("a"))
        return x + 1

    run_and_compare(fn, torch.randn(3), [], fullgraph=True, expected_breaks=0)


@pytest.mark.parametrize("hook", ["__new__", "__del__"])
def test_own_new_or_finalizer_breaks_with_a_reason(hook):
    def method(self, *a):
        return set.__new__(self) if hook == "__new__" else None

    OwnNew = type("OwnNew", (set,), {hook: method})

    def fn(x):
        return x + len(OwnNew([1]))

    x = torch.randn(3)
    torch.testing.assert_close(kiln.compile(fn, backend="eager")(x), fn(x))
    reason = "set subclass kiln does not build" if hook == "__new__" else "has a Python __del__"
    with pytest.raises(kiln.exc.Unsupported, match=reason):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.randn(3))


def test_inputs_guarded_by_type_and_items():
    def fn(x, s):
        return x + len(s) + (2 in s), s | {9}, s == {1, 2}, f"{s}", s.union([5]), s

    compiled = kiln.compile(fn, backend="eager", fullgraph=True)
    for s in (S([1, 2]), S([1, 2]), S([3]), F([1, 2]), Tagged([2], tag="q"), S()):
        x = torch.randn(3)
        got, want = compiled(x, s), fn(x, s)
        torch.testing.assert_close(got[0], want[0])
        assert got[1:5] == want[1:5] and type(got[1]) is type(want[1])
        assert got[5] is s  # the input itself, returned


def test_input_attributes_and_overrides():
    def fn(x, s):
        return x + s.total(), 3 in s, sorted(s), s.tag, s | {1}

    t = Tagged([1, 2], tag="ab")
    run_and_compare(fn, torch.randn(3), t, fullgraph=True, expected_breaks=0)
    run_and_compare(lambda x, s: (x, 3 in s, 1 in s), torch.randn(3), Shifted([2]), fullgraph=True)


def test_input_mutation_stored_after_the_graph():
    def fn(x, s, again):
        s.add(7)
        n = len(again)  # the same object: sees the add
        s -= {1}
        s |= S([8])
        again.discard(9)
        return x + n + len(s), s is again, sorted(s)

    def twice(x, s):
        return fn(x, s, s)

    _compare_on_fresh_inputs(twice, lambda: S([1, 9]))
    _compare_on_fresh_inputs(twice, lambda: Tagged([2], tag="t"))


def _compare_on_fresh_inputs(fn, make, calls=3):
    """fn eager and compiled (fullgraph) on a new input object each call (the harness shares a
    set argument between the runs): results and the inputs' items and attributes after."""
    kiln.reset()
    compiled = kiln.compile(fn, backend="eager", fullgraph=True)
    for _ in range(calls):
        x, a, b = torch.randn(3), make(), make()
        want, got = fn(x, a), compiled(x, b)
        torch.testing.assert_close(got[0], want[0])
        assert got[1:] == want[1:] and a == b and type(a) is type(b) and vars(a) == vars(b)
    assert kiln.counters["stats"]["unique_graphs"] == 1, dict(kiln.counters)
    assert not kiln.counters["graph_break"], dict(kiln.counters)


def test_input_mutation_then_exception():
    def fn(x, s):
        s.add(3)
        try:
            s.remove(99)
        except KeyError:
            x = x + 1
        s.clear()
        s.update("ab")
        return x + len(s)

    _compare_on_fresh_inputs(lambda x, s: (fn(x, s),), lambda: S([1]))


def test_live_across_a_graph_break():
    def fn(x):
        t = Tagged([1], tag="g")
        t.add(2)
        alias = t
        kiln.graph_break()
        t.add(3)
        return x + len(alias), t is alias, t, alias.tag, sorted(alias)

    run_and_compare(fn, torch.randn(3))  # (the resumed frame's t.add(3): an input changed)
