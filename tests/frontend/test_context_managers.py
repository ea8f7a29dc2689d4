"""`with` over user managers, contextlib managers and locks (Note [Blocks: context managers])."""

import contextlib
import threading

import pytest
import torch

import kiln
from tests.frontend.frontend_helpers import run_and_compare


def t(*shape):
    return torch.randn(*shape)


class Recorder:
    def __init__(self, log, suppress=False):
        self.log = log
        self.suppress = suppress

    def __enter__(self):
        self.log.append("enter")
        return self

    def __exit__(self, typ, value, tb):
        self.log.append("exit" if typ is None else f"exit {typ.__name__} {value}")
        return self.suppress


def user_manager(x):
    log = []
    with Recorder(log) as r:
        y = x * 2
        log.append(type(r).__name__)
    return y + 1, log


def user_manager_sees_exception(x):
    log = []
    try:
        with Recorder(log):
            x = x + 1
            raise KeyError("k")
    except KeyError:
        x = x * 3
    return x, log


def user_manager_suppresses(x):
    log = []
    with Recorder(log, suppress=True):
        x = x + 1
        raise ValueError("gone")
    return x, log


def manager_passed_in(x, log):
    with Recorder(log):
        y = x.sin()
    return y


@contextlib.contextmanager
def scaled(x, k):
    yield x * k


@contextlib.contextmanager
def tracked(log):
    log.append("setup")
    try:
        yield len(log)
    finally:
        log.append("teardown")


@contextlib.contextmanager
def catching():
    try:
        yield
    except ValueError:
        pass


def make_offset_manager(offset):
    @contextlib.contextmanager
    def offset_by(x):
        yield x + offset

    return offset_by


offset_manager = make_offset_manager(10.0)


def generator_manager_with_closure(x):
    with offset_manager(x) as y:
        z = y * 2
    return z


def generator_manager(x):
    with scaled(x, 3) as y:
        z = y + 1
    return z


def generator_manager_finally(x):
    log = []
    with tracked(log) as n:
        x = x + n
        log.append("body")
    return x, log


def generator_manager_finally_on_raise(x):
    log = []
    try:
        with tracked(log):
            x = x * 2
            raise IndexError("i")
    except IndexError:
        log.append("caught")
    return x, log


def generator_manager_catches(x):
    with catching():
        x = x + 1
        raise ValueError("swallowed")
    return x * 2


def suppress_matching(x):
    with contextlib.suppress(KeyError, IndexError):
        x = x + 1
        raise KeyError("k")
    return x * 2


def suppress_nothing_raised(x):
    with contextlib.suppress(KeyError):
        x = x + 1
    return x * 2


def nullcontext_value(x):
    with contextlib.nullcontext(x.shape[0]) as n:
        y = x * n
    return y


def no_grad_then_raise(x):
    try:
        with torch.no_grad():
            y = x * 2
            raise RuntimeError("r")
    except RuntimeError:
        pass
    return y + x, torch.is_grad_enabled()


def nested_managers(x):
    log = []
    with Recorder(log), scaled(x, 2) as y:
        with torch.no_grad():
            z = y + 1
    return z, log


@pytest.mark.parametrize(
    "fn",
    [
        user_manager,
        user_manager_sees_exception,
        user_manager_suppresses,
        generator_manager,
        generator_manager_with_closure,
        generator_manager_finally,
        generator_manager_finally_on_raise,
        generator_manager_catches,
        suppress_matching,
        suppress_nothing_raised,
        nullcontext_value,
        no_grad_then_raise,
        nested_managers,
    ],
)
def test_traced_in_one_graph(fn):
    x = t(3).requires_grad_() if fn is no_grad_then_raise else t(3)
    run_and_compare(fn, x, expected_graphs=1, expected_breaks=0)


def test_manager_passed_in_leaves_its_effects():
    # (run_and_compare checks the list passed in is mutated as in eager)
    run_and_compare(manager_passed_in, t(3), ["before"], expected_graphs=1, expected_breaks=0)


def test_suppress_other_type_propagates():
    def f(x):
        with contextlib.suppress(KeyError):
            x = x + 1
            raise ValueError("not suppressed")
        return x

    run_and_compare(f, t(3))


def test_break_inside_user_manager_is_placed_at_the_with(capsys):
    # Note [Blocks: rewinding to a with statement]: the graph before the with statement; Python
    # runs the rest (the break inside the block cannot be placed in the resume function)
    def f(x):
        z = x.sin()
        with contextlib.suppress(KeyError), scaled(z, 2) as w:
            y = w + 1
            print("inside")
        return y

    run_and_compare(f, t(3), calls=1, expected_graphs=1)
    assert capsys.readouterr().out == "inside\n" * 2


def test_break_inside_generator_manager_after_mutation_runs_eagerly():
    def f(x, log):
        z = x.sin()
        with tracked(log):
            log.append("mutated")  # a mutation of an object from outside: not undoable
            print("inside")
        return z, log

    run_and_compare(f, t(3), [], calls=1, expected_graphs=0)


lock = threading.Lock()
rlock = threading.RLock()


def with_lock(x):
    y = x + 1
    with lock:
        y = y * 2
    return y.sin()


def with_rlock_in_callee(x):
    def inner(v):
        with rlock:
            return v * 2

    return inner(x + 1) - 1


def test_lock_is_a_break_at_the_with():
    # Note [Blocks: context managers]: a graph before the with statement, Python takes the
    # lock, a graph of the block, Python releases it, a graph after
    run_and_compare(with_lock, t(3), expected_graphs=3, expected_breaks=2)
    assert not lock.locked()


def test_rlock_in_inlined_callee():
    # the break surfaces at the call of `inner` (a function made in the frame: it runs in
    # Python), with the graphs before and after it
    run_and_compare(with_rlock_in_callee, t(3), expected_graphs=2, expected_breaks=1)


def lock_then_raise(x):
    try:
        with lock:
            y = x * 2
            raise ValueError("inside")
    except ValueError:
        y = -x
    return y, lock.locked()


def test_exception_inside_lock_releases_it():
    run_and_compare(lock_then_raise, t(3))
    assert not lock.locked()


def lock_around_indexing(x, i):
    with lock:
        y = x[i]  # may raise at run time: the lock must still be released
    return y


def test_lock_around_data_dependent_op():
    run_and_compare(lock_around_indexing, t(3), torch.tensor([1]))
    run_and_compare(lock_around_indexing, t(3), torch.tensor([9]))
    assert not lock.locked()


def test_lock_passed_in():
    def f(x, lk):
        with lk:
            y = x.cos()
        return y + 1

    run_and_compare(f, t(3), threading.Lock(), expected_graphs=2, expected_breaks=2)


# --- a @contextmanager object kept in a local after its with statement --------------------------
# (Note [Ctx: a finished contextmanager rebuilt])


def finished_manager_then_break(x, log):
    cm = tracked(log)
    with cm as n:
        x = x + n
    kiln.graph_break()
    return x * 2


def finished_manager_after_exception_then_break(x, log):
    cm = tracked(log)
    try:
        with cm as n:
            x = x + n
            raise KeyError("k")
    except KeyError:
        x = x * 3
    kiln.graph_break()
    return x - 1


def finished_local_manager_then_break(x):
    log = []

    @contextlib.contextmanager
    def made_here(t):
        log.append("in")
        yield t + 1
        log.append("out")

    cm = made_here(x)
    with cm as y:
        z = y * 2
    kiln.graph_break()
    return z + 1, log


@pytest.mark.parametrize(
    "fn",
    [finished_manager_then_break, finished_manager_after_exception_then_break],
)
def test_finished_manager_in_a_local_is_rebuilt_at_a_break(fn):
    # the graphs before and after the break (before: no resume, the frame ran in Python)
    run_and_compare(fn, t(3), ["start"], expected_graphs=2, expected_breaks=1)
    assert not kiln.counters["unimplemented"]


def test_finished_manager_made_in_the_frame_is_rebuilt_at_a_break():
    run_and_compare(finished_local_manager_then_break, t(3), expected_graphs=2, expected_breaks=1)
    assert not kiln.counters["unimplemented"]


def returns_finished_manager(x, log):
    cm = tracked(log)
    with cm as n:
        y = x + n
    return y, cm


def _manager_state(cm):
    """What eager leaves in a manager after its with statement, and what using it again does."""
    state = [sorted(k for k in vars(cm) if k != "__doc__"), cm.gen.gi_frame is None]
    state.append(cm.__exit__(None, None, None))  # its generator is finished: nothing runs
    with pytest.raises(AttributeError):  # (its __enter__ deleted func/args/kwds)
        cm.__enter__()
    return state


def test_returned_finished_manager_is_as_eager_left_it():
    x, eager_log, log = t(3), [], []
    y, cm = returns_finished_manager(x, eager_log)
    got, got_cm = kiln.compile(returns_finished_manager, fullgraph=True)(x, log)
    assert torch.equal(got, y) and log == eager_log == ["setup", "teardown"]
    assert got_cm is not cm and _manager_state(got_cm) == _manager_state(cm)


def finished_manager_then_break_in_try(x):
    x = x * 2
    cm = scaled(x, 3)
    try:
        with cm as y:
            x = x + y
        kiln.graph_break()
    except KeyError:
        pass
    return x


def test_break_rewound_before_the_with_rebuilds_the_manager_unentered():
    # the break is moved to the start of the try block, where `cm` had not been entered: the
    # resume function enters a fresh manager (rebuilt finished, its __enter__ would raise)
    run_and_compare(finished_manager_then_break_in_try, t(3), expected_graphs=1)


# --- __enter__ / __exit__ called on a @contextmanager object -------------------------------------
# (Note [Ctx: __enter__ and __exit__ called on a contextmanager])


def enter_exit_called(x, log):
    cm = tracked(log)
    n = cm.__enter__()
    y = x + n
    log.append("body")
    cm.__exit__(None, None, None)
    return y * 2


def exit_called_with_exception(x):
    cm = catching()
    cm.__enter__()
    swallowed = cm.__exit__(ValueError, ValueError("v"), None)
    other = catching()
    other.__enter__()
    error = KeyError("k")
    passed_on = other.__exit__(KeyError, error, None)
    return x + 1, swallowed, passed_on


@contextlib.contextmanager
def raising_after_yield(x):
    yield x * 2
    raise ValueError("after the yield")


def exit_call_raises(x):
    cm = raising_after_yield(x)
    y = cm.__enter__()
    try:
        cm.__exit__(None, None, None)
    except ValueError as e:
        return y + 1, str(e)  # (the frame returns with the manager finished)
    return y


def exit_called_again(x):
    cm = scaled(x, 2)
    y = cm.__enter__()
    first = cm.__exit__(None, None, None)
    again = cm.__exit__(None, None, None)  # its generator has ended: False
    thrown = cm.__exit__(KeyError, KeyError("k"), None)
    return y, first, again, thrown


@pytest.mark.parametrize(
    "fn, args",
    [
        (enter_exit_called, (t(3), ["start"])),
        (exit_called_with_exception, (t(3),)),
        (exit_call_raises, (t(3),)),
        (exit_called_again, (t(3),)),
    ],
)
def test_enter_and_exit_calls_are_traced(fn, args):
    run_and_compare(fn, *args, fullgraph=True, expected_graphs=1)


def break_between_enter_and_exit(x):
    x = x * 2
    cm = scaled(x, 3)
    y = cm.__enter__()
    kiln.graph_break()
    z = x + y
    cm.__exit__(None, None, None)
    return z


def returns_entered_manager(x, log):
    x = x * 2
    cm = tracked(log) if log is not None else scaled(x, 3)
    n = cm.__enter__()
    return x + n, cm


def test_break_while_entered_by_call_is_placed_at_the_enter_call():
    # the graph before the __enter__ call; Python makes the call, a resume function the rest
    # (its __exit__ call is contextlib's own code: a frame of its own runs it in Python)
    run_and_compare(break_between_enter_and_exit, t(3), calls=1, expected_graphs=2)
    assert not [k for k in kiln.counters["unimplemented"] if "__enter__ call" in k]


@pytest.mark.parametrize("log", [None, []])
def test_return_with_a_manager_entered_by_call(log):
    # moved to the __enter__ call; with a side effect in the generator (log) it cannot be moved
    # there: the frame is traced again with the call a break where it is
    kiln.reset()
    x, eager_log = t(3), None if log is None else []
    y, cm = returns_entered_manager(x, eager_log)
    got, got_cm = kiln.compile(returns_entered_manager)(x, log)
    assert torch.equal(got, y) and log == eager_log
    assert not kiln.counters["unimplemented"]  # (no fallback of the whole frame)
    for manager in (cm, got_cm):
        assert manager.__exit__(None, None, None) is False
        assert manager.gen.gi_frame is None
    assert log == eager_log


def mutation_then_break_while_entered_by_call(x, log):
    x = x * 2
    cm = scaled(x, 3)
    y = cm.__enter__()
    log.append("mutated")
    kiln.graph_break()
    cm.__exit__(None, None, None)
    return x + y


def test_break_that_cannot_move_back_leaves_the_enter_call_to_python():
    # the append cannot be undone: traced again, the __enter__ call is the break, Python makes
    # it; the graph before it and the resumed block's (before: the whole frame in Python)
    run_and_compare(
        mutation_then_break_while_entered_by_call, t(3), ["start"], calls=1, expected_graphs=2
    )
    assert not [k for k in kiln.counters["graph_break"] if "__enter__ call" in k]
