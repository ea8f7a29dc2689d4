"""While a sys.settrace function is set, compiled frames run as written, so the tracer sees the
lines eager runs (Note [Cache: frames under a trace function])."""

import sys

import torch

import kiln
from kiln import config


def _scaled(x):
    y = x * 2
    z = y + 1
    return z


def _lines_of(target, call):
    """Lines of `target` (relative to its first line) a trace function sees while `call` runs."""
    seen = []

    def tracer(frame, event, arg):
        if event == "line" and frame.f_code is target.__code__:
            seen.append(frame.f_lineno - target.__code__.co_firstlineno)
        return tracer

    old = sys.gettrace()
    sys.settrace(tracer)
    try:
        result = call()
    finally:
        sys.settrace(old)
    return seen, result


def tracing_caller(x):
    # the program sets the tracer itself (a break); the function it then calls is inlined
    # into the resume function's graph unless the frames run as written
    seen, out = _lines_of(_scaled, lambda: _scaled(x))
    return seen, out


def test_a_tracer_the_program_sets_sees_the_lines_of_a_callee():
    kiln.reset()
    x = torch.ones(3)
    compiled = kiln.compile(tracing_caller, backend="eager")
    expected = tracing_caller(x)
    for _ in range(2):
        got = compiled(x)
        assert got[0] == expected[0] == [1, 2, 3]
        torch.testing.assert_close(got[1], expected[1])


def test_a_compiled_function_called_under_a_tracer_runs_its_lines():
    kiln.reset()
    x = torch.ones(3)
    compiled = kiln.compile(_scaled, backend="eager")
    compiled(x)  # compiled before the tracer is set: the entry is not used under it
    seen, out = _lines_of(_scaled, lambda: compiled(x))
    assert seen == [1, 2, 3]
    torch.testing.assert_close(out, _scaled(x))
    assert compiled(x) is not None and kiln.counters["stats"]["unique_graphs"] == 1


def test_the_setting_off_keeps_compiled_frames_under_a_tracer(monkeypatch):
    monkeypatch.setattr(config, "eager_under_trace", False)
    kiln.reset()
    x = torch.ones(3)
    compiled = kiln.compile(_scaled, backend="eager")
    compiled(x)
    seen, out = _lines_of(_scaled, lambda: compiled(x))
    assert seen == []  # the graph ran: no line of _scaled ran in Python
    torch.testing.assert_close(out, _scaled(x))
