"""itertools.cycle made in the frame and accumulate(func=...), compiled vs eager (Note
[Iterators: itertools.cycle])."""

import itertools
import operator

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln


def test_cycle_over_finite_and_endless_sources():
    def fn(x):
        for source in (iter([]), iter([10, 11.0]), itertools.repeat(-1, 3), itertools.count(10)):
            r = itertools.cycle(source)
            idx = 0
            x = x + 1
            for i in r:
                x = x + i
                idx += 1
                if idx > 10:
                    break
        return x

    run_and_compare(fn, torch.randn(2, 5), fullgraph=True, expected_graphs=1)


def test_cycle_takes_from_its_source_only_as_far_as_asked():
    def fn(x):
        it = iter([1, 2, 3])
        c = itertools.cycle(it)
        first = next(c)
        return x * first, list(it), next(c, "none")

    run_and_compare(fn, torch.ones(2), fullgraph=True, expected_graphs=1)


def test_cycle_of_a_list_input_wraps_around():
    def fn(x, items):
        c = itertools.cycle(items)
        out = [next(c) for _ in range(7)]
        return x + sum(out), out

    run_and_compare(fn, torch.ones(2), [1, 2, 3], fullgraph=True, expected_graphs=1)
    run_and_compare(fn, torch.ones(2), [torch.ones(2), 4], fullgraph=True, expected_graphs=1)


def test_cycle_over_nothing_ends_at_once():
    def fn(x):
        return x + len(list(itertools.cycle([]))), next(itertools.cycle(()), "empty")

    run_and_compare(fn, torch.ones(1), fullgraph=True, expected_graphs=1)


def test_a_fresh_cycle_returned_is_rebuilt():
    def fn(x, items):
        return x + 1, itertools.cycle(items)

    out, c = kiln.compile(fn, fullgraph=True)(torch.ones(1), [5, 6])
    assert isinstance(c, itertools.cycle)
    assert [next(c) for _ in range(5)] == [5, 6, 5, 6, 5]


@pytest.mark.parametrize("kwargs", [{"func": operator.mul}, {"func": operator.sub, "initial": -1}])
def test_accumulate_with_keywords(kwargs):
    def fn(a, b, c, x):
        items = [a, b, c, x]
        for i, t in enumerate(items):
            items[i] = t * x
        return list(itertools.accumulate(items, **kwargs))

    tensors = [torch.tensor([i + 1]) for i in range(3)]
    run_and_compare(fn, *tensors, torch.tensor([[1, 2], [3, 4]]), fullgraph=True, expected_graphs=1)
