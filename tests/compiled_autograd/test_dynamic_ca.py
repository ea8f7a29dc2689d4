"""Compiled autograd with kiln.compile as its compiler: changed shapes compile at most twice (the
size-generic graph reads `sizes` as symbolic ints in kiln's frontend, issue #6 and #8)."""

import copy

import pytest
import torch
from ca_helpers import ca_counters, clean

import kiln
import kiln.compiled_autograd as ca
from kiln import config


@pytest.fixture(autouse=True)
def _reset():
    kiln.reset()
    yield
    kiln.reset()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_seed_shapes_10_100_10_compile_twice(backend):
    compiler = kiln.compile(backend=backend, fullgraph=True)
    with clean("compiled_autograd_verbose") as log:
        for i in [10, 100, 10, 37]:
            x = torch.randn(i, i, requires_grad=True)
            loss = x.sum()
            with ca.enable(compiler):
                loss.backward()
            torch.testing.assert_close(x.grad, torch.ones(i, i))
        counters = ca_counters()
        frames = dict(kiln.counters["frames"])
    text = log.getvalue()
    assert "Cache miss due to changed shapes: marking size idx 0 of" in text
    assert counters["compiles"] == 2 and counters["calls"] == 4
    # kiln's frontend: one graph for size 10, one symbolic graph for 100, 10 and 37
    assert frames["total"] == 2 and frames["ok"] == 2, frames
    assert kiln.counters["stats"]["recompiles"] == 0


def test_seed_shapes_through_config_compile_twice():
    prev = config.compiled_autograd
    config.compiled_autograd = True
    try:
        with clean("compiled_autograd_verbose") as log:
            for i in [10, 100, 10]:
                x = torch.randn(i, i, requires_grad=True)
                loss = x.sum()
                kiln.compile(lambda: loss.backward(), backend="eager")()  # noqa: B023 (seed form)
                torch.testing.assert_close(x.grad, torch.ones(i, i))
            counters = ca_counters()
    finally:
        config.compiled_autograd = prev
    assert "Cache miss due to changed shapes" in log.getvalue()
    assert counters["compiles"] == 2


def test_symbolic_backward_graph_of_a_linear_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    ref = copy.deepcopy(model)
    compiler = kiln.compile(backend="eager", fullgraph=True)
    with clean():
        for b in [4, 9, 4, 23]:
            x = torch.randn(b, 8)
            model(x).pow(2).sum().backward()
            with ca.enable(compiler):
                ref(x).pow(2).sum().backward()  # `ref` under compiled autograd
        frames = dict(kiln.counters["frames"])
        counters = ca_counters()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(q.grad, p.grad)
    assert counters["compiles"] == 2
    assert frames["total"] <= 2, frames
