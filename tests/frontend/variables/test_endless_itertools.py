"""itertools.repeat(x) and itertools.count() in a compiled frame: endless, stepped one at a time."""

import itertools

import pytest
import torch

import kiln
from kiln.exc import Unsupported


def test_repeat_without_times_in_a_loop_with_break():
    def fn(x):
        n = 0
        for v in itertools.repeat(0.5):
            x = x + v
            n += 1
            if n == 4:
                break
        return x

    x = torch.zeros(3)
    torch.testing.assert_close(kiln.compile(fn, backend="eager", fullgraph=True)(x), fn(x))


def test_count_with_zip_and_next_then_returned():
    def fn(x):
        c = itertools.count(5, 3)
        total = x * next(c)
        for i, t in zip(c, [x, x]):
            total = total + i * t
        return total, c

    x = torch.ones(2)
    got, got_c = kiln.compile(fn, backend="eager", fullgraph=True)(x)
    want, want_c = fn(x)
    torch.testing.assert_close(got, want)
    assert next(got_c) == next(want_c)


def test_repeat_across_a_break_is_the_same_object():
    def fn(x):
        r = itertools.repeat(x)
        first = next(r)
        kiln.graph_break()
        return first + next(r), r

    x = torch.full((2,), 2.0)
    out, r = kiln.compile(fn, backend="eager")(x)
    torch.testing.assert_close(out, x * 2)
    assert next(r) is x


def test_taking_every_item_is_a_break_not_a_hang():
    def fn(x):
        return list(itertools.repeat(x))

    with pytest.raises(Unsupported):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.ones(1))


@pytest.mark.parametrize("start, step", [(10, 2.5), (0, 0.1), (1.5, 2), (3, -1)])
def test_count_numbers_are_counts_own(start, step):
    """count keeps start as given, then adds step to the last number (floats round as they do)."""

    def fn(x):
        c = itertools.count(start, step)
        first = [next(c) for _ in range(12)]
        return x + 1, first, repr(first), c

    x = torch.zeros(2)
    got = kiln.compile(fn, backend="eager", fullgraph=True)(x)
    want = fn(x)
    torch.testing.assert_close(got[0], want[0])
    assert got[2] == want[2]  # (repr: 10 is not 10.0)
    assert [next(got[3]) for _ in range(3)] == [next(want[3]) for _ in range(3)]
