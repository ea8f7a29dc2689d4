"""User context managers whose __enter__/__exit__ switch grad mode with `torch._C._set_grad_enabled`,
traced into one graph (Note [Ctx: a bare _set_grad_enabled is recorded])."""

import contextlib
import io

import pytest
import torch
from frontend_helpers import CountingBackend, run_and_compare

import kiln


class GradSwitch:
    def __init__(self, mode):
        self.prev = torch.is_grad_enabled()
        self.mode = mode

    def __enter__(self):
        torch._C._set_grad_enabled(self.mode)

    def __exit__(self, *exc):
        torch._C._set_grad_enabled(self.prev)


@contextlib.contextmanager
def grad_switch(mode):
    prev = torch.is_grad_enabled()
    try:
        yield torch._C._set_grad_enabled(mode)
    finally:
        torch._C._set_grad_enabled(prev)


def switched(x, ctx):
    with ctx(True):
        x = x + 1
        if torch.is_grad_enabled():
            x = x * 2
        with ctx(False):
            x = x * 1.5 if torch.is_grad_enabled() else x - 3
        x = torch.relu(x)
    return x - 1, torch.is_grad_enabled()


def _switches(gm):
    return [n.args[0] for n in gm.graph.nodes if n.target is torch._C._set_grad_enabled]


def test_bare_switches_are_recorded_even_when_the_mode_is_unchanged():
    for ctx in (GradSwitch, grad_switch):
        x = torch.rand(2, 3, requires_grad=True)
        backend = CountingBackend()
        run_and_compare(switched, x, ctx, backend=backend, fullgraph=True, expected_graphs=1)
        # grad mode on already: the enter and exit of the outer manager still switch (to True)
        assert _switches(backend.graphs[0]) == [True, False, True, True]
        with torch.no_grad():
            backend = CountingBackend()
            run_and_compare(switched, x, ctx, backend=backend, fullgraph=True, expected_graphs=1)
            assert _switches(backend.graphs[0]) == [True, False, True, False]


def no_grad_inside_no_grad(x):
    with torch.no_grad():
        with torch.no_grad():
            y = x * 2
    return y + x


def test_grad_mode_managers_still_coalesce():
    backend = CountingBackend()
    run_and_compare(no_grad_inside_no_grad, torch.rand(3, requires_grad=True), backend=backend)
    assert _switches(backend.graphs[0]) == [False, True]


def redirected(t, buf):
    y = t.sin()
    with contextlib.redirect_stdout(buf):
        y = y + t.cos()
        print("inside", end="")
    return y.tan()


def redirected_tensors_only(t):
    y = t.sin()
    with contextlib.redirect_stderr(io.StringIO()):
        y = y + t.cos()
    return y.tan()


def test_redirect_stdout_breaks_at_the_with_statement():
    # its __enter__ swaps sys.stdout: Python runs the with statement, the rest is compiled
    for _ in range(2):
        buf = io.StringIO()
        t = torch.randn(3)
        expected = redirected(t, buf)
        assert buf.getvalue() == "inside"
        buf = io.StringIO()
        got = kiln.compile(redirected)(t, buf)
        assert torch.allclose(got, expected) and buf.getvalue() == "inside"
    kiln.reset()
    run_and_compare(redirected_tensors_only, torch.randn(3), expected_graphs=3)


def decorated_inside(z):
    @torch.autograd.graph.disable_saved_tensors_hooks("not here")
    def f(x, y):
        return x * y

    return f(z, z.cos()) + 1


def block_with_a_break(x):
    with torch.autograd.graph.disable_saved_tensors_hooks("not here"):
        y = x.sin()
        kiln.graph_break()
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            return y * 2  # eagerly: registering hooks inside the block raises


def test_disable_saved_tensors_hooks_traced_without_a_break():
    # Note [Ctx: disable_saved_tensors_hooks]
    z = torch.randn(3, requires_grad=True)
    run_and_compare(decorated_inside, z, fullgraph=True, expected_graphs=1)


def test_disable_saved_tensors_hooks_raises_as_eagerly():
    z = torch.randn(3, requires_grad=True)
    f = kiln.compile(decorated_inside)
    f(z)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        with pytest.raises(RuntimeError, match="not here"):
            decorated_inside(z)
        with pytest.raises(RuntimeError, match="not here"):
            f(z)  # the guard fails; the with statement runs in Python and raises
    with pytest.raises(RuntimeError, match="not here"):
        block_with_a_break(z)
    with pytest.raises(RuntimeError, match="not here"):
        kiln.compile(block_with_a_break)(z)
