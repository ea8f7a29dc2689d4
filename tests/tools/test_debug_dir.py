"""KILN_DEBUG_DIR: per-graph files, runnable scripts, and an index.html report (parsed)."""

import html.parser
import os
import subprocess
import sys

import pytest
import torch

import kiln
from kiln import config
from kiln.tools import debug_dir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.lin(x).relu()
        print("between graphs")
        return (y * 2).sum(1)


class _Page(html.parser.HTMLParser):
    """Tables by id: rows of cell texts."""

    def __init__(self):
        super().__init__()
        self.tables, self.links = {}, []
        self._table = self._row = self._cell = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self._table = self.tables.setdefault(attrs.get("id"), [])
        elif tag == "tr" and self._table is not None:
            self._row = []
            self._table.append(self._row)
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        elif tag == "a":
            self.links.append(attrs["href"])

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


@pytest.fixture
def dump(tmp_path, monkeypatch):
    folder = tmp_path / "debug"
    monkeypatch.setattr(config, "debug_dir", str(folder))
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))
    kiln.reset()
    yield folder
    kiln.reset()


def _run(dump, profile=False):
    torch.manual_seed(0)
    model = _Model()
    compiled = kiln.compile(model)
    x = torch.randn(4, 8, requires_grad=True)
    compiled(x).sum().backward()
    for _ in range(2):
        compiled(torch.randn(4, 8, requires_grad=True))
    with torch.no_grad():
        compiled(torch.randn(6, 8))  # a recompile (size, grad mode): inference graphs
    page = _Page()
    page.feed((dump / "index.html").read_text())
    return page


def test_graph_folders_hold_code_kernels_wrapper_and_a_script_that_runs(dump):
    _run(dump)
    folders = sorted(os.listdir(dump / "graphs"))
    kinds = {f.rsplit("_", 1)[1] for f in folders}
    assert {"forward", "backward", "inference"} <= kinds, folders
    assert any("_Model_forward_" in f for f in folders)
    for f in folders:
        names = set(os.listdir(dump / "graphs" / f))
        assert {"graph.py", "kernels.cpp", "wrapper.py", "run.py"} <= names
        assert 'extern "C"' in (dump / "graphs" / f / "kernels.cpp").read_text()
    script = dump / "graphs" / folders[0] / "run.py"
    env = dict(os.environ, PYTHONPATH=ROOT, KILN_CACHE_DIR=str(dump.parent / "cache"))
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    assert "compiled and ran" in res.stdout


def test_index_html_lists_frames_graphs_breaks_recompiles_guards_kernels(dump):
    page = _run(dump)
    frames = page.tables["frames"][1:]
    assert any(r[0] == "_Model.forward" and "test_debug_dir.py:" in r[1] for r in frames)
    assert any("def guard" in r[4] for r in frames)
    breaks = page.tables["breaks"][1:]
    assert breaks and "print" in breaks[0][1]
    assert 'print("between graphs")' in breaks[0][3] and "test_debug_dir.py:" in breaks[0][2]
    recompiles = page.tables["recompiles"][1:]
    assert recompiles and "x.shape == (4, 8)" in recompiles[0][2]
    graphs = page.tables["graphs"][1:]
    assert len(graphs) == len(os.listdir(dump / "graphs"))
    assert all(int(r[4]) >= 0 for r in graphs) and any(int(r[4]) > 0 for r in graphs)
    kernels = page.tables["kernels"][1:]
    assert any(r[1].startswith("kernel") for r in kernels)
    for link in page.links:  # every link points at a file or folder that exists
        assert (dump / link).exists(), link


def test_kernel_times_with_profile_kernels(dump, monkeypatch):
    monkeypatch.setattr(config, "profile_kernels", True)
    page = _run(dump)
    rows = page.tables["kernels"][1:]
    timed = [r for r in rows if r[1].startswith("kiln:") and r[3]]
    assert timed, rows
    assert all(float(r[3]) >= 0 and int(r[2]) >= 1 for r in timed)
    assert any(" kernel" in r[1] for r in timed)


def test_render_escapes_text():
    report = debug_dir.Report()
    report.breaks.append(dict(fn="f", reason="a <b> & c", where="x.py:1", source="<tag>"))
    text = debug_dir.render(report)
    assert "a &lt;b&gt; &amp; c" in text and "<tag>" not in text
