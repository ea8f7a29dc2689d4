"""Managers kiln leaves to Python (sys-stream swaps, bound profilers): the breaks at their
construction, with statement and __exit__ carry one reason (ctx_managers.untraced_reason)."""

import contextlib
import io
import sys
import threading

import torch
from frontend_helpers import CountingBackend

import kiln


def _breaks(fn, *args):
    """(compiled result, eager result, graph-break table) of one compiled call."""
    expected = fn(*args)
    kiln.reset()
    kiln.counters.clear()
    backend = CountingBackend()
    got = kiln.compile(fn, backend=backend)(*args)
    return got, expected, dict(kiln.counters["graph_break"]), backend


def swapped_stdout(t, sink):
    y = t.sin()
    with contextlib.redirect_stdout(sink):
        print("inside")
        y = y + t.cos()
    print("after")
    return y.tan()


def test_stream_swap_with_a_print_in_its_block(capsys):
    sink = io.StringIO()
    t = torch.randn(3)
    got, expected, breaks, _ = _breaks(swapped_stdout, t, sink)
    torch.testing.assert_close(got, expected)
    # the print inside the block went to the sink both times, the one after it to stdout
    assert sink.getvalue() == "inside\ninside\n"
    assert capsys.readouterr().out == "after\nafter\n"
    assert not any("__exit__" in r for r in breaks), breaks


def redirected_stderr(t):
    y = t * 2
    with contextlib.redirect_stderr(sys.stdout):
        y = y + 1
    return y - 3


def test_stream_swap_enter_and_exit_break_for_one_reason():
    t = torch.randn(4)
    before = sys.stderr
    got, expected, breaks, backend = _breaks(redirected_stderr, t)
    torch.testing.assert_close(got, expected)
    assert sys.stderr is before  # the __exit__ ran (in Python)
    reason = f"context manager {contextlib.redirect_stderr} not supported (it swaps a sys stream)"
    assert breaks == {reason: 2}, breaks  # at the with statement and at its __exit__
    assert backend.calls == 3  # before, inside and after the block


def bound_profiler(x):
    with torch.profiler.profile() as p:
        y = x + 1
    return y * 2, p.profiler is not None


def test_bound_profiler_breaks_for_one_reason():
    x = torch.rand(2)
    got, expected, breaks, backend = _breaks(bound_profiler, x)
    torch.testing.assert_close(got[0], expected[0])
    assert got[1] is expected[1] is True
    assert len(breaks) == 1, breaks
    (reason,) = breaks
    assert "profile profiler" in reason and breaks[reason] == 3
    assert backend.calls >= 1  # `y * 2` after the block is compiled


LOCK = threading.Lock()


def under_lock(t):
    y = t.sin()
    with LOCK:
        y = y + t.cos()
    return y.tan()


def test_c_manager_enter_and_exit_break_for_one_reason():
    t = torch.randn(3)
    got, expected, breaks, backend = _breaks(under_lock, t)
    torch.testing.assert_close(got, expected)
    assert not LOCK.locked()
    assert len(breaks) == 1 and list(breaks.values()) == [2], breaks
    assert "lock" in next(iter(breaks))
    assert backend.calls == 3


def reads_profiler_results(x):
    with torch.profiler.profile() as prof:
        y = x * 3
    tree = prof.profiler.kineto_results.experimental_event_tree()
    return y - 1, len(tree) > 0


def test_pybind_method_break_names_its_class():
    # two causes, two reasons: the profiler Python runs, and a C method of its results
    x = torch.rand(4)
    got, expected, breaks, _ = _breaks(reads_profiler_results, x)
    torch.testing.assert_close(got[0], expected[0])
    assert got[1] == expected[1]
    assert len(breaks) == 2, breaks
    assert "call to _ProfilerResult.experimental_event_tree (not traceable)" in breaks, breaks


def stderr_captured_by_the_program(t):
    buf = io.StringIO()
    y = t + 1
    with contextlib.redirect_stderr(buf):
        print("mine", file=sys.stderr)
        y = y * 2  # (a resume function compiled inside the block: kiln warns there)
    return y, buf.getvalue()


def test_kiln_warning_goes_to_the_stream_of_the_call_not_the_programs(capsys):
    # Note [Logs: the stream a warning goes to]
    expected = stderr_captured_by_the_program(torch.ones(2))
    kiln.reset()
    got = kiln.compile(stderr_captured_by_the_program, backend="eager")(torch.ones(2))
    assert got[1] == expected[1] == "mine\n"
    torch.testing.assert_close(got[0], expected[0])
    assert "graph break" in capsys.readouterr().err  # (the warning is still shown)
