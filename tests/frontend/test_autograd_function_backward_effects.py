"""Effects in an autograd.Function's backward under fullgraph: with the eager backend the apply
node calls the real Function, so the backward runs in Python at each backward pass, its stores,
prints and calls as eager's; the ATen-tracing backends (which would run it once, at compile time)
refuse it. Outputs, gradients and every effect are compared with eager."""

import contextlib
import io

import pytest
import torch

import kiln


class State:
    def __init__(self):
        self.flag = False
        self.options = {"mode": "fast"}
        self._value = 0
        self.sets = 0
        self.calls = 0

    @property
    def value(self):
        return self._value

    @value.setter
    def value(self, v):
        self.sets += 1
        self._value = v

    def snapshot(self):
        return dict(vars(self), options=dict(self.options))


def make_function(kind, state):
    class Effects(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a * b + a

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            if kind == "attr":
                state.flag = True
            elif kind == "dict_attr":
                state.options = {"mode": "slow"}
            elif kind == "property":
                old = state.value
                state.value = old + 1
                state.value = old
            elif kind == "print":
                print("in backward", a.shape[0])
            state.calls += 1
            return g * (b + 1), g * a

    return Effects


def run(kind, compiled, x):
    state = State()
    fn_cls = make_function(kind, state)

    def fn(x):
        return fn_cls.apply(x, x.cos()).sum()

    if compiled:
        fn = kiln.compile(fn, backend="eager", fullgraph=True)
    out = io.StringIO()
    x = x.detach().clone().requires_grad_(True)
    with contextlib.redirect_stdout(out):
        for _ in range(2):
            res = fn(x)
            res.backward()
    return res.detach(), x.grad, out.getvalue(), state.snapshot()


@pytest.mark.parametrize("kind", ["attr", "dict_attr", "property", "print"])
def test_backward_effects_under_fullgraph_eager_backend(kind):
    x = torch.randn(5)
    ref = run(kind, False, x)
    got = run(kind, True, x)
    torch.testing.assert_close(got[0], ref[0])
    torch.testing.assert_close(got[1], ref[1])
    assert got[2:] == ref[2:]
    assert got[3]["calls"] == 2


@pytest.mark.parametrize("backend", ["aot_eager", "kiln"])
def test_backward_effects_refused_by_tracing_backends(backend):
    state = State()
    fn_cls = make_function("attr", state)
    with pytest.raises(kiln.exc.Unsupported, match="side effects outside ctx"):
        kiln.compile(lambda x: fn_cls.apply(x, x), backend=backend, fullgraph=True)(
            torch.randn(3, requires_grad=True)
        )
    assert not state.flag


class Product(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b + a + b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return g * (b + 1), g * (a + 1)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
def test_same_tensor_twice_accumulates_both_gradients(backend):
    def fn(x):
        return Product.apply(x, x).sum()

    x = torch.tensor([0.7, -1.3, 2.1, 0.05, -0.5])
    x_ref, x_test = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    ref = fn(x_ref)
    ref.backward()
    res = kiln.compile(fn, backend=backend, fullgraph=True)(x_test)
    res.backward()
    torch.testing.assert_close(res, ref)
    torch.testing.assert_close(x_test.grad, x_ref.grad)
