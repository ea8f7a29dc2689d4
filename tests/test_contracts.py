"""The stage contracts (kiln/contracts.py): frozen, declared fields, defaults in one place."""

import dataclasses

import pytest
import torch

import kiln
from kiln.contracts import CompileSettings, GraphMeta, OutputLayouts, output_layouts


def _gm():
    return torch.fx.symbolic_trace(lambda x: x + 1)


def test_graph_meta_defaults_and_updates():
    gm = _gm()
    assert GraphMeta.of(gm) == GraphMeta()
    GraphMeta.update(gm, num_saved=3, inputs_guarded=True)
    meta = GraphMeta.of(gm)
    assert meta.num_saved == 3 and meta.inputs_guarded and meta.shape_env is None
    assert gm.meta["num_saved"] == 3  # stored where FX tools see it
    with pytest.raises(TypeError, match="no field"):
        GraphMeta.update(gm, numsaved=1)
    assert GraphMeta.of(object()) == GraphMeta()  # a compiled callable without metadata


def test_contracts_are_frozen():
    s = CompileSettings(backend=lambda gm, ex: gm.forward, backend_name="x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.fullgraph = True
    with pytest.raises(dataclasses.FrozenInstanceError):
        GraphMeta().num_saved = 1


def test_output_layouts_of_a_callable_that_reports_none():
    assert output_layouts(lambda *a: a) == OutputLayouts()


def test_one_compile_shares_its_settings():
    calls = []

    def backend(gm, example_inputs):
        calls.append(gm)
        return gm.forward

    def f(x):
        y = x * 2
        kiln.graph_break()
        return y + 1

    kiln.reset()
    compiled = kiln.compile(f, backend=backend, dynamic=False)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), f(x))
    cache = compiled._kiln_cache
    assert cache.settings == CompileSettings(backend, "backend", False, False)
    children = _caches(cache)  # the resume function after the break
    assert children and all(c.settings is cache.settings for c in children)
    assert len(calls) == 2


def _caches(cache):
    out = []
    for wrapper in cache.children.values():
        out.append(wrapper._kiln_cache)
    return out
