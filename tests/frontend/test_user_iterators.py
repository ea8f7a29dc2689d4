"""User classes implementing the iterator protocol (__iter__ returning self, __next__): for
loops, iter() and next(it, default) step __next__ as eager does (Note [Objects: iterator
protocol]): outputs, the iterator's state after the call, graph and break counts."""

import torch
from frontend_helpers import assert_same, run_and_compare, run_on_fresh_objects

import kiln


class Count:
    def __init__(self, n):
        self.n = n
        self.i = 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.i >= self.n:
            raise StopIteration
        self.i += 1
        return self.i


class Bad(Count):
    def __next__(self):
        if self.i >= self.n:
            raise ValueError("exhausted badly")
        return super().__next__()


class Wrapper:
    """__iter__ returning another object (the iterator)."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return Count(self.n)


def local_iterator(x):
    c = Count(3)
    for k in c:
        x = x * k + c.i  # the body reads the state __next__ left
    return x, next(c, -1), c.i


def iterable_wrapper(x):
    total = x
    for k in Wrapper(3):
        if k == 2:
            continue
        total = total + k
    return total


def break_out(x):
    c = Count(5)
    for k in c:
        if k == 2:
            break
        x = x - k
    return x, c.i, next(c), next(c, None)


def next_without_default(x):
    c = Count(1)
    a = next(c)
    try:
        next(c)
    except StopIteration:
        return x + a
    return x


def input_iterator(x, c):
    for k in c:
        x = x + k
    return x, next(c, 9)


def explicit_iter(x, c):
    it = iter(c)
    a = next(it)
    return x + a + next(it, 0)


def raising_next(x, c):
    for k in c:
        x = x + k
    return x


def break_in_body(x):
    c = Count(3)
    for k in c:
        x = x + k
        kiln.graph_break()
    return x, c.i


def test_local_iterator():
    run_and_compare(local_iterator, torch.randn(3), expected_graphs=1, expected_breaks=0)


def test_iterable_returning_iterator():
    run_and_compare(iterable_wrapper, torch.randn(3), expected_graphs=1, expected_breaks=0)


def test_break_out_and_next_after():
    run_and_compare(break_out, torch.randn(3), expected_graphs=1, expected_breaks=0)


def test_next_raises_stop_iteration():
    run_and_compare(next_without_default, torch.randn(3), expected_graphs=1, expected_breaks=0)


def test_input_iterator_state_replayed():
    backend = run_on_fresh_objects(input_iterator, lambda: Count(3), torch.randn(3))
    assert backend.calls == 1
    assert kiln.counters["stats"]["graph_breaks"] == 0


def test_iter_then_next():
    backend = run_on_fresh_objects(explicit_iter, lambda: Count(1), torch.randn(3))
    assert backend.calls == 1
    assert kiln.counters["stats"]["graph_breaks"] == 0


def test_next_raising_other_error_is_eager_exact():
    run_on_fresh_objects(raising_next, lambda: Bad(2), torch.randn(3))


def test_graph_break_in_loop_body():
    """The iterator (made in the frame) is rebuilt for each resume function with its state;
    (its int state is specialised: each resume recompiles, as list positions do)."""
    kiln.reset()
    x = torch.randn(3)
    compiled = kiln.compile(break_in_body, backend="eager")
    for _ in range(2):
        assert_same(break_in_body(x), compiled(x))
    assert kiln.counters["stats"]["graph_breaks"] == 3
