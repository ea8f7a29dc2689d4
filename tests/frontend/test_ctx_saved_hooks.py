"""`disable_saved_tensors_hooks` traced as graph switches, and a break inside its block
(Note [Ctx: disable_saved_tensors_hooks])."""

import os

import pytest
import torch
from frontend_helpers import CountingBackend, run_and_compare

import kiln

HOOKS = torch._C._autograd
disable = torch.autograd.graph.disable_saved_tensors_hooks


def _switches(gm):
    out = []
    for n in gm.graph.nodes:
        if n.target is HOOKS._saved_tensors_hooks_disable:
            out.append(n.args[0])
        elif n.target is HOOKS._saved_tensors_hooks_enable:
            out.append(None)
    return out


def nested(a):
    @disable("outer")
    def f(x):
        @disable("inner")
        def g(y):
            return y * 2

        return g(x) + x

    return f(a.sin())


def broken_block(x):
    with disable("in block"):
        y = x + 1
        seen = HOOKS._saved_tensors_hooks_get_disabled_error_message()
        kiln.graph_break()
        seen2 = HOOKS._saved_tensors_hooks_get_disabled_error_message()
        y = y * 2
    return y, seen, seen2, HOOKS._saved_tensors_hooks_get_disabled_error_message()


def test_switches_follow_the_eager_order():
    backend = CountingBackend()
    run_and_compare(nested, torch.randn(3), backend=backend, fullgraph=True, expected_graphs=1)
    assert _switches(backend.graphs[0]) == ["outer", "inner", "outer", None]
    assert HOOKS._saved_tensors_hooks_get_disabled_error_message() is None


def test_exit_restores_a_message_disabled_before_the_frame():
    backend = CountingBackend()
    with disable("before"):
        run_and_compare(nested, torch.randn(3), backend=backend, fullgraph=True)
        assert HOOKS._saved_tensors_hooks_get_disabled_error_message() == "before"
    assert _switches(backend.graphs[0])[-1] == "before"
    # the message in force before the frame is guarded: without it the frame recompiles
    f = kiln.compile(nested, backend=backend)
    n = len(backend.graphs)
    f(torch.randn(3))
    assert len(backend.graphs) == n + 1 and _switches(backend.graphs[-1])[-1] is None


def test_break_inside_the_block_leaves_and_reenters_it():
    backend = CountingBackend()
    got = kiln.compile(broken_block, backend=backend)(torch.ones(2))
    expected = broken_block(torch.ones(2))
    assert torch.equal(got[0], expected[0]) and got[1:] == expected[1:]
    assert got[1:] == ("in block", "in block", None)
    # each read of the message is a break, run by Python inside the re-entered block
    assert len(backend.graphs) >= 2
    assert all(
        _switches(gm)[0] == "in block" and _switches(gm)[-1] is None for gm in backend.graphs
    )


def test_hooks_registered_after_the_break_raise_as_eagerly():
    def fn(x):
        with disable("no hooks"):
            y = x.cos()
            kiln.graph_break()
            with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                return y + 1

    with pytest.raises(RuntimeError, match="no hooks"):
        fn(torch.ones(2))
    with pytest.raises(RuntimeError, match="no hooks"):
        kiln.compile(fn)(torch.ones(2))
    assert HOOKS._saved_tensors_hooks_get_disabled_error_message() is None


def test_kiln_backend_runs_the_switches():
    z = torch.randn(3, requires_grad=True)
    run_and_compare(nested, z, backend="kiln", fullgraph=True, expected_graphs=1)


class EnterBreaks:
    """A manager whose __enter__ makes a call kiln does not trace."""

    def __init__(self, log):
        self.log = log

    def __enter__(self):
        self.log.append(("enter", os.getpid() > 0))  # a call kiln does not trace

    def __exit__(self, *exc):
        self.log.append("exit")


@kiln.disable
def made_in_python(log):
    return EnterBreaks(log)


def user_manager_after_a_break(x, log):
    with disable("no hooks"):
        y = x * 2
        with made_in_python(log):  # a break at the call: the resume starts at the with
            y = y + 1
    return y, HOOKS._saved_tensors_hooks_get_disabled_error_message()


def test_with_statement_at_the_start_of_a_resume_function_runs_once():
    # the resume function starts at the inner with statement with nothing before it but the
    # re-entered block's switches; a break there cannot be placed at it again (it would resume
    # in itself forever): that resume function runs in Python
    x = torch.randn(3, requires_grad=True)
    log, expected = [], None
    expected = user_manager_after_a_break(x, log)
    got_log = []
    got = kiln.compile(user_manager_after_a_break)(x, got_log)
    assert torch.equal(got[0], expected[0]) and got[1] == expected[1]
    assert got_log == log == [("enter", True), "exit"]
    assert got[1] is None


def enters_a_given_manager(x, cm):
    with cm:
        return x + 1


def test_a_manager_passed_in_is_consumed_as_eagerly():
    # entering a contextmanager object consumes it: a second `with` over it raises
    for f in (enters_a_given_manager, kiln.compile(enters_a_given_manager)):
        cm = disable("given")
        assert torch.equal(f(torch.ones(1), cm), torch.full((1,), 2.0))
        with pytest.raises((RuntimeError, AttributeError)):
            with cm:
                pass


def decorated_then_called(x):
    @disable("from the call")
    def f(y):
        return y + 1, HOOKS._saved_tensors_hooks_get_disabled_error_message()

    before = HOOKS._saved_tensors_hooks_get_disabled_error_message()
    out, inside = f(x * 2)
    return out, before, inside


def decorated_then_called_pure(x):
    @disable("from the call")
    def f(y):
        return y + 1

    z = x * 2
    return f(z)


def test_decorating_switches_nothing_until_the_call():
    # eager disables the hooks while the decorated function runs, not when it is decorated
    # (torch.compile's graph switches at the decoration, before the ops that precede the call)
    got = kiln.compile(decorated_then_called)(torch.ones(2))
    expected = decorated_then_called(torch.ones(2))
    assert torch.equal(got[0], expected[0]) and got[1:] == expected[1:] == (None, "from the call")
    backend = CountingBackend()
    run_and_compare(decorated_then_called_pure, torch.ones(2), backend=backend, fullgraph=True)
    ops = [n for n in backend.graphs[0].graph.nodes if n.op == "call_function"]
    kinds = ["switch" if _switches_node(n) else "op" for n in ops]
    assert kinds == ["op", "switch", "op", "switch"], ops
    assert _switches(backend.graphs[0]) == ["from the call", None]


def _switches_node(n):
    return n.target in (HOOKS._saved_tensors_hooks_disable, HOOKS._saved_tensors_hooks_enable)
