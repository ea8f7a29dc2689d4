"""Range iterators: `range(n).__iter__()` and `seq.__iter__()` as iter(seq), and a range
iterator from outside the frame, advanced after the graph by the items the trace took (Note
[Iterators: inputs])."""

import torch
from frontend_helpers import assert_same

import kiln


def first_of_dunder_iter(x):
    it = range(3).__iter__()
    return x + next(it)


def iter_of_iter(x):
    it = [1, 2, 3].__iter__()
    again = iter(it)
    first = next(again)
    return x * first + next(it), list(it)


def take_one(x, it):
    return x + next(it)


def take_rest(x, it):
    total = x
    for i in it:
        total = total + i
    return total


def test_dunder_iter_of_range():
    kiln.reset()
    x = torch.randn(3)
    compiled = kiln.compile(first_of_dunder_iter, fullgraph=True)
    assert_same(first_of_dunder_iter(x), compiled(x))


def test_dunder_iter_of_list_and_iterator():
    kiln.reset()
    x = torch.randn(3)
    compiled = kiln.compile(iter_of_iter, fullgraph=True)
    assert_same(iter_of_iter(x), compiled(x))


def test_range_iterator_input_is_advanced():
    kiln.reset()
    compiled = kiln.compile(take_one, fullgraph=True)
    for start in (1, 1, 5):
        eager_it, compiled_it = iter(range(start, start + 3)), iter(range(start, start + 3))
        next(eager_it), next(compiled_it)
        assert_same(take_one(torch.zeros(1), eager_it), compiled(torch.zeros(1), compiled_it))
        assert list(compiled_it) == list(eager_it)


def test_range_iterator_input_run_out():
    kiln.reset()
    compiled = kiln.compile(take_rest, fullgraph=True)
    eager_it, compiled_it = iter(range(2, 6, 2)), iter(range(2, 6, 2))
    assert_same(take_rest(torch.zeros(2), eager_it), compiled(torch.zeros(2), compiled_it))
    assert list(compiled_it) == list(eager_it) == []
    assert type(compiled_it).__name__ == "range_iterator"


def test_range_iterator_input_too_long_to_keep_runs_eagerly(monkeypatch):
    """A guard per item left is no plan for a long loop's range (CPython's test_deque
    test_rotate: `for i in range(BIG + 17)` resumed after a break took minutes to trace)."""
    from kiln import config

    monkeypatch.setattr(config, "range_items_limit", 50)
    kiln.reset()
    compiled = kiln.compile(take_rest, backend="eager")
    x = torch.zeros(2)
    got_it, want_it = iter(range(60)), iter(range(60))
    assert_same(compiled(x, got_it), take_rest(x, want_it))
    assert list(got_it) == list(want_it) == []
    assert any("too long to keep" in r for r in kiln.counters["unimplemented"])
