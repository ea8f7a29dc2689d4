"""list.extend / deque.extendleft over a generator or map whose code reads the list being grown:
Python sees the list grow item by item; kiln breaks instead of returning another list."""

import collections

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln


def _reads_while_growing(x):
    y = [1]
    y.extend(y[-1] + z for z in range(3))  # eager: [1, 1, 2, 4]
    return x + 1, y


def _map_reads_while_growing(x):
    y = [1]
    y.extend(map(lambda z: y[-1] + z, range(3)))
    return x + 1, y


def _deque_reads_while_growing(x):
    d = collections.deque([1])
    d.extendleft(d[0] + z for z in range(3))
    return x + 1, d


def test_growing_by_a_map_that_reads_the_list_matches_eager():
    run_and_compare(_map_reads_while_growing, torch.randn(3))  # a break: the map ran ahead
    with pytest.raises(kiln.exc.Unsupported, match="ran ahead of time"):
        kiln.compile(_map_reads_while_growing, backend="eager", fullgraph=True)(torch.randn(3))


@pytest.mark.parametrize("fn", [_reads_while_growing, _deque_reads_while_growing])
def test_growing_by_a_generator_that_reads_the_list_is_captured(fn):
    # a generator is stepped once per item appended (Note [Generators: lazy])
    run_and_compare(fn, torch.randn(3), expected_graphs=1, expected_breaks=0)


def test_growing_by_code_that_cannot_reach_the_list_is_captured():
    def fn(x):
        y = [x]
        y.extend(x * z for z in range(3))
        y.extend(map(abs, [-1, -2]))
        d = collections.deque([1])
        d.extendleft(str(z) for z in range(2))
        return y, d

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_growing_in_a_callee_by_a_generator_made_by_the_caller_matches_eager():
    def grow(y, gen):
        y.extend(gen)
        return y

    def fn(x):
        y = [1]
        return x + 1, grow(y, (y[-1] + z for z in range(3)))

    run_and_compare(fn, torch.randn(3))


def test_list_item_assignment_errors_are_raised_as_eager():
    def fn(x):
        y = [1, 2]
        try:
            y[None] = 3  # TypeError (kiln's own list raised it inside kiln before)
        except TypeError as e:
            a = str(e)
        try:
            y[5] = 3
        except IndexError as e:
            b = str(e)
        return x + 1, a, b, y

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)
