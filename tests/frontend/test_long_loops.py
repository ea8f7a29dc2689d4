"""Loops too long to unroll (Note [Translator: long loops]) and ranges too long to keep item by
item: the frame runs eagerly, quickly, with eager's result."""

import itertools
import sys
import time

import torch
from frontend_helpers import run_and_compare

import kiln
from kiln import config


def long_loop(x):
    total = 0
    for i in range(config.loop_pass_limit + 5):
        total += i
    return x + total


def test_loop_past_the_limit_runs_eagerly():
    start = time.perf_counter()
    run_and_compare(long_loop, torch.ones(2))
    assert time.perf_counter() - start < 60


def length_of_a_huge_range(x):
    r = range(sys.maxsize)
    return x + 1, r.__len__(), len(r), r[-1]


def test_huge_range_is_not_kept_item_by_item():
    start = time.perf_counter()
    run_and_compare(length_of_a_huge_range, torch.ones(2))
    assert time.perf_counter() - start < 60


def short_loop(x):
    for _ in range(100):
        x = x + 1
    return x


def test_short_loop_is_still_one_graph():
    run_and_compare(short_loop, torch.ones(2), expected_graphs=1)


def test_loop_limit_counts_passes_of_one_trace(monkeypatch):
    monkeypatch.setattr(config, "loop_pass_limit", 50)
    kiln.reset()
    compiled = kiln.compile(short_loop, backend="eager")
    torch.testing.assert_close(compiled(torch.ones(2)), short_loop(torch.ones(2)))
    assert kiln.counters["stats"]["unique_graphs"] == 0  # ran eagerly


def repeats(x, n):
    return x + sum(1 for _ in itertools.repeat(None, n))


def test_repeat_longer_than_the_items_limit_breaks(monkeypatch):
    monkeypatch.setattr(config, "range_items_limit", 10)
    run_and_compare(repeats, torch.ones(2), 5)  # kept item by item
    assert not kiln.counters["graph_break"]
    run_and_compare(repeats, torch.ones(2), 11)
    assert any("itertools.repeat" in r for r in kiln.counters["graph_break"])


def ackermann(m, n):
    if m == 0:
        return n + 1
    if n == 0:
        return ackermann(m - 1, 1)
    return ackermann(m - 1, ackermann(m, n - 1))


def pure_python_then_tensor(x):
    total = sum(ackermann(2, i) for i in range(12))  # (recursion: few loop passes, many calls)
    return x + total


def tensor_then_pure_python(x):
    y = x * 2
    return y + sum(ackermann(2, i) for i in range(12))


def test_long_pure_python_trace_runs_eagerly(monkeypatch):
    monkeypatch.setattr(config, "python_trace_limit", 5_000)
    kiln.reset()
    compiled = kiln.compile(pure_python_then_tensor, backend="eager")
    for _ in range(2):
        torch.testing.assert_close(compiled(torch.ones(2)), pure_python_then_tensor(torch.ones(2)))
    assert kiln.counters["stats"]["unique_graphs"] == 0  # ran eagerly, and was not traced again
    assert any("python_trace_limit" in r for r in kiln.counters["unimplemented"])


def test_python_trace_limit_spares_frames_with_tensor_ops_and_fullgraph(monkeypatch):
    monkeypatch.setattr(config, "python_trace_limit", 5_000)
    run_and_compare(tensor_then_pure_python, torch.ones(2), expected_graphs=1)
    kiln.reset()
    compiled = kiln.compile(pure_python_then_tensor, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(torch.ones(2)), pure_python_then_tensor(torch.ones(2)))
    assert kiln.counters["stats"]["unique_graphs"] == 1
