"""Lazy modules reached uninitialized by compiled code: initialized as their first eager call
does, then traced as ordinary modules (one graph)."""

import pytest
import torch
from torch.nn.modules.lazy import LazyModuleMixin

import kiln


class _Counting:
    def __init__(self):
        self.calls = 0

    def __call__(self, gm, example_inputs):
        self.calls += 1
        return gm.forward


class _LazyStack(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = torch.nn.LazyLinear(6)
        self.second = torch.nn.LazyLinear(2)

    def forward(self, x):
        return self.second(torch.relu(self.first(x)))


def test_lazy_linears_initialized_then_one_graph():
    kiln.reset()
    torch.manual_seed(0)
    eager = _LazyStack()
    torch.manual_seed(0)
    mod = _LazyStack()
    backend = _Counting()
    fn = kiln.compile(mod, backend=backend, fullgraph=True)
    x = torch.randn(4, 5)
    torch.manual_seed(1)
    got = fn(x)
    torch.manual_seed(1)
    want = eager(x)
    torch.testing.assert_close(got, want)  # the same weights: drawn as the first call draws
    assert type(mod.first) is torch.nn.Linear and mod.first.weight.shape == (6, 5)
    torch.testing.assert_close(fn(x * 2), eager(x * 2))
    assert backend.calls == 1


class _SumsItems(LazyModuleMixin, torch.nn.Module):
    def initialize_parameters(self, items, extra=None):
        with torch.no_grad():
            self.offset = torch.nn.Parameter(torch.full(items["a"][0].shape, 0.5))

    def forward(self, items, extra=None):
        total = self.offset
        for t in items["a"]:
            total = total + t
        return total if extra is None else total * extra


class _Holder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = _SumsItems()

    def forward(self, items, scale):
        return self.inner(items, extra=scale)


def test_user_lazy_module_with_container_arguments():
    kiln.reset()
    mod, eager = _Holder(), _Holder()
    items = {"a": [torch.randn(3, 2) for _ in range(3)]}
    fn = kiln.compile(mod, backend="eager", fullgraph=True)
    torch.testing.assert_close(fn(items, torch.tensor(2.0)), eager(items, torch.tensor(2.0)))
    assert not hasattr(mod.inner, "_initialize_hook")


def _draws_then_lazy(lazy, x):
    noise = torch.rand(x.shape)
    return lazy(x + noise)


def test_lazy_module_after_random_draws_breaks():
    kiln.reset()
    lazy = torch.nn.LazyLinear(3)
    with pytest.raises(kiln.exc.Unsupported, match="random draws"):
        kiln.compile(_draws_then_lazy, backend="eager", fullgraph=True)(lazy, torch.ones(2, 4))
    kiln.reset()
    torch.manual_seed(5)
    want = _draws_then_lazy(torch.nn.LazyLinear(3), torch.ones(2, 4))
    torch.manual_seed(5)
    got = kiln.compile(_draws_then_lazy, backend="eager")(torch.nn.LazyLinear(3), torch.ones(2, 4))
    torch.testing.assert_close(got, want)  # eager's order of draws: noise, then the weights
