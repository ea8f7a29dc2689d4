"""autograd.Function with a module argument (passed by its fields) and a plain object among the
outputs (made anew from the node's outputs): outputs and gradients equal eager's."""

import dataclasses

import pytest
import torch

import kiln


@dataclasses.dataclass
class Extras:
    doubled: torch.Tensor
    tag: str
    shifted: torch.Tensor


class Scaler(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.factor = 3
        self.offset = torch.randn(4)


class WithParam(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4))


class UsesModule(torch.autograd.Function):
    @staticmethod
    def forward(ctx, mod, x):
        ctx.factor = mod.factor if not mod.training else mod.factor + 1
        y = x * ctx.factor + mod.offset
        return y, Extras(doubled=y * 2, tag="made", shifted=y + mod.offset)

    @staticmethod
    def backward(ctx, g, extras):
        return None, g * ctx.factor


class ReadsParam(torch.autograd.Function):
    @staticmethod
    def forward(ctx, mod, x):
        return x * mod.w

    @staticmethod
    def backward(ctx, g):
        return None, g


MOD = Scaler()


def uses_module(x):
    y, extras = UsesModule.apply(MOD, x.sin())
    return y + extras.doubled.sum(), extras.tag, extras.shifted


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
@pytest.mark.parametrize("training", [True, False])
def test_module_argument_and_object_output(backend, training):
    MOD.train(training)
    x = torch.randn(4)
    x_ref, x_test = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    ref = uses_module(x_ref)
    res = kiln.compile(uses_module, backend=backend, fullgraph=True)(x_test)
    torch.testing.assert_close(res[0], ref[0])
    torch.testing.assert_close(res[2], ref[2])
    assert res[1] == ref[1]
    assert res[2].requires_grad == ref[2].requires_grad is False
    ref[0].sum().backward()
    res[0].sum().backward()
    torch.testing.assert_close(x_test.grad, x_ref.grad)


def test_module_attribute_change_is_seen():
    compiled = kiln.compile(uses_module, backend="eager", fullgraph=True)
    x = torch.randn(4)
    first = compiled(x)
    MOD.offset = torch.ones(4)
    torch.testing.assert_close(compiled(x)[0], uses_module(x)[0])
    assert not torch.equal(first[0], compiled(x)[0])


def test_module_with_parameters_breaks_and_matches_eager():
    mod = WithParam()

    def fn(x):
        return ReadsParam.apply(mod, x) + 1

    x = torch.randn(4, requires_grad=True)
    with pytest.raises(kiln.exc.Unsupported, match="argument"):
        kiln.compile(fn, backend="eager", fullgraph=True)(x)
    torch.testing.assert_close(kiln.compile(fn, backend="eager")(x), fn(x))


class SharesOutput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x * 2
        return y, Extras(doubled=y, tag="shared", shifted=y + 1)

    @staticmethod
    def backward(ctx, g, extras):
        return g * 2


def test_object_holding_an_output_breaks_and_keeps_identity():
    def fn(x):
        y, extras = SharesOutput.apply(x)
        return y, extras.doubled is y, extras.doubled.requires_grad

    x = torch.randn(3, requires_grad=True)
    with pytest.raises(kiln.exc.Unsupported, match="tensors expected"):
        kiln.compile(fn, backend="eager", fullgraph=True)(x)
    ref, res = fn(x), kiln.compile(fn, backend="eager")(x)
    torch.testing.assert_close(res[0], ref[0])
    assert res[1:] == ref[1:] == (True, True)
