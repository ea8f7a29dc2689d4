"""Attribute stores in an autograd.Function's forward that the forward undoes before it returns
(Note [Autograd functions: stores undone before returning]): compiled under fullgraph on every
backend, with eager's outputs, gradients and state; a store left changed still breaks."""

import contextlib

import pytest
import torch

import kiln


class State:
    def __init__(self):
        self.flag = False
        self.depth = 0
        self.scale = 1.0


def make_function(kind, state):
    @contextlib.contextmanager
    def flag_on():
        old = state.flag
        state.flag = True
        try:
            yield
        finally:
            state.flag = old

    class Scaled(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            if kind == "context_manager":
                with flag_on():
                    y = x * 2 if state.flag else x
            elif kind == "counter":
                state.depth += 1
                y = x * state.depth * 3
                state.depth -= 1
            elif kind == "left_changed":
                state.depth += 1
                y = x * 3
            else:  # "float_restored": the same float object stored back
                old = state.scale
                state.scale = old * 4
                y = x * state.scale
                state.scale = old
            ctx.save_for_backward(x)
            return y

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 2 * x

    return Scaled


def run(kind, backend, fullgraph=True):
    state = State()
    fn_cls = make_function(kind, state)

    def fn(x):
        return fn_cls.apply(x).sum()

    if backend is not None:
        fn = kiln.compile(fn, backend=backend, fullgraph=fullgraph)
    x = torch.arange(3.0, requires_grad=True)
    outs = []
    for _ in range(2):
        out = fn(x)
        out.backward()
        outs.append(out.detach())
    return outs, x.grad, vars(state)


@pytest.mark.parametrize("kind", ["context_manager", "counter", "float_restored"])
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
def test_forward_stores_undone_compile_under_fullgraph(backend, kind):
    ref = run(kind, None)
    got = run(kind, backend)
    torch.testing.assert_close(got[0], ref[0])
    torch.testing.assert_close(got[1], ref[1])
    assert got[2] == ref[2]


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
def test_forward_store_left_changed_breaks(backend):
    with pytest.raises(kiln.exc.Unsupported, match="side effects outside ctx"):
        run("left_changed", backend)
    ref = run("left_changed", None)
    got = run("left_changed", backend, fullgraph=False)  # the apply runs in Python
    torch.testing.assert_close(got[0], ref[0])
    torch.testing.assert_close(got[1], ref[1])
    assert got[2] == ref[2]
