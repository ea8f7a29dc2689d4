"""A hook function read from a closure cell, a global or an attribute right where it is registered
is read there at run time (Note [Hooks: read from their source at run time]): rebinding the name
runs the new hook at the next call, without a recompile, on tensors made in the frame and on
inputs, with and without compiled autograd. Eager is the oracle. A hook that kiln traces into the
graph (read through a local, or also called in the frame) stays guarded by identity."""

import functools
import types

import pytest
import torch

import kiln
import kiln.compiled_autograd
from kiln import config


def double(g):
    return g * 2


def shift(g, k=1.5):
    return g + k


def negate(g):
    return -g


REBINDS = (double, shift, negate, lambda g: g * g)

GLOBAL_HOOK = double


class Holder:
    def __init__(self, hook):
        self.hook = hook


HOLDER = Holder(double)
HOOKMOD = types.ModuleType("kiln_test_hookmod")  # a Python module's attribute
HOOKMOD.hook = double


def _target(x, where):
    return x * 3 if where == "made" else x


def _program(source, where):
    """(fn, rebind): fn(x) registers the hook read from `source` on a tensor made in the frame
    or on the input x, and returns a loss; rebind(h) points that source at h."""
    if source == "cell":
        hook = double

        def fn(x):
            t = _target(x, where)
            t.register_hook(hook)
            return (t * x.sin()).sum()

        def rebind(h):
            nonlocal hook
            hook = h

        return fn, rebind
    if source == "global":

        def fn(x):
            t = _target(x, where)
            t.register_hook(GLOBAL_HOOK)
            return (t * x.sin()).sum()

        return fn, lambda h: globals().__setitem__("GLOBAL_HOOK", h)
    if source == "object":

        def fn(x):
            t = _target(x, where)
            t.register_hook(HOLDER.hook)
            return (t * x.sin()).sum()

        return fn, lambda h: setattr(HOLDER, "hook", h)
    if source == "pymodule":

        def fn(x):
            t = _target(x, where)
            t.register_hook(HOOKMOD.hook)
            return (t * x.sin()).sum()

        return fn, lambda h: setattr(HOOKMOD, "hook", h)

    class Mod(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.hook = double

        def forward(self, x):
            t = _target(x, where)
            t.register_hook(self.hook)
            return (t * x.sin()).sum()

    mod = Mod()
    return mod, lambda h: setattr(mod, "hook", h)


def _grad(step, x0):
    x = x0.clone().requires_grad_()
    loss = step(x)
    return loss.detach(), x.grad


def _steps(fn, mode, backend="aot_eager"):
    """(eager step, compiled step): each returns the loss after its backward ran."""

    def eager(x):
        loss = fn(x)
        loss.backward()
        return loss

    if mode == "config":  # config.compiled_autograd: the backward inside the compiled frame
        return eager, kiln.compile(eager, backend=backend)
    compiled_fn = kiln.compile(fn, backend=backend, fullgraph=True)

    def compiled(x):
        loss = compiled_fn(x)
        if mode == "enable":
            ca_compiler = functools.partial(kiln.compile, backend="aot_eager")
            with kiln.compiled_autograd.enable(ca_compiler):
                loss.backward()
        else:
            loss.backward()
        return loss

    return eager, compiled


@pytest.fixture(autouse=True)
def fresh():
    kiln.reset()
    prev = (GLOBAL_HOOK, HOLDER.hook, HOOKMOD.hook, config.compiled_autograd)
    yield
    globals()["GLOBAL_HOOK"], HOLDER.hook, HOOKMOD.hook, config.compiled_autograd = prev


def _check_rebinding(source, where, mode, backend="aot_eager"):
    fn, rebind = _program(source, where)
    eager, compiled = _steps(fn, mode, backend)
    config.compiled_autograd = mode == "config"
    x0 = torch.randn(5)
    for hook in REBINDS:
        rebind(hook)
        want = _grad(eager, x0)
        got = _grad(compiled, x0)
        torch.testing.assert_close(got, want)
    assert kiln.counters["stats"].get("recompiles", 0) == 0
    ca = kiln.counters["compiled_autograd"]
    if mode != "off":  # every compiled backward ran under compiled autograd
        assert ca["calls"] == len(REBINDS) and ca.get("fallbacks", 0) == 0, dict(ca)


@pytest.mark.parametrize("mode", ["off", "enable", "config"])
@pytest.mark.parametrize("where", ["made", "input"])
@pytest.mark.parametrize("source", ["cell", "global", "object", "pymodule", "module"])
def test_rebound_hook_runs_without_recompile(source, where, mode):
    _check_rebinding(source, where, mode)


@pytest.mark.parametrize("backend", ["eager", "kiln"])
def test_rebound_hook_other_backends(backend):
    _check_rebinding("cell", "made", "off", backend)


def _inner_hook_fn(x, k):
    y = x.exp()
    y.register_hook(lambda g: g * k)

    def scale(g):
        return g - 1.0

    y.register_hook(scale)
    return (y * y).sum()


@pytest.mark.parametrize("mode", ["off", "enable", "config"])
def test_hooks_defined_in_the_frame(mode):
    config.compiled_autograd = mode == "config"
    eager, compiled = _steps(lambda x: _inner_hook_fn(x, 0.5), mode)
    x0 = torch.randn(4)
    torch.testing.assert_close(_grad(compiled, x0), _grad(eager, x0))


def test_hook_also_called_in_the_frame_stays_guarded():
    hook = double

    def fn(x):
        y = x * 3
        y.register_hook(hook)  # read at run time ...
        return hook(y).sum()  # ... but traced here: its identity is guarded

    eager, compiled = _steps(fn, "off")
    x0 = torch.randn(4)
    for h in (double, negate):
        hook = h
        torch.testing.assert_close(_grad(compiled, x0), _grad(eager, x0))
    assert kiln.counters["stats"]["recompiles"] == 1


def test_hook_through_a_local_is_traced_and_guarded():
    hook = double

    def fn(x):
        y = x * 3
        h = hook  # read into a local first: traced into the graph, guarded by identity
        y.register_hook(h)
        return (y * y).sum()

    eager, compiled = _steps(fn, "off")
    x0 = torch.randn(4)
    for h in (double, negate):
        hook = h
        torch.testing.assert_close(_grad(compiled, x0), _grad(eager, x0))
    assert kiln.counters["stats"]["recompiles"] == 1


def test_rebinding_in_the_frame_after_the_registration():
    def fn(x):
        global GLOBAL_HOOK
        y = x * 3
        y.register_hook(GLOBAL_HOOK)  # the hook bound now, not the one stored below
        GLOBAL_HOOK = negate
        return (y * y).sum()

    eager, compiled = _steps(fn, "off")
    x0 = torch.randn(4)
    globals()["GLOBAL_HOOK"] = double
    want = _grad(eager, x0)
    assert GLOBAL_HOOK is negate
    globals()["GLOBAL_HOOK"] = double
    got = _grad(compiled, x0)
    assert GLOBAL_HOOK is negate
    torch.testing.assert_close(got, want)
