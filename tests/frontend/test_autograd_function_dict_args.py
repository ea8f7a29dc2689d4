"""A plain dict of literals passed to `MyFn.apply` is a constant of the call (Note [Autograd
functions: a dict of constants as an argument]): captured with eager's outputs and gradients; a
forward that changes the dict is a graph break, and eager's change is seen."""

import pytest
import torch

import kiln


class Scaled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, config):
        ctx.scale = config["scale"] * (2 if config["double"] else 1)
        return x * ctx.scale

    @staticmethod
    def backward(ctx, g):
        return g * ctx.scale, None


class Counts(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, config):
        config["calls"] = config.get("calls", 0) + 1
        return x * 3

    @staticmethod
    def backward(ctx, g):
        return g * 3, None


def _grad(fn, x, *args):
    x = x.detach().clone().requires_grad_(True)
    out = fn(x, *args)
    out.sum().backward()
    return out, x.grad


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
def test_dict_built_in_the_frame_is_one_graph(backend):
    def fn(x):
        return Scaled.apply(x.sin(), {"scale": 1.5, "double": True}) + 1

    x = torch.randn(4)
    ref = _grad(fn, x)
    got = _grad(kiln.compile(fn, backend=backend, fullgraph=True), x)  # (one graph, or raises)
    for a, b in zip(ref, got):
        torch.testing.assert_close(a, b)


def test_dict_from_the_caller_is_guarded():  # (each value read is a constant of the entry)
    def fn(x, config):
        return Scaled.apply(x, config)

    compiled = kiln.compile(fn, backend="eager")
    x = torch.randn(3)
    for scale in (2.0, 2.0, 5.0):
        config = {"scale": scale, "double": False}
        torch.testing.assert_close(compiled(x, config), x * scale)


def test_forward_changing_the_dict_breaks_and_the_change_is_seen():
    def fn(x, config):
        return Counts.apply(x, config) + 1

    x = torch.randn(3)
    eager_config, compiled_config = {"calls": 0}, {"calls": 0}
    ref = _grad(fn, x, eager_config)
    got = _grad(kiln.compile(fn, backend="eager"), x, compiled_config)
    for a, b in zip(ref, got):
        torch.testing.assert_close(a, b)
    assert compiled_config == eager_config == {"calls": 1}
    assert any("changes a dict argument" in r for r in kiln.counters["graph_break"])
