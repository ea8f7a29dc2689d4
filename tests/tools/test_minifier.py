"""The minifier: repro.py written on a failing compile, shrunk to the smallest failing graph."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import kiln
from kiln import config
from kiln.autograd.aten_tracer import trace_aten
from kiln.backend import codecache
from kiln.backend.lowering import LOWERINGS
from kiln.tools import repro as R
from kiln.tools.minifier import minify

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
aten = torch.ops.aten


def _sixty(x, y):
    """60 ATen nodes; the 38th is the only atan."""
    for i in range(20):
        x = x.atan() if i == 12 else x.sin()
        x = x * 1.1
        x = x + y
    return x


def _count(gm):
    return sum(1 for n in gm.graph.nodes if n.op not in ("placeholder", "output"))


def _break_atan(monkeypatch):
    """The code generator made to fail on atan: its C++ calls a function that does not exist."""
    from kiln.backend.codegen import cpp_ops, vecmath

    monkeypatch.setitem(cpp_ops.FLOAT_UNARY, "atan", "kiln_injected_no_such_atan({0})")
    for table in (vecmath.SLEEF_F32, vecmath.SLEEF_F64):
        if "atan" in table:
            monkeypatch.delitem(table, "atan")


@pytest.fixture
def tmp_config(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))
    monkeypatch.setattr(config, "repro_dir", str(tmp_path))
    codecache.clear_memory_cache()  # compiled graphs of other tests (their key has no lowering)
    kiln.reset()
    yield tmp_path
    codecache.clear_memory_cache()
    kiln.reset()


def test_failing_lowering_writes_repro_and_minifies_to_one_node(tmp_config, monkeypatch, capsys):
    _break_atan(monkeypatch)
    monkeypatch.setattr(config, "repro_after", "aot")
    monkeypatch.setattr(config, "strict", False)  # this test is about the fallback to eager
    x, y = torch.randn(16), torch.randn(16)
    out = kiln.compile(_sixty)(x, y)  # falls back to eager with a warning, writes repro.py
    torch.testing.assert_close(out, _sixty(x, y))
    path = tmp_config / "repro.py"
    assert path.exists(), capsys.readouterr().err
    assert "python -m kiln minify" in capsys.readouterr().err
    repro = R.load_script(str(path))
    assert _count(repro.graph_module()) == 60
    assert "BackendCompilerFailed" in R.check(
        repro.graph_module(), repro.make_inputs(), repro.level, repro.settings
    )
    out_path, gm = minify(str(path), log=lambda m: None)
    assert _count(gm) <= 3
    assert any(n.target is aten.atan.default for n in gm.graph.nodes)
    small = R.load_script(out_path)  # the saved result is itself a repro that fails
    assert R.check(small.graph_module(), small.make_inputs(), small.level, small.settings)


def _wrong_cos(x):
    return LOWERINGS[aten.sin.default](x)


def _sixty_cos(x, y):
    for i in range(20):
        x = x.cos() if i == 7 else x.tanh()
        x = x * 0.9
        x = x + y
    return x


def test_numerical_error_is_found_with_accuracy_level(tmp_config, monkeypatch):
    # seeded: the 12 tanh steps after the cos contract differences, and for about 1 input in 30
    # a cos computing sin ends within the tolerance (the test then failed by the order tests ran)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(16, generator=g), torch.randn(16, generator=g)
    gm = trace_aten(_sixty_cos, [x, y])
    assert _count(gm) == 60
    settings = R.current_settings(accuracy=True)
    path = R.write_script(str(tmp_config / "repro.py"), gm, [x, y], "aot", settings)
    monkeypatch.setitem(LOWERINGS, aten.cos.default, _wrong_cos)  # cos computes sin
    assert "accuracy" in R.check(gm, [x, y], "aot", settings)
    _, small = minify(path, log=lambda m: None)
    assert _count(small) <= 3
    assert any(n.target is aten.cos.default for n in small.graph.nodes)


def test_accuracy_repro_written_by_kiln_compile(tmp_config, monkeypatch):
    monkeypatch.setitem(LOWERINGS, aten.cos.default, _wrong_cos)
    monkeypatch.setattr(config, "repro_after", "aot")
    monkeypatch.setattr(config, "repro_level", "accuracy")
    kiln.compile(lambda x: x.cos() * 2)(torch.randn(8))
    repro = R.load_script(str(tmp_config / "repro.py"))
    assert repro.settings["accuracy"] is True
    assert "accuracy" in R.check(
        repro.graph_module(), repro.make_inputs(), repro.level, repro.settings
    )


def test_backend_level_repro_and_cli(tmp_config, monkeypatch):
    """KILN_REPRO_AFTER=backend: a backend that raises on a torch-level graph; `kiln minify`."""

    def flaky(gm, example_inputs):
        if any(n.target is torch.cos for n in gm.graph.nodes):
            raise ValueError("flaky cannot compile cos")
        return gm.forward

    kiln.register_backend("flaky_backend", flaky)
    monkeypatch.setattr(config, "repro_after", "backend")
    monkeypatch.setattr(config, "strict", False)  # the failing backend must fall back to eager

    def f(x):
        a = torch.sin(x) + 1
        b = torch.cos(a) * 2
        return torch.relu(b) - a

    x = torch.randn(5)
    torch.testing.assert_close(kiln.compile(f, backend="flaky_backend")(x), f(x))
    path = tmp_config / "repro.py"
    assert R.load_script(str(path)).level == "backend"
    script = textwrap.dedent(
        f"""
        import torch, kiln
        from kiln.tools.cli import main
        def flaky(gm, example_inputs):
            if any(n.target is torch.cos for n in gm.graph.nodes):
                raise ValueError("flaky cannot compile cos")
            return gm.forward
        kiln.register_backend("flaky_backend", flaky)
        raise SystemExit(main(["minify", {str(path)!r}]))
        """
    )
    env = dict(os.environ, PYTHONPATH=ROOT, KILN_CACHE_DIR=str(tmp_config / "cache"))
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    assert "-> 1 node" in res.stdout and "torch.cos" in res.stdout, res.stdout
    assert (tmp_config / "repro_min.py").exists()
