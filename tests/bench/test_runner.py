"""A short accuracy pass through the runner: rows, statuses and pass/fail, never timings."""

import math

import torch

from kiln_bench import report
from kiln_bench.compilers import Eager, Kiln, parse_compare
from kiln_bench.runner import Runner, Settings, compare


def _settings(**kw):
    base = dict(models="mlp,pointwise", compare="eager", iters=1, warmup=0, progress=False)
    base.update(kw)
    return Settings(**base)


def _rows(runner):
    return {(r.model, r.mode, r.compiler): r for r in runner.rows}


def test_eager_against_itself_passes_bitwise():
    runner = Runner(_settings()).run()
    rows = _rows(runner)
    assert len(rows) == 4  # 2 models x 2 modes x eager
    for r in rows.values():
        assert r.status == "ok" and r.accuracy == "pass" and r.max_err == 0.0, r
        assert r.ms is not None and r.speedup is not None and r.cold_s is None
    assert [o["compiler"] for o in runner.overhead] == ["eager"]


class _Perturb(Eager):
    """A 'compiler' that returns slightly wrong outputs."""

    kind = "test"

    def __init__(self):
        super().__init__("perturb")

    def compile(self, model):
        return lambda *args: model(*args) * 1.01

    def counts(self):
        return 1, 0


class _Broken(Eager):
    """A 'compiler' whose compiled code raises."""

    kind = "test"

    def __init__(self):
        super().__init__("broken")

    def compile(self, model):
        def run(*args):
            raise RuntimeError("backend exploded\nsecond line")

        return run


def test_wrong_and_failing_compilers_are_recorded_not_raised(tmp_path):
    runner = Runner(_settings(models="mlp"))
    runner.compilers += [_Perturb(), _Broken()]
    runner.unavailable.update(perturb="", broken="")
    runner.run()
    rows = _rows(runner)
    for mode in ("inference", "training"):
        bad = rows[("mlp", mode, "perturb")]
        assert bad.status == "ok" and bad.accuracy == "FAIL" and bad.max_err > 0
        assert bad.worst  # names the tensor that differs most
        broken = rows[("mlp", mode, "broken")]
        assert broken.status == "error: compile: RuntimeError: backend exploded"
        assert broken.speedup is None
        assert rows[("mlp", mode, "eager")].accuracy == "pass"
    assert any("backend exploded" in e for e in runner.errors)
    text = report.table(runner.rows, runner.overhead)
    assert "FAIL" in text and "error: compile" in text


def test_compare_tolerance_and_shapes():
    e = {"output": torch.ones(3)}
    assert compare({"output": torch.ones(3) + 1e-7}, e, torch.float32)[0]
    ok, err, worst = compare({"output": torch.ones(3) + 1e-2}, e, torch.float32)
    assert not ok and math.isclose(err, 1e-2, rel_tol=1e-3) and worst == "output"
    assert not compare({"output": torch.ones(4)}, e, torch.float32)[0]
    assert not compare({"output": torch.tensor([1.0, float("nan"), 1.0])}, e, torch.float32)[0]
    # small gradients are judged relative to their own magnitude, not waved through by atol
    g = {"grad w": torch.full((3,), 1e-6)}
    assert not compare({"grad w": torch.full((3,), 2e-6)}, g, torch.float32)[0]


def test_parse_compare_names():
    names = [c.name for c in parse_compare("eager,kiln:aot_eager,kiln,torch.compile", "kiln")]
    assert names == ["eager", "kiln:aot_eager", "kiln", "torch.compile"]
    assert [c.name for c in parse_compare("kiln", "eager")] == ["eager", "kiln:eager"]


def test_kiln_column_reports_unavailable_or_passes():
    """kiln with backend="eager": passes when kiln.compile exists, else says why not."""
    runner = Runner(_settings(models="mlp", compare="kiln:eager"))
    reason = Kiln("kiln:eager", "eager").available()
    runner.run()
    for mode in ("inference", "training"):
        row = _rows(runner)[("mlp", mode, "kiln:eager")]
        if reason:
            assert row.status == f"unavailable: {reason}"
        else:
            assert row.status == "ok" and row.accuracy == "pass", row
            assert row.graphs >= 1


def test_torch_compile_aot_eager_passes():
    runner = Runner(_settings(models="pointwise", compare="torch.compile:aot_eager"))
    runner.run()
    for mode in ("inference", "training"):
        row = _rows(runner)[("pointwise", mode, "torch.compile:aot_eager")]
        assert row.status == "ok" and row.accuracy == "pass", row
        assert row.graphs == 1 and row.breaks == 0


def test_most_common_break_reason():
    import collections

    from kiln_bench.compilers import _most_common

    assert _most_common(collections.Counter()) == ""
    c = collections.Counter({"rare\nmore": 1, "often: data-dependent branch\ndetail": 3})
    assert _most_common(c) == "often: data-dependent branch"


def test_amp_steps_run_under_autocast_and_kiln_captures_them():
    # --amp bfloat16: the forward and loss under torch.autocast; kiln compiles the model (a frame
    # called under autocast) and matches eager within bf16 tolerance.
    runner = Runner(_settings(models="mlp", compare="kiln:aot_eager", amp="bfloat16")).run()
    rows = _rows(runner)
    for mode in ("inference", "training"):
        r = rows[("mlp", mode, "kiln:aot_eager")]
        assert r.status == "ok" and r.accuracy == "pass", r
        assert (r.graphs, r.breaks) == (1, 0), r
