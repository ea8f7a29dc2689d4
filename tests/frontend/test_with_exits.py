"""break / continue / return inside the with block of a user-defined (stateful) context
manager: compiled in one graph, __exit__ run on each exit as in eager (the manager's log, an
input's and one made in the frame, compared with eager's), no graph break."""

import torch
from frontend_helpers import CountingBackend, assert_same

import kiln


class CM:
    def __init__(self):
        self.log = []
        self.depth = 0

    def __enter__(self):
        self.depth += 1
        self.log.append(("enter", self.depth))
        return self

    def __exit__(self, typ, value, tb):
        self.log.append(("exit", None if typ is None else typ.__name__))
        self.depth -= 1
        return False


class Suppress(CM):
    def __exit__(self, typ, value, tb):
        super().__exit__(typ, value, tb)
        return True


def continue_and_break(x, cm):
    for i in range(4):
        with cm:
            if i == 1:
                continue
            x = x + i * cm.depth
            if i == 2:
                break
    return x


def return_inside(x, cm):
    for i in range(3):
        with cm:
            if i == 1:
                return x * 2, cm.depth
            x = x + 1
    return x, cm.depth


def helper(x, cm):
    with cm:
        for i in range(3):
            if i == 2:
                return x - i
            x = x * 2
    return x


def return_in_inlined_callee(x, cm):
    return helper(x, cm) + 1


def nested_managers_local(x, cm):
    with cm:
        inner = CM()
        for i in range(3):
            with inner:
                if i == 0:
                    continue
                if i == 2:
                    return x + len(inner.log), inner.log
                x = x * 2
    return x, inner.log


def suppressing_manager_in_loop(x, cm):
    for i in range(3):
        with Suppress() as s:
            if i == 0:
                raise ValueError("suppressed")
            if i == 2:
                break
            x = x + len(s.log)
    with cm:
        return x


def _compare(fn):
    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(fn, backend=backend)
    x = torch.randn(2)
    results = []
    for f in (fn, compiled, compiled):
        cm = CM()
        results.append((f(x, cm), cm.log, cm.depth))
    for got in results[1:]:
        assert_same(results[0], got)
    assert kiln.counters["stats"]["graph_breaks"] == 0, dict(kiln.counters["graph_break"])
    assert backend.calls == 1
    assert kiln.counters["stats"]["recompiles"] == 0


def test_continue_and_break_run_exit():
    _compare(continue_and_break)


def test_return_inside_with_runs_exit():
    _compare(return_inside)


def test_return_inside_with_in_inlined_callee():
    _compare(return_in_inlined_callee)


def test_nested_managers_made_in_frame():
    _compare(nested_managers_local)


def test_suppressing_manager_with_break():
    _compare(suppressing_manager_in_loop)
