"""config.symbol_guard_limit_before_specialize: a size symbol named by more guards than the limit
is specialised (Note [Shapes: a limit on guards per symbol]); results stay eager's."""

import torch

import kiln
from tests.frontend.frontend_helpers import assert_same


def _fn(x):
    n = x.size(0)
    torch._check(n != 3)
    torch._check(n != 4)
    if n > 5:
        x = x * 2
    torch._check(n != 6)
    return x + n


def _graphs_for(sizes):
    kiln.reset()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    compiled = kiln.compile(_fn, backend=backend, dynamic=True)
    for n in sizes:
        x = torch.arange(float(n))
        assert_same(_fn(x), compiled(x))
    return len(graphs)


def test_no_limit_keeps_one_graph():
    assert _graphs_for([12, 13, 14, 12]) == 1


def test_limit_specialises(monkeypatch):
    monkeypatch.setattr(kiln.config, "symbol_guard_limit_before_specialize", 2)
    assert _graphs_for([12, 13, 14, 12]) == 3


def test_limit_not_reached(monkeypatch):
    monkeypatch.setattr(kiln.config, "symbol_guard_limit_before_specialize", 4)
    assert _graphs_for([12, 13, 14]) == 1
