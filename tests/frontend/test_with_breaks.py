"""Graph breaks inside the with block of a traced user context manager: placed where they happen,
the manager entered once and exited once (Note [Blocks: breaks inside a user with block])."""

import gc

import pytest
import torch

import kiln
from tests.frontend.frontend_helpers import run_and_compare


class GradSetter:
    """Sets grad mode on enter, puts the previous mode back on exit."""

    def __init__(self, mode):
        self.prev = torch.is_grad_enabled()
        self.mode = mode

    def __enter__(self):
        torch._C._set_grad_enabled(self.mode)

    def __exit__(self, typ, value, tb):
        torch._C._set_grad_enabled(self.prev)


class Recorder:
    """Logs its enter and exit (with the exception it saw); suppresses when told to."""

    def __init__(self, log, name="m", suppress=False):
        self.log = log
        self.name = name
        self.suppress = suppress

    def __enter__(self):
        self.log.append(f"enter {self.name}")
        return self

    def __exit__(self, typ, value, tb):
        seen = None if typ is None else f"{typ.__name__}: {value}"
        self.log.append(f"exit {self.name} {seen}")
        return self.suppress


def run_logged(fn, x, expected_log, expected_graphs=None, expected_ops=None):
    """Eager vs compiled with a fresh log each (the logs are compared as mutated arguments);
    the eager log is the one expected. `expected_ops`: graph calls captured in all."""
    run_and_compare(fn, x, [], expected_graphs=expected_graphs)
    if expected_ops is not None:
        assert kiln.counters["stats"]["calls_captured"] == expected_ops
    log = []
    try:
        fn(x.clone(), log)
    except Exception:
        pass
    assert log == expected_log


def raises_after_break(x):
    """A callee that breaks, then raises (Python runs it at the caller's break)."""
    kiln.graph_break()
    raise ValueError(f"bad {x.shape[0]}")


@pytest.mark.parametrize("grad", [False, True])
def test_grad_setter_break_then_normal_exit(grad):
    def fn(x):
        with GradSetter(True):
            x = x + 1
            if torch.is_grad_enabled():
                x = x * 2
            kiln.graph_break()
            inside = torch.is_grad_enabled()
            x = torch.relu(x)
        return x - 1, inside, torch.is_grad_enabled()

    with torch.set_grad_enabled(grad):
        # the block before the break, and the block after it with the exit and `x - 1`
        run_and_compare(fn, torch.randn(3, requires_grad=True), expected_graphs=2)
        assert torch.is_grad_enabled() == grad


def test_exit_runs_once_after_the_block():
    def fn(x, log):
        with Recorder(log):
            x = x + 1
            log.append("before break")
            kiln.graph_break()
            log.append("after break")
            x = x * 3
        log.append("after block")
        return x

    run_logged(
        fn,
        torch.randn(3),
        ["enter m", "before break", "after break", "exit m None", "after block"],
        expected_graphs=2,
    )


def test_enter_value_bound_by_as():
    class Scaled:
        def __init__(self, x):
            self.x = x

        def __enter__(self):
            return self.x * 2

        def __exit__(self, *exc):
            return False

    def fn(x):
        with Scaled(x) as y:
            z = y + 1
            kiln.graph_break()
            z = z + y
        return z, y

    run_and_compare(fn, torch.randn(4), expected_graphs=2)


def test_as_binding_of_self():
    def fn(x, log):
        with Recorder(log, "a") as m:
            x = x + 1
            kiln.graph_break()
            log.append(m.name)
        return x * 2

    run_logged(fn, torch.randn(2), ["enter a", "a", "exit a None"], expected_graphs=2)


@pytest.mark.parametrize("suppress", [False, True])
def test_exception_at_the_break(suppress):
    """The instruction run at the break raises: __exit__ gets it, and its answer decides."""

    def fn(x, log):
        y = x + 1
        with Recorder(log, suppress=suppress):
            y = y * 2
            raises_after_break(y)
            y = y - 100  # not reached
        return y + 1

    # the block before the break; a suppressed exception continues after the block (`y + 1`)
    graphs, ops = (2, 3) if suppress else (1, 2)
    run_logged(fn, torch.randn(3), ["enter m", "exit m ValueError: bad 3"], graphs, ops)


def test_exception_after_the_break():
    def fn(x, log):
        with Recorder(log, suppress=True):
            x = x + 1
            kiln.graph_break()
            if log:
                raise KeyError("k")
            x = x - 100
        return x * 2

    run_logged(fn, torch.randn(3), ["enter m", "exit m KeyError: 'k'"], expected_graphs=2)


def test_exception_after_the_break_not_suppressed():
    def fn(x, log):
        with Recorder(log):
            x = x + 1
            kiln.graph_break()
            raise RuntimeError("no")
        return x

    run_logged(fn, torch.randn(3), ["enter m", "exit m RuntimeError: no"], expected_graphs=1)


def test_nested_user_managers():
    def fn(x, log):
        with Recorder(log, "outer"):
            x = x + 1
            with Recorder(log, "inner"):
                x = x * 2
                kiln.graph_break()
                x = x - 3
            x = x.relu()
        return x

    run_logged(
        fn,
        torch.randn(5),
        ["enter outer", "enter inner", "exit inner None", "exit outer None"],
        expected_graphs=2,
    )


@pytest.mark.parametrize("which", ["inner", "outer"])
def test_nested_suppression_at_the_break(which):
    def fn(x, log):
        with Recorder(log, "outer", suppress=which == "outer"):
            x = x + 1
            with Recorder(log, "inner", suppress=which == "inner"):
                raises_after_break(x)
            x = x * 10
        return x - 1

    inner = "exit inner ValueError: bad 4"
    outer = "exit outer None" if which == "inner" else "exit outer ValueError: bad 4"
    ops = 3 if which == "inner" else 2  # (x * 10, x - 1 run after the inner block only)
    run_logged(fn, torch.randn(4), ["enter outer", "enter inner", inner, outer], 2, ops)


def test_nested_grad_setters():
    def fn(x):
        with GradSetter(True):
            x = x + 1
            with GradSetter(False):
                y = x * 2
                kiln.graph_break()
                z = x * 3
            w = x * 4
        return y, z, w

    with torch.no_grad():
        run_and_compare(fn, torch.randn(3, requires_grad=True), expected_graphs=2)
    run_and_compare(fn, torch.randn(3, requires_grad=True), expected_graphs=2)


def test_manager_mutating_its_attributes():
    class Depth:
        def __init__(self):
            self.depth = 0
            self.entered = 0

        def __enter__(self):
            self.depth += 1
            self.entered += 1
            return self

        def __exit__(self, *exc):
            self.depth -= 1

    def fn(x, m):
        with m:
            x = x + m.depth
            kiln.graph_break()
            x = x * m.depth
        return x + m.depth

    m = Depth()
    kiln.reset()
    compiled = kiln.compile(fn, backend="eager")
    x = torch.randn(3)
    expected = fn(x, Depth())
    torch.testing.assert_close(compiled(x, m), expected)
    assert (m.depth, m.entered) == (0, 1)
    torch.testing.assert_close(compiled(x, m), expected)
    assert (m.depth, m.entered) == (0, 2)

    def made_inside(x):
        with Depth() as d:
            x = x + d.depth
            kiln.graph_break()
            x = x * (d.depth + d.entered)
        return x, d.depth, d.entered

    run_and_compare(made_inside, torch.randn(3), expected_graphs=2)


def test_break_in_a_loop_inside_the_block():
    def fn(x, log):
        with Recorder(log):
            for i in range(3):
                x = x + i
                kiln.graph_break()
                x = x * 2
        return x

    # (the resume function of the loop body is specialised on `i`, as without a with block)
    kiln.reset()
    compiled = kiln.compile(fn, backend="eager")
    x = torch.randn(3)
    for _ in range(2):
        log = []
        torch.testing.assert_close(compiled(x, log), fn(x, []))
        assert log == ["enter m", "exit m None"]
    assert kiln.counters["stats"]["unique_graphs"] == 4  # one per part between breaks


def test_grad_mode_block_inside_a_user_block():
    def fn(x):
        with GradSetter(True):
            a = x * 2
            with torch.no_grad():
                b = x * 3
                kiln.graph_break()
                c = x * 4
            d = x * 5
        return a, b, c, d, torch.is_grad_enabled()

    with torch.no_grad():
        run_and_compare(fn, torch.randn(3, requires_grad=True), expected_graphs=2)


def test_user_block_inside_grad_mode_blocks():
    """Grad-mode blocks around a user block stay entered at the break too: the mode the user's
    enter set is the one the rest of the block runs in."""

    def fn(x):
        with torch.enable_grad():
            with GradSetter(False):
                with torch.enable_grad():
                    a = x * 3
                    kiln.graph_break()
                    b = x * 4
                c = x * 5
            d = x * 6
        return a, b, c, d, torch.is_grad_enabled()

    for grad in (False, True):
        with torch.set_grad_enabled(grad):
            run_and_compare(fn, torch.randn(3, requires_grad=True), expected_graphs=2)
            assert torch.is_grad_enabled() == grad


def raises_key_error_after_break():
    kiln.graph_break()
    raise KeyError("k")


def test_suppressed_through_a_grad_mode_block():
    class SuppressKeyError(GradSetter):
        def __exit__(self, typ, value, tb):
            super().__exit__(typ, value, tb)
            return typ is KeyError

    def fn(x):
        with torch.no_grad():
            with SuppressKeyError(True):
                a = x * 3
                raises_key_error_after_break()
            b = x * 5
        return a, b, torch.is_grad_enabled()

    run_and_compare(fn, torch.randn(3, requires_grad=True), expected_graphs=2)


@pytest.mark.parametrize("suppress", ["outer", "inner"])
def test_nested_blocks_breaking_in_a_loop(suppress):
    """Breaks in a resumed loop inside two user blocks (entered by the resume function), the
    third one raising: each level's __exit__ once, the suppressing one continues after it."""

    def boom(i):
        kiln.graph_break()
        if i == 2:
            raise ValueError("three")
        return i

    def fn(x, log):
        with torch.no_grad(), Recorder(log, "outer", suppress=suppress == "outer"):
            with Recorder(log, "inner", suppress=suppress == "inner"):
                for i in range(4):
                    x = x * 2 + boom(i)
                x = x - 1
            x = x * 3
        return x - 5

    x = torch.ones(2)
    expected_log = []
    expected = fn(x, expected_log)
    kiln.reset()
    compiled = kiln.compile(fn, backend="eager")
    for _ in range(2):
        log = []
        torch.testing.assert_close(compiled(x, log), expected)
        assert log == expected_log
    assert kiln.counters["stats"]["unique_graphs"] == 4


def test_no_recompile_on_later_calls():
    def fn(x, log):
        with Recorder(log):
            x = x + 1
            kiln.graph_break()
            x = x * 2
        return x

    kiln.reset()
    compiled = kiln.compile(fn, backend="eager")
    for _ in range(4):
        log = []
        torch.testing.assert_close(compiled(torch.ones(2), log), torch.full((2,), 4.0))
        assert log == ["enter m", "exit m None"]
    assert kiln.counters["stats"]["recompiles"] == 0
    assert kiln.counters["stats"]["unique_graphs"] == 2


class Finalized:
    """Logs its finalizer into the list it is given."""

    def __init__(self, log):
        self.log = log

    def __del__(self):
        self.log.append("del")


@pytest.mark.parametrize("user", [False, True])
def test_store_break_inside_a_with_block(user):
    """A local store that may run __del__ is a break; Python runs it inside the block and the
    resume function gets the value just stored, not the one before."""

    def fn(x, log):
        obj = Finalized(log)
        with Recorder(log, "m") if user else torch.no_grad():
            y = x + 1
            obj = 5
            y = y * obj
        return y, obj

    log = []
    expected = fn(torch.ones(2), log)
    kiln.reset()
    compiled = kiln.compile(fn, backend="eager")
    compiled(torch.ones(2), [])  # (the compiling call: its trace may hold values until a
    gc.collect()  # collection, Note [Resume: arguments moved, not held])
    got_log = []
    got = compiled(torch.ones(2), got_log)
    torch.testing.assert_close(got[0], expected[0])
    assert got[1] == expected[1] == 5
    assert got_log == log == (["enter m", "del", "exit m None"] if user else ["del"])


def callee_that_breaks(x):
    x = x + 1
    kiln.graph_break()
    return x * 2


@pytest.mark.parametrize("kind", ["branch", "callee", "two managers", "return", "global"])
def test_other_breaks_inside_a_user_block(kind):
    def branch(x, log):
        with Recorder(log):
            y = x + 1
            if y.sum() > 0:  # a data-dependent branch: the break
                y = y * 2
            y = y - 1
        return y

    def callee(x, log):
        with Recorder(log):
            y = callee_that_breaks(x)
            y = y - 1
        return y

    def two(x, log):
        with Recorder(log, "a"), Recorder(log, "b"):
            y = x + 1
            kiln.graph_break()
            y = y - 1
        return y

    def returns_inside(x, log):
        with Recorder(log):
            y = x + 1
            kiln.graph_break()
            return y * 5

    def global_manager(x, log):
        with GLOBAL_MANAGER:
            y = x + GLOBAL_MANAGER.depth
            kiln.graph_break()
            y = y * GLOBAL_MANAGER.depth
        return y

    fn = {
        "branch": branch,
        "callee": callee,
        "two managers": two,
        "return": returns_inside,
        "global": global_manager,
    }[kind]
    graphs = 3 if kind == "callee" else 2  # (the callee's own two)
    for sign in (1.0, -1.0):
        run_and_compare(fn, torch.full((3,), sign), [], expected_graphs=graphs)
        assert GLOBAL_MANAGER.depth == 0


class Nesting:
    """Counts how deep it is entered."""

    depth = 0

    def __enter__(self):
        self.depth += 1

    def __exit__(self, *exc):
        self.depth -= 1


GLOBAL_MANAGER = Nesting()


class BreakingPair:
    """Iterating it breaks: an unpacking of it is an instruction no break can stop at."""

    def __iter__(self):
        kiln.graph_break()
        return iter((1, 2))


def test_unplaceable_break_falls_back_to_the_rewind():
    def fn(x):
        x = x * 7
        with GradSetter(False):
            y = x + 1
            a, b = BreakingPair()
            y = y * a + b
        return y

    # the graph before the with statement stays; the with statement on runs in Python
    run_and_compare(fn, torch.ones(2, requires_grad=True), expected_graphs=1)


def test_resume_function_guarded_on_the_manager_class():
    """One compiled function, managers of several classes passed in: each exit is its own."""
    log = []

    class First:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            log.append("first")

    class Second:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            log.append("second")

    class Third(First):
        def __exit__(self, *exc):
            log.append("third")

    def fn(x, m):
        with m:
            x = x + 1
            kiln.graph_break()
            x = x * 2
        return x

    kiln.reset()
    compiled = kiln.compile(fn, backend="eager")
    for m in (First(), Second(), First(), Third(), Second()):
        log.clear()
        torch.testing.assert_close(compiled(torch.ones(1), m), torch.full((1,), 4.0))
        assert log == [type(m).__name__.lower()]
    assert kiln.counters["stats"]["unique_graphs"] >= 2  # (the block before and after the break)


class Collector:
    """A manager whose method, called inside its own block, breaks."""

    def __init__(self):
        self.items = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.items.append("exit")
        return False

    def add(self, x):
        kiln.graph_break()  # (before any side effect: the break is placed at the call)
        self.items.append(x.shape[0])
        return x * 2


def test_break_in_a_method_of_the_manager_made_in_the_frame():
    """The manager is rebuilt once, before the block it opens, and the broken call's `self` is
    that same object (the code at the break loads no temp before storing it)."""

    def fn(x):
        with Collector() as m:
            y = m.add(x + 1)
            y = y - 1
        return y, m.items

    kiln.reset()
    run_and_compare(fn, torch.ones(3))
    assert kiln.counters["frames"]["internal_errors"] == 0, dict(kiln.counters["frames"])
