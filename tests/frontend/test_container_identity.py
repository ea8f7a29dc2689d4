"""A mutable container of an input reached several times (an attribute read in two methods,
through two names) is one variable: every mutation is seen and replayed (Note [Side effects:
one variable per mutable container])."""

import torch
from frontend_helpers import CountingBackend, assert_same

import kiln


class Logged:
    def __init__(self):
        self.log = []
        self.seen = {}

    def add(self, v):
        self.log.append(v)
        self.seen[v] = len(self.log)

    def __enter__(self):
        self.log.append("enter")
        return self

    def __exit__(self, *exc):
        self.log.append("exit")
        return False


def two_appends(x, o):
    o.log.append(1)
    o.log.append(2)
    return x + len(o.log)


def through_methods(x, o):
    o.add("a")
    o.add("b")
    return x * len(o.seen)


def with_block(x, o):
    with o:
        y = x + 1
    return y, list(o.log)


def two_names(x, o, alias):
    o.log.append(3)
    alias.append(4)
    return x + len(alias)


def _compare(fn, *extra):
    kiln.reset()
    compiled = kiln.compile(fn, backend=CountingBackend())
    x = torch.randn(2)
    results = []
    for f in (fn, compiled, compiled):
        o = Logged()
        out = f(x, o, *[e(o) for e in extra])
        results.append((out, o.log, o.seen))
    for got in results[1:]:
        assert_same(results[0], got)
    assert kiln.counters["stats"]["graph_breaks"] == 0
    assert kiln.counters["stats"]["unique_graphs"] == 1


def test_two_appends_through_one_attribute():
    _compare(two_appends)


def test_list_and_dict_mutated_in_a_method_twice():
    _compare(through_methods)


def test_with_block_of_an_input_manager():
    _compare(with_block)


def test_same_list_through_two_sources():
    _compare(two_names, lambda o: o.log)


def test_alias_guard_recompiles_for_distinct_lists():
    kiln.reset()
    compiled = kiln.compile(two_names, backend="eager")
    x = torch.randn(2)
    o = Logged()
    compiled(x, o, o.log)
    assert o.log == [3, 4]
    o2, other = Logged(), [9]
    torch.testing.assert_close(compiled(x, o2, other), x + 2)
    assert o2.log == [3] and other == [9, 4]
    assert kiln.counters["stats"]["recompiles"] == 1
