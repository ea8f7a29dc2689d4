"""Factories whose sizes are read from tensor data (`.item()` under config.capture_scalar_outputs)
kept in one graph: each compared with eager on several values."""

import pytest
import torch
from frontend_helpers import assert_same

import kiln


@pytest.fixture
def capture(monkeypatch):
    monkeypatch.setattr(kiln.config, "capture_scalar_outputs", True)


def _compile_counted(fn, **kw):
    kiln.reset()
    graphs = []

    def count(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    return kiln.compile(fn, backend=count, fullgraph=True, **kw), graphs


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_float_arange_of_an_item(capture, dtype):
    def f(x):
        y = x.item()
        r = torch.arange(y, dtype=dtype)
        if r.size(0) == y:
            return r + 1
        return r

    def g(x):
        return torch.arange(3, x.item(), dtype=dtype) * 2

    for fn in (f, g):
        compiled, graphs = _compile_counted(fn)
        for n in (300, 5, 3, 1 << 25):
            x = torch.tensor([n])
            assert_same(fn(x), compiled(x))
        assert len(graphs) == 1


def test_half_arange_of_an_item_breaks(capture):
    def f(x):
        return torch.arange(x.item(), dtype=torch.float16)

    kiln.reset()
    with pytest.raises(kiln.exc.Unsupported):
        kiln.compile(f, backend="eager", fullgraph=True)(torch.tensor([70000]))
    x = torch.tensor([70000])
    assert_same(f(x), kiln.compile(f, backend="eager")(x))
