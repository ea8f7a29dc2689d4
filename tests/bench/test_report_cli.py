"""The report writes CSV/JSON/PNG that parse; the CLI's help and --list work."""

import csv
import json
import subprocess
import sys

import pytest

from kiln.tools import cli
from kiln_bench import report
from kiln_bench.runner import Row, Runner, Settings, environment


def _fake_runner():
    runner = Runner(Settings(models="mlp", compare="kiln,torch.compile", progress=False))
    runner.rows = [
        Row("mlp", "inference", "eager", accuracy="pass", max_err=0.0, ms=2.0, speedup=1.0),
        Row("mlp", "inference", "kiln", status="unavailable: not yet"),
        Row(
            "mlp",
            "inference",
            "torch.compile",
            accuracy="pass",
            max_err=1e-6,
            ms=1.0,
            speedup=2.0,
            cold_s=3.0,
            warm_s=0.1,
            graphs=1,
            breaks=0,
            step_mb=4.0,
        ),
        Row("mlp", "training", "eager", accuracy="pass", ms=4.0, speedup=1.0),
        Row("mlp", "training", "kiln", status="error: compile: boom"),
        Row("mlp", "training", "torch.compile", accuracy="FAIL", max_err=0.5, ms=2.0, speedup=2.0),
    ]
    runner.overhead = [{"compiler": "eager", "startup_s": 0.0, "call_us": 2.0, "status": "ok"}]
    return runner


def test_report_writes_csv_json_png(tmp_path):
    runner = _fake_runner()
    env = environment(runner.s)
    paths = report.write_all(runner, env, str(tmp_path))
    with open(paths["csv"]) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 6 and rows[2]["compiler"] == "torch.compile" and rows[2]["speedup"] == "2.0"
    doc = json.load(open(paths["json"]))
    assert doc["environment"]["torch"] and len(doc["rows"]) == 6
    summ = {(s["compiler"], s["mode"]): s for s in doc["summary"]}
    assert summ[("torch.compile", "inference")]["geomean_speedup"] == 2.0
    assert summ[("torch.compile", "training")]["geomean_speedup"] is None  # FAIL rows don't count
    with open(paths["png"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    text = report.table(runner.rows, runner.overhead, env)
    assert "geomean" in text.lower() and "unavailable: not yet" in text


def test_geomean():
    assert report.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert report.geomean([]) is None


def test_cli_help_and_list(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["bench", "--help"])
    assert e.value.code == 0
    assert "--compare" in capsys.readouterr().out
    assert cli.main(["bench", "--list"]) == 0
    assert "nanogpt" in capsys.readouterr().out


def test_python_dash_m_kiln_help():
    out = subprocess.run(
        [sys.executable, "-m", "kiln", "bench", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and "kiln bench" in out.stdout


def test_cli_bench_end_to_end(tmp_path, capsys):
    rc = cli.main(
        [
            "bench",
            "--models",
            "pointwise",
            "--mode",
            "inference",
            "--compare",
            "eager",
            "--iters",
            "1",
            "--warmup",
            "0",
            "--no-progress",
            "--timer",
            "cpu",
            "--out",
            str(tmp_path),
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "pointwise" in out and "Geometric mean" in out
    assert (tmp_path / "bench.csv").exists() and (tmp_path / "bench.png").exists()


def test_cli_rejects_bad_arguments(capsys):
    import torch

    assert cli.main(["bench", "--models", "nope", "--no-progress"]) == 2
    assert "unknown model" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert cli.main(["bench", "--device", "cuda", "--no-progress"]) == 2
        assert "no CUDA device" in capsys.readouterr().err
