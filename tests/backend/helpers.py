"""Trace an eager function to ATen, compile it with kiln, compare with eager."""

import torch
from torch.utils import _pytree as pytree

from kiln.autograd.aten_tracer import trace_aten
from kiln.backend.compile_fx import CompiledGraph, compile_aten_graph
from kiln.backend.decompositions import DECOMPOSITIONS


def compile_fn(fn, inputs):
    gm = trace_aten(fn, inputs, decompositions=DECOMPOSITIONS)
    return compile_aten_graph(gm, inputs)


def check(fn, inputs, *, atol=None, rtol=None, allow_fallback=(), expect_kernels=None):
    """Compiled outputs equal eager's (NaN where eager has NaN); returns the CompiledGraph."""
    compiled = compile_fn(fn, inputs)
    assert isinstance(compiled, CompiledGraph), "graph fell back to eager"
    got = compiled(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
    want = fn(*inputs)
    want = pytree.tree_leaves(want)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, (k, g.shape, w.shape)
        assert g.dtype == w.dtype, (k, g.dtype, w.dtype)
        torch.testing.assert_close(
            g, w, atol=atol, rtol=rtol, equal_nan=True, msg=lambda m, k=k: f"output {k}: {m}"
        )
    unexpected = [str(op) for op in compiled.fallback_ops if str(op) not in allow_fallback]
    assert not unexpected, f"ops ran as ATen fallbacks: {unexpected}"
    if expect_kernels is not None:
        assert compiled.kernel_count == expect_kernels, compiled.cpp_src
    return compiled
