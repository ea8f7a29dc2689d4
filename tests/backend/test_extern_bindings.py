"""Externs called through torch's Python bindings (Note [Wrapper: ATen calls through torch's
Python bindings]): each binding runs its overload, and nothing of the wrapper reaches a tensor
subclass's __torch_function__."""

import pytest
import torch

import kiln
from kiln.backend.codegen.wrapper import BINDINGS, rt

aten = torch.ops.aten


def _cases():
    a, b, bias = torch.randn(5, 3), torch.randn(3, 4), torch.randn(4)
    ba, bb, bbias = torch.randn(2, 5, 3), torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    x, w, cb = torch.randn(1, 2, 6, 6), torch.randn(3, 2, 3, 3), torch.randn(3)
    q = torch.randn(1, 2, 4, 8)
    return {
        "aten.mm.out": ((a, b), {"out": torch.empty(5, 4)}),
        "aten.bmm.out": ((ba, bb), {"out": torch.empty(2, 5, 4)}),
        "aten.addmm.out": ((bias, a, b), {"beta": 0.5, "alpha": 2.0, "out": torch.empty(5, 4)}),
        "aten.baddbmm.out": ((bbias, ba, bb), {"alpha": 3.0, "out": torch.empty(2, 5, 4)}),
        "aten.linear.out": ((a, b.t(), bias), {"out": torch.empty(5, 4)}),
        "aten.convolution.default": ((x, w, cb, [1, 1], [1, 1], [1, 1], False, [0, 0], 1), {}),
        "aten.cumsum.default": ((a, 1), {"dtype": torch.float64}),
        "aten._scaled_dot_product_flash_attention_for_cpu.default": (
            (q, q, q),
            {"is_causal": True, "scale": 0.3},
        ),
    }


@pytest.mark.parametrize("qualname", sorted(BINDINGS))
def test_binding_exists(qualname):
    assert callable(rt.binding(qualname))


@pytest.mark.parametrize("qualname", sorted(_cases()))
def test_binding_runs_the_overload(qualname):
    args, kwargs = _cases()[qualname]
    expected = rt.resolve(qualname)(*args, **kwargs)
    if "out" in kwargs:
        kwargs = {**kwargs, "out": torch.empty_like(kwargs["out"])}
    actual = rt.binding(qualname)(*args, **kwargs)
    torch.testing.assert_close(actual, expected, rtol=0, atol=0)


SAW = []  # the calls of the wrapper NoMM saw (a failing wrapper call would fall back to eager)


class NoMM(torch.Tensor):
    """A subclass whose __torch_function__ refuses mm, which the user's code never calls."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.mm or func is torch._C._nn.linear or func is torch.addmm:
            SAW.append(func)
            raise RuntimeError(f"the subclass saw {func}")
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


def test_subclass_input_never_sees_the_wrapper():
    def f(x, w):
        return (x @ w).relu()

    x, w = torch.randn(4, 5).as_subclass(NoMM), torch.randn(5, 3)
    expected = f(x, w)
    compiled = kiln.compile(f, backend="kiln")
    for _ in range(2):
        torch.testing.assert_close(compiled(x, w), expected)
    assert SAW == []


def test_matmuls_as_functional_calls(monkeypatch):
    monkeypatch.setattr(kiln.config, "extern_out", False)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(5, 8, requires_grad=True)
    kiln.reset()
    compiled = kiln.compile(model, backend="kiln")
    out = compiled(x)
    out.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
    for p in [*model.parameters(), x]:
        p.grad = None
    expected = model(x)
    expected.sum().backward()
    torch.testing.assert_close(out, expected)
    for g, p in zip(grads, [*model.parameters(), x]):
        torch.testing.assert_close(g, p.grad)
