"""Kernel profiling (config.profile_kernels): one torch.profiler range per generated kernel."""

import torch

import kiln
from kiln import config
from kiln.autograd.aten_tracer import trace_aten
from kiln.backend.compile_fx import _graph_key
from kiln.backend.decompositions import DECOMPOSITIONS
from kiln.backend.profile import kernel_table, table_from_profiler
from tests.backend.helpers import check, compile_fn


def softmax_mm(x, w):
    return (torch.softmax(x, -1) @ w).relu() + x.sum(-1, keepdim=True)


def _inputs():
    return [torch.randn(16, 8), torch.randn(8, 8)]


def _profile(compiled, inputs, calls):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            out = compiled(*inputs)
    return {ev.key: ev.count for ev in prof.key_averages() if ev.key.startswith("kiln:")}, out


def test_one_row_per_kernel(monkeypatch):
    monkeypatch.setattr(config, "profile_kernels", True)
    inputs = _inputs()
    compiled = check(softmax_mm, inputs)  # outputs equal eager's
    rows, out = _profile(compiled, inputs, 3)
    torch.testing.assert_close(out[0], softmax_mm(*inputs))
    kernels = {k: n for k, n in rows.items() if k.split(" ")[1].startswith("kernel")}
    assert compiled.kernel_count >= 2
    assert len(kernels) == compiled.kernel_count, rows
    assert all(n == 3 for n in rows.values()), rows
    # labels name the kernel: its number, kind, loops, and what it reads and writes
    names = sorted(k.split(" ")[1] for k in kernels)
    assert names == sorted(f"kernel{i}" for i in range(compiled.kernel_count))
    assert any("reduction(" in k and " | 8]" in k for k in kernels), kernels
    assert all("load" in k and "store" in k for k in kernels), kernels
    # one graph range, and the matmul's extern range named by its ATen op
    (graph,) = [k for k in rows if " graph " in k]
    assert f"({compiled.kernel_count} kernels, 1 extern)" in graph
    assert any(" extern0 aten.mm" in k for k in rows), rows
    assert len({k.split(" ")[0] for k in rows}) == 1  # one tag for the graph's ranges


def test_off_is_unprofiled(monkeypatch):
    monkeypatch.setattr(config, "profile_kernels", False)
    inputs = _inputs()
    compiled = check(softmax_mm, inputs)
    for word in ("rf(", "label_", "record_function", "graph_tag"):
        assert word not in compiled.wrapper_src
    rows, _ = _profile(compiled, inputs, 2)
    assert rows == {}


def test_setting_in_cache_key(monkeypatch):
    inputs = _inputs()
    gm = trace_aten(softmax_mm, inputs, decompositions=DECOMPOSITIONS)
    keys = set()
    for on in (False, True):
        monkeypatch.setattr(config, "profile_kernels", on)
        keys.add(_graph_key(gm, inputs))
    assert len(keys) == 2


def test_kernel_table_training_step():
    kiln.reset()
    x = torch.randn(16, 8, requires_grad=True)
    w = torch.randn(8, 8, requires_grad=True)
    fn = kiln.compile(softmax_mm)

    def step():
        fn(x, w).square().sum().backward()

    table = kernel_table(step, steps=2)
    assert config.profile_kernels is False  # restored
    assert len(table.graphs) == 2  # forward and backward
    assert {r.calls for r in table.graphs} == {2}
    assert table.rows and all(r.label.startswith("kiln:") for r in table.rows)
    assert [r.total_ms for r in table.rows] == sorted(
        (r.total_ms for r in table.rows), reverse=True
    )
    assert sum(r.percent for r in table.rows) <= 100.0 + 1e-6
    text = table.format(top=3)
    assert "graphs" in text and " kernel" in text and "calls" in text
    externs = table.format(kind="extern").splitlines()[5:]  # after the summary and graphs
    assert externs and all(" extern" in line for line in externs), externs
    xe, we = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    x.grad = w.grad = None
    step()
    softmax_mm(xe, we).square().sum().backward()
    torch.testing.assert_close(x.grad, xe.grad)
    torch.testing.assert_close(w.grad, we.grad)
    kiln.reset()


def test_table_without_ranges():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.ones(3).sin()
    table = table_from_profiler(prof)
    assert table.rows == [] and "KILN_PROFILE_KERNELS=1" in str(table)


def test_symbolic_sizes_labelled(monkeypatch):
    monkeypatch.setattr(config, "profile_kernels", True)
    kiln.reset()
    fn = kiln.compile(lambda x: torch.softmax(x, -1) * 2)
    fn(torch.randn(4, 8))
    x = torch.randn(5, 8)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out = fn(x)  # a second size: recompiled with the rows symbolic
    torch.testing.assert_close(out, torch.softmax(x, -1) * 2)
    labels = [ev.key for ev in prof.key_averages() if ev.key.startswith("kiln:")]
    assert any(k.split(" ")[1] == "kernel0" and "s0" in k for k in labels), labels
    kiln.reset()


def test_every_compiled_graph_is_one_profiler_range():
    """Without profile_kernels a compiled graph call still shows as one named range."""
    x = torch.randn(64, 32)
    compiled = compile_fn(lambda a: (torch.softmax(a, -1),), [x])
    assert compiled.label == "kiln graph (1 kernel)"
    with torch.profiler.profile() as prof:
        for _ in range(3):
            compiled(x)
    rows = {e.key: e.count for e in prof.key_averages()}
    assert rows.get("kiln graph (1 kernel)") == 3, rows
