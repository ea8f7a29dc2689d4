"""kiln behind torch.compile: the entry point torch discovers, and the backend on its graphs."""

import os
import pathlib
import subprocess
import sys
import textwrap
import tomllib

import pytest
import torch

import kiln
from kiln.tools.torch_backend import clean_graph, materialize

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)
    )


def _grads(model, x):
    out = model(x)
    out.square().mean().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    return out.detach(), grads


def test_torch_compile_finds_kiln_through_the_entry_point(tmp_path):
    """A fresh process with pyproject's entry point declared: backend="kiln" resolves to kiln."""
    eps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert eps["torch_dynamo_backends"] == {"kiln": "kiln.tools.torch_backend:kiln"}
    dist = tmp_path / "torch_kiln_probe-0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: torch-kiln-probe\nVersion: 0.0\n")
    lines = [f"{k} = {v}" for k, v in eps["torch_dynamo_backends"].items()]
    (dist / "entry_points.txt").write_text("[torch_dynamo_backends]\n" + "\n".join(lines) + "\n")
    script = textwrap.dedent(
        """
        import sys, torch, kiln
        sys.path.insert(0, sys.argv[1])
        import importlib.metadata as md
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
        f = torch.compile(m, backend="kiln")
        assert "kiln" in torch._dynamo.list_backends(), torch._dynamo.list_backends()
        for b in (3, 5):
            x = torch.randn(b, 8)
            out = f(x); out.sum().backward()
            g = [p.grad.clone() for p in m.parameters()]; m.zero_grad()
            ref = m(x); ref.sum().backward()
            r = [p.grad.clone() for p in m.parameters()]; m.zero_grad()
            torch.testing.assert_close(out, ref)
            for a, e in zip(g, r):
                torch.testing.assert_close(a, e)
        print("compiled", kiln.counters["backend"]["graphs_compiled"])
        """
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), KILN_CACHE_DIR=str(tmp_path / "cache"))
    res = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    compiled = int(res.stdout.split("compiled")[-1])
    assert compiled >= 2  # kiln's code generator compiled the forward and backward graphs


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_with_kiln_equals_eager(dynamic):
    from kiln.tools.torch_backend import kiln as kiln_backend

    torch._dynamo.reset()
    model = _model()
    compiled = torch.compile(model, backend=kiln_backend, dynamic=dynamic)
    kiln.reset()
    for batch in (4, 6, 9):
        x = torch.randn(batch, 8)
        out, grads = _grads(compiled, x)
        ref, ref_grads = _grads(model, x)
        torch.testing.assert_close(out, ref)
        for g, r in zip(grads, ref_grads):
            torch.testing.assert_close(g, r)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x))
    backend = kiln.counters["backend"]
    assert backend["graphs_compiled"] + backend["graph_cache_hits"] >= 2, dict(backend)
    assert backend["eager_fallbacks"] == 0


def test_fake_example_inputs_are_materialized():
    """torch may pass fake tensors and SymInts: kiln takes their metadata only."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    mode = FakeTensorMode(shape_env=ShapeEnv())
    real = torch.randn(3, 5).t()
    fake = mode.from_tensor(real)
    x = materialize(fake)
    assert type(x) is torch.Tensor and x.shape == (5, 3) and x.stride() == (1, 5)
    assert materialize(7) == 7 and materialize(real) is real


def test_graph_metadata_is_dropped_and_graph_runs():
    seen = {}

    def capture(gm, example_inputs):
        seen["gm"] = gm
        seen["inputs"] = example_inputs
        return gm.forward

    torch._dynamo.reset()
    torch.compile(lambda x: (x.sin() + 1).sum(), backend=capture)(torch.randn(4))
    gm = seen["gm"]
    assert any("example_value" in n.meta for n in gm.graph.nodes)
    clean = clean_graph(gm)
    assert not any("example_value" in n.meta for n in clean.graph.nodes)
    x = torch.randn(4)
    torch.testing.assert_close(clean(x), gm(x))


def test_float_argument_under_dynamic_compiles_per_value():
    """dynamic=True passes floats as tensors read with .item(): each value gets its own graph."""
    from kiln.tools.torch_backend import kiln as kiln_backend

    torch._dynamo.reset()

    def f(x, scale):
        return (x * scale).relu() + scale

    compiled = torch.compile(f, backend=kiln_backend, dynamic=True)
    for scale in (0.5, 2.0, 0.5, -1.5):
        x = torch.randn(5)
        torch.testing.assert_close(compiled(x, scale), f(x, scale))
