"""kiln.save / kiln.load: the documented file format, its checks, and a load in a fresh process."""

import json
import os
import subprocess
import sys
import textwrap
import zipfile

import pytest
import torch

import kiln
from kiln.export import Dim, LoadError
from kiln.export.fx_text import FormatError, graph_from_text, graph_to_text

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 6)

    def forward(self, x):
        return (self.lin(x).tanh() * 2, x.shape[0])


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(0)
    model = _Net()
    prog = kiln.export(model, (torch.randn(4, 6),), dynamic_shapes=({0: Dim("n")},))
    path = tmp_path / "net.kiln"
    kiln.save(prog, path)
    return model, prog, path


def test_round_trip(saved):
    model, _, path = saved
    loaded = kiln.load(path)
    for b in (2, 9):
        x = torch.randn(b, 6)
        out, ref = loaded(x), model(x)
        torch.testing.assert_close(out[0], ref[0])
        assert out[1] == ref[1] == b  # a size output stays a size of the input


def test_file_layout_is_as_documented(saved):
    _, _, path = saved
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        header = json.loads(z.read("kiln_program/format.json"))
        graph = z.read("kiln_program/graph.py").decode()
    assert {"kiln_program/graph.py", "kiln_program/program.json"} <= names
    assert any(n.startswith("kiln_program/tensors/") for n in names)
    assert header["format"] == "kiln.export" and header["torch_version"] == torch.__version__
    assert "torch._C._nn.linear" in graph and "pickle" not in graph
    assert not any(n.endswith((".pkl", ".pt")) for n in names)


def _rewrite(path, member, change):
    with zipfile.ZipFile(path) as z:
        items = {n: z.read(n) for n in z.namelist()}
    items[member] = change(items[member])
    with zipfile.ZipFile(path, "w") as z:
        for n, data in items.items():
            z.writestr(n, data)


def test_truncated_file(saved):
    _, _, path = saved
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(LoadError, match="not a kiln program file, or truncated"):
        kiln.load(path)


def test_edited_graph_is_detected(saved):
    _, _, path = saved
    _rewrite(path, "kiln_program/graph.py", lambda b: b.replace(b"tanh", b"sigmoid"))
    with pytest.raises(LoadError, match="graph.py was edited or corrupted"):
        kiln.load(path)


def test_other_torch_version(saved):
    _, _, path = saved

    def older(b):
        header = json.loads(b)
        header["torch_version"] = "2.4.0"
        return json.dumps(header).encode()

    _rewrite(path, "kiln_program/format.json", older)
    with pytest.raises(LoadError, match=r"written by torch 2.4.0 \(this process has"):
        kiln.load(path)
    assert kiln.load(path, allow_version_mismatch=True) is not None


def test_not_a_kiln_file(tmp_path):
    path = tmp_path / "x.kiln"
    path.write_text("hello")
    with pytest.raises(LoadError):
        kiln.load(path)


def test_fx_text_reads_back_without_running_code():
    gm = torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph())
    x = gm.graph.placeholder("x")
    y = gm.graph.call_function(torch.ops.aten.add.Tensor, (x, 1.5))
    z = gm.graph.call_method("sum", (y,), {"dim": -1})
    gm.graph.output((z, y))
    gm.recompile()
    text = graph_to_text(gm)
    again = torch.fx.GraphModule(torch.nn.Module(), graph_from_text(text))
    assert again.code == gm.code
    with pytest.raises(FormatError, match="unknown name 'os'"):
        graph_from_text("def forward(self, x):\n    y = os.system('true')\n    return y\n")
    with pytest.raises(FormatError, match="unsupported"):
        graph_from_text("def forward(self, x):\n    y = (lambda: 1)()\n    return y\n")
    with pytest.raises(FormatError, match="truncated"):
        graph_from_text("def forward(self, x):\n    y = x.sum()\n")


def test_load_in_a_fresh_process_without_the_source(saved, tmp_path):
    model, _, path = saved
    xs = [torch.randn(3, 6), torch.randn(11, 6)]
    torch.save({"xs": xs, "ys": [model(x)[0] for x in xs]}, tmp_path / "io.pt")
    script = textwrap.dedent(
        f"""
        import sys, torch, kiln
        prog = kiln.load({str(path)!r})
        io = torch.load({str(tmp_path / "io.pt")!r})
        for x, y in zip(io["xs"], io["ys"]):
            torch.testing.assert_close(prog(x)[0], y)
        assert "test_serialize" not in sys.modules
        print("ok")
        """
    )
    env = dict(os.environ, PYTHONPATH=ROOT)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr


def test_packaged_program_loads_without_compiling_cpp(saved, tmp_path, monkeypatch):
    from kiln.backend import codecache

    model, prog, _ = saved
    path = tmp_path / "packaged.kiln"
    monkeypatch.setattr(kiln.config, "cache_dir", str(tmp_path / "build"))
    kiln.save(prog, path, package=True)
    with zipfile.ZipFile(path) as z:
        assert any(n.endswith(".so") for n in z.namelist())
    monkeypatch.setattr(kiln.config, "cache_dir", str(tmp_path / "empty"))  # a cold cache
    codecache.clear_memory_cache()
    kiln.reset()
    before = kiln.counters["backend"]["cpp_compiles"]
    loaded = kiln.load(path)
    fast = loaded.compile("kiln")
    x = torch.randn(4, 6)  # the export's sizes
    with torch.no_grad():
        torch.testing.assert_close(fast(x)[0], model(x)[0])
    assert kiln.counters["backend"]["cpp_compiles"] == before  # 0 C++ compiles
    assert kiln.counters["backend"]["cpp_disk_hits"] >= 1
