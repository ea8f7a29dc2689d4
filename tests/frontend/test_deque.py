"""collections.deque inside compiled code: made while tracing or passed in, every list-like
operation traced, mutations of an input deque replayed after the graph."""

import collections
from collections import deque

import torch
from frontend_helpers import assert_same, run_and_compare

import kiln


def window(x):
    q = deque(maxlen=3)
    for i in range(5):
        q.append(x + i)  # the first two fall off the left
    q.appendleft(x * 10)  # and now the rightmost
    first = q.popleft()
    return first + q[0] + q[-1] + len(q) + q.maxlen


def test_deque_made_inside_with_maxlen():
    run_and_compare(window, torch.randn(3), expected_graphs=1, expected_breaks=0)


def ops(x):
    q = collections.deque([x, x + 1])
    q.extend([x * 2, x * 3])
    q.extendleft([x - 1, x - 2])  # reversed at the left: [x-2, x-1, x, ...]
    q.rotate(2)
    q.rotate(-1)
    last = q.pop()
    total = sum(q)
    q.reverse()
    n = deque([3, 1, 3, 2])
    return total + last + q[2] + n.index(1) + n.count(3) + (2 in n) + bool(n)


def test_deque_operations():
    run_and_compare(ops, torch.randn(2), expected_graphs=1, expected_breaks=0)


def returns_deque(x):
    q = deque([x + 1], maxlen=2)
    q.append(x * 2)
    q.append(x * 3)
    return q


def test_deque_made_inside_is_returned_with_its_maxlen():
    kiln.reset()
    x = torch.randn(2)
    got = kiln.compile(returns_deque, backend="eager")(x)
    expected = returns_deque(x)
    assert type(got) is deque and got.maxlen == 2
    assert_same(list(expected), list(got))
    assert kiln.counters["stats"]["graph_breaks"] == 0


def mutate_input(x, q):
    q.append(x + 1)
    old = q.popleft()
    q.appendleft(old * 2)
    return x * len(q)


def test_input_deque_mutations_replayed():
    kiln.reset()
    compiled = kiln.compile(mutate_input, backend="eager")
    x = torch.randn(2)
    for _ in range(2):
        items = [torch.randn(2) for _ in range(3)]
        q_eager, q_comp = deque(items, maxlen=3), deque(items, maxlen=3)
        expected = mutate_input(x, q_eager)
        got = compiled(x, q_comp)
        assert_same(expected, got)
        assert q_comp.maxlen == 3
        assert_same(list(q_eager), list(q_comp))
    assert kiln.counters["stats"]["graph_breaks"] == 0
    assert kiln.counters["stats"]["unique_graphs"] == 1


def test_input_deque_of_another_length_recompiles():
    kiln.reset()
    compiled = kiln.compile(mutate_input, backend="eager")
    x = torch.randn(2)
    for n in (2, 3):
        items = [torch.randn(2) for _ in range(n)]
        q_eager, q_comp = deque(items), deque(items)
        assert_same(mutate_input(x, q_eager), compiled(x, q_comp))
        assert_same(list(q_eager), list(q_comp))
    assert kiln.counters["stats"]["unique_graphs"] == 2


def iterate_with_break(x):
    q = deque([x, x * 2, x * 3])
    out = []
    for t in q:
        out.append(t + 1)
        kiln.graph_break()
    return out, q


def test_break_inside_a_loop_over_a_deque():
    kiln.reset()
    x = torch.randn(2)
    expected_out, expected_q = iterate_with_break(x)
    got_out, got_q = kiln.compile(iterate_with_break, backend="eager")(x)
    assert_same(expected_out, got_out)
    assert type(got_q) is deque and len(got_q) == 3
    assert_same(list(expected_q), list(got_q))


def pop_empty(x):
    q = deque()
    q.pop()
    return x


def test_pop_from_empty_raises_like_eager():
    run_and_compare(pop_empty, torch.randn(2))


def deque_as_text(x, d):
    made = collections.deque("ab", maxlen=3)
    return x + 1, str(d), str(made), f"{made}", str(collections.deque([1, 2]))


def test_str_of_a_deque_is_a_deques():
    run_and_compare(deque_as_text, torch.randn(2), collections.deque([3, 4]))
