"""Effects in an autograd.Function's backward under fullgraph: with the eager backend the apply
node calls the real Function, so the backward runs in Python at each backward pass, its stores,
prints and calls as eager's; the ATen-tracing backends (which would run it once, at compile time)
refuse it, unless the backward undoes its stores before it returns. Outputs, gradients and every
effect are compared with eager."""

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
            elif kind == "copy_restored":  # an equal dict, but another object: not undone
                old = state.options
                state.options = {"mode": "slow"}
                state.options = dict(old)
            elif kind == "int_as_float":  # 0 back as 0.0: another type, not undone
                state._value += 1
                state._value -= 1.0
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


@pytest.mark.parametrize("kind", ["attr", "dict_attr", "property", "copy_restored", "int_as_float"])
@pytest.mark.parametrize("backend", ["aot_eager", "kiln"])
def test_backward_effects_refused_by_tracing_backends(backend, kind):
    state = State()
    before = state.snapshot()
    fn_cls = make_function(kind, state)
    with pytest.raises(kiln.exc.Unsupported, match="side effects outside ctx"):
        kiln.compile(lambda x: fn_cls.apply(x, x), backend=backend, fullgraph=True)(
            torch.randn(3, requires_grad=True)
        )
    assert state.snapshot() == before


class Undoing:
    def __init__(self):
        self.enabled = False
        self.options = {"mode": "fast", "level": 3}
        self.depth = 0
        self.mode = "default"


def make_undoing_function(kind, state):
    @contextlib.contextmanager
    def set_attr(name, value):
        old = getattr(state, name)
        setattr(state, name, value)
        try:
            yield
        finally:
            setattr(state, name, old)

    class Undo(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            if kind == "context_manager":
                with set_attr("enabled", True):
                    return grad.clone()
            if kind == "object_swapped_back":
                old = state.options
                state.options = {"mode": "slow", "level": 1}
                state.options = old
                return grad.clone()
            if kind == "counter":
                state.depth += 1
                out = grad * state.depth
                state.depth -= 1
                return out
            # "read_between": code between the stores sees the stored value
            with set_attr("mode", "special"):
                if state.mode == "special":
                    return grad * 2.0
                return grad

    return Undo


def run_undoing(kind, backend):
    state = Undoing()
    options = state.options
    fn_cls = make_undoing_function(kind, state)

    def fn(x):
        return fn_cls.apply(x).sum()

    if backend is not None:
        fn = kiln.compile(fn, backend=backend, fullgraph=True)
    x = torch.arange(4.0, requires_grad=True)
    for _ in range(2):
        out = fn(x)
        out.backward()
    return out.detach(), x.grad, vars(state), state.options is options


@pytest.mark.parametrize(
    "kind", ["context_manager", "object_swapped_back", "counter", "read_between"]
)
@pytest.mark.parametrize("backend", ["aot_eager", "kiln"])
def test_stores_the_backward_undoes_compile_on_tracing_backends(backend, kind):
    """Note [Autograd functions: stores undone before returning]: fullgraph, same grads and state."""
    ref = run_undoing(kind, None)
    got = run_undoing(kind, backend)
    torch.testing.assert_close(got[0], ref[0])
    torch.testing.assert_close(got[1], ref[1])
    assert got[2:] == ref[2:]


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
