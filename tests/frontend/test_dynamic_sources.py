"""config.dynamic_sources: inputs named there are symbolic from their first compile (Note [Shapes:
dynamic sources]); eager is the oracle, compile counts are the behaviour."""

import pytest
import torch
from frontend_helpers import CountingBackend, assert_same

import kiln
from kiln.frontend import frame_shapes


@pytest.fixture(autouse=True)
def _reset():
    kiln.reset()
    yield
    kiln.reset()


def _run_each(fn, compiled, calls):
    """Each call's compiled result against eager's."""
    for args in calls:
        assert_same(fn(*args), compiled(*args))


def test_tensor_source_is_dynamic_from_the_first_compile(monkeypatch):
    monkeypatch.setattr(kiln.config, "dynamic_sources", "x")
    backend = CountingBackend()

    def fn(x, y):
        return x * 2 + y.sum()

    compiled = kiln.compile(fn, backend=backend, fullgraph=True)
    calls = [(torch.randn(n, n + 1), torch.ones(4)) for n in (2, 3, 4)]  # every dim of x
    _run_each(fn, compiled, calls)
    assert backend.calls == 1
    _run_each(fn, compiled, [(torch.randn(2, 3), torch.ones(5))])  # y is not named: static
    assert backend.calls == 2


def test_int_source_is_an_int_symbol_even_under_dynamic_false(monkeypatch):
    monkeypatch.setattr(kiln.config, "dynamic_sources", "n, x")
    backend = CountingBackend()

    def fn(n, x):
        return x * n + n

    compiled = kiln.compile(fn, backend=backend, dynamic=False)
    _run_each(fn, compiled, [(n, torch.randn(n + 3)) for n in (-1, 0, 1, 5)])  # (sizes >= 2)
    assert backend.calls == 1


def test_regex_sources(monkeypatch):
    monkeypatch.setattr(kiln.config, "dynamic_sources", "x.*")
    backend = CountingBackend()

    def fn(x1, x2, other):
        return x1 * x2 + other

    compiled = kiln.compile(fn, backend=backend)
    _run_each(fn, compiled, [(n, torch.randn(n), torch.ones(1)) for n in (2, 3, 4)])
    assert backend.calls == 1


def test_module_int_attribute_and_parameters(monkeypatch):
    """A module's int attribute and a Linear's parameters named: instances of other widths share
    the entry (module ints are constants otherwise)."""
    names = [
        "m._modules['lin'].n",
        "m._modules['lin']._parameters['weight']",
        "m._modules['lin']._parameters['bias']",
        "x",
    ]
    monkeypatch.setattr(kiln.config, "dynamic_sources", ",".join(names))
    backend = CountingBackend()

    class M(torch.nn.Module):
        def __init__(self, n):
            super().__init__()
            self.lin = torch.nn.Linear(n, 3)
            self.lin.n = n

        def forward(self, x):
            return self.lin(x) * self.lin.n

    def fn(m, x):
        return m(x)

    compiled = kiln.compile(fn, backend=backend)
    for n in (5, 6, 7):
        m = M(n)
        x = torch.randn(2, n)
        assert_same(fn(m, x), compiled(m, x))
    assert backend.calls == 1


def test_patterns():
    kiln.config.dynamic_sources = ""
    assert not frame_shapes.is_dynamic_source("x")
    try:
        kiln.config.dynamic_sources = " x , self._modules['m'].w ,y[0"
        assert frame_shapes.is_dynamic_source("x")
        assert not frame_shapes.is_dynamic_source("xy")  # a regex matches the whole name
        assert frame_shapes.is_dynamic_source("self._modules['m'].w")
        assert frame_shapes.is_dynamic_source("y[0")  # no regex: the name itself
    finally:
        kiln.config.dynamic_sources = ""
