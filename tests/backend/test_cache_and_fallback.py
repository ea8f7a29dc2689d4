"""Code cache (memory, disk, across processes) and the eager fallback on compiler failure."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from kiln import config, logs
from kiln.backend import codecache
from kiln.backend import compile_fx as compile_mod
from kiln.backend.compile_fx import CompiledGraph
from kiln.exc import BackendCompilerFailed
from tests.backend.helpers import compile_fn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_second_compile_hits_cache_without_gxx(monkeypatch):
    x = torch.randn(5, 7)
    fn = lambda x: (x.cos() * 3 + 0.25,)
    first = compile_fn(fn, [x])
    assert isinstance(first, CompiledGraph)
    codecache.clear_memory_cache()
    before = dict(logs.counters["backend"])
    monkeypatch.setattr(config, "cpp_compiler", config.cpp_compiler)

    def boom(*a, **k):
        raise AssertionError("g++ must not run on a warm cache")

    monkeypatch.setattr(subprocess, "run", boom)
    second = compile_fn(fn, [x])
    assert isinstance(second, CompiledGraph)
    assert logs.counters["backend"]["graph_disk_hits"] == before.get("graph_disk_hits", 0) + 1
    torch.testing.assert_close(second(x)[0], fn(x)[0])


def test_graph_cache_key_names_the_torch_install(monkeypatch):
    """Two environments sharing one cache directory never share a compiled graph."""
    x = torch.randn(5, 7)
    gm = torch.fx.symbolic_trace(lambda x: (x.cos(),))
    here = compile_mod._graph_key(gm, [x])
    assert compile_mod._graph_key(gm, [x]) == here
    monkeypatch.setattr(torch, "__file__", "/elsewhere/torch/__init__.py")
    assert compile_mod._graph_key(gm, [x]) != here


def test_second_process_compiles_nothing(tmp_path):
    script = textwrap.dedent(
        f"""
        import json, torch
        from kiln import config, logs
        config.cache_dir = {str(tmp_path)!r}
        from tests.backend.helpers import compile_fn
        x = torch.arange(12.0).view(3, 4)
        c = compile_fn(lambda x: (x.softmax(1) + x.sum(),), [x])
        ref = torch.softmax(x, 1) + x.sum()
        assert torch.allclose(c(x)[0], ref)
        print(json.dumps(dict(logs.counters["backend"])))
        """
    )
    runs = []
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300
        )
        assert out.returncode == 0, out.stderr
        import json

        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert runs[0].get("cpp_compiles") == 1
    assert runs[1].get("cpp_compiles", 0) == 0
    assert runs[1].get("graph_disk_hits") == 1


def test_missing_compiler_falls_back_with_warning(monkeypatch, tmp_path, capfd):
    monkeypatch.setattr(config, "cpp_compiler", "no-such-g++")
    monkeypatch.setattr(config, "cache_dir", str(tmp_path))
    monkeypatch.setattr(config, "strict", False)  # this test is about the fallback to eager
    x = torch.randn(4, 4)
    fn = lambda x: (x.exp() - 1,)
    compiled = compile_fn(fn, [x])
    assert getattr(compiled, "kiln_fallback", False)
    assert "no-such-g++" in capfd.readouterr().err
    torch.testing.assert_close(compiled(x)[0], fn(x)[0])


def test_missing_compiler_raises_when_asked(monkeypatch, tmp_path):
    monkeypatch.setattr(config, "cpp_compiler", "no-such-g++")
    monkeypatch.setattr(config, "cache_dir", str(tmp_path))
    monkeypatch.setattr(config, "strict", True)
    with pytest.raises(BackendCompilerFailed, match="no-such-g"):
        compile_fn(lambda x: (x + 1,), [torch.randn(3)])


def test_output_code_log_prints_kernels_and_wrapper(monkeypatch, tmp_path, capfd):
    monkeypatch.setattr(config, "cache_dir", str(tmp_path))
    logs.set_logs("output_code")
    try:
        compile_fn(lambda x: (x.tanh() * 2,), [torch.randn(6)])
    finally:
        logs.set_logs("")
    err = capfd.readouterr().err
    assert 'extern "C" int kernel0' in err
    assert "def call(" in err


def test_graph_cache_key_names_grad_mode_and_conv_layout(monkeypatch):
    """Inference graphs choose channels-last convolutions: a graph lowered otherwise is not reused."""
    x = torch.randn(5, 7)
    gm = torch.fx.symbolic_trace(lambda x: (x.cos(),))
    here = compile_mod._graph_key(gm, [x])
    with torch.no_grad():
        assert compile_mod._graph_key(gm, [x]) != here
    monkeypatch.setattr(config, "conv_channels_last", not config.conv_channels_last)
    assert compile_mod._graph_key(gm, [x]) != here


def slices_at(x, n):
    return x[:n] * 2, x[n:] + 1


@pytest.mark.parametrize("order", [(2, 100, 3), (2, 3, 100)])
def test_entries_with_opposite_shape_facts_do_not_share_compiled_code(order):
    """The second symbolic entry (n <= 6 after n > 6, or the reverse) traces the same graph over
    the same symbol: the cache key holds the facts, so each gets its own code."""
    import kiln

    kiln.reset()
    compiled = kiln.compile(slices_at)
    x = torch.randn(6, 3)
    for n in order:
        for got, want in zip(compiled(x, n), slices_at(x, n), strict=True):
            torch.testing.assert_close(got, want)
