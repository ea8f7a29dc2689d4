"""mode="max-autotune" for Triton kernels (Note [Triton: autotuning]), under Triton's interpreter:
every candidate configuration computes what eager computes, the choice is kept on disk."""

import json
import os

import pytest
import torch

import kiln
from kiln import config, logs

pytest.importorskip("triton")
pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="Triton's interpreter (TRITON_INTERPRET=1)"
)

from kiln.backend.codegen import triton_tune  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "cache_dir", str(tmp_path))
    monkeypatch.setattr(triton_tune, "_tuned", {})
    monkeypatch.setattr(triton_tune._disk, "entries", None)
    logs.counters["backend"].clear()
    kiln.reset()


def _tuned(fn, *inputs):
    compiled = kiln.compile(fn, backend="kiln", mode="max-autotune-no-cudagraphs")
    return compiled(*inputs)


@pytest.fixture
def snapshots(monkeypatch):
    """What every timed candidate left in its (copied) arguments, per kernel launch tuned."""
    monkeypatch.setattr(config, "cpu_backend", "triton")
    runs = []
    real = triton_tune._time

    def time_and_keep(fn, args):
        t = real(fn, args)
        runs.append([a.clone() for a in args if isinstance(a, torch.Tensor)])
        return t

    monkeypatch.setattr(triton_tune, "_time", time_and_keep)
    return runs


@pytest.mark.parametrize(
    "fn,shape",
    [
        (lambda x: (x.sin() * 2 + 1).relu(), (37, 50)),  # pointwise
        (lambda x: torch.softmax(x, -1), (6, 300)),  # persistent reductions
        (lambda x: x.sum(-1) + x.amax(-1), (3, 5000)),  # looped reductions
        (lambda x: x.var(0), (700, 3)),  # a reduction over the outer dimension
    ],
    ids=["pointwise", "persistent", "looped", "outer"],
)
def test_every_candidate_matches_eager(fn, shape, snapshots):
    """The tuned result equals eager's, and every candidate computed what the default did (the
    default is the first candidate timed for each launch)."""
    x = torch.randn(shape)
    torch.testing.assert_close(_tuned(fn, x), fn(x), rtol=1e-5, atol=1e-5)
    assert logs.counters["backend"]["autotune_timed"] >= 1
    assert len(snapshots) > logs.counters["backend"]["autotune_timed"]  # several candidates each
    first = None
    for run in snapshots:
        shapes = [t.shape for t in run]
        if first is None or [t.shape for t in first] != shapes:
            first = run  # a new launch: its default candidate
            continue
        for a, b in zip(first, run):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)


def test_choice_is_kept_on_disk_for_a_new_process(monkeypatch):
    monkeypatch.setattr(config, "cpu_backend", "triton")
    fn = lambda x: torch.softmax(x * 3, -1)  # noqa: E731
    x = torch.randn(8, 200)
    _tuned(fn, x)
    path = os.path.join(config.cache_dir, "triton", "tuning.json")
    stored = json.load(open(path))
    assert stored and all(len(v) == 3 for v in stored.values())
    # a new process: nothing in memory, the file read
    monkeypatch.setattr(triton_tune, "_tuned", {})
    monkeypatch.setattr(triton_tune._disk, "entries", None)
    logs.counters["backend"].clear()
    kiln.reset()
    torch.testing.assert_close(_tuned(fn, x), fn(x))
    assert logs.counters["backend"]["autotune_timed"] == 0
    assert logs.counters["backend"]["autotune_disk_hits"] >= 1


def test_candidates_cover_the_default_and_stay_within_the_work():
    assert triton_tune.candidates(100, None, 0, (128, 1, 4))[0] == (128, 1, 4)
    assert all(c[0] <= 128 for c in triton_tune.candidates(100, None, 0, (128, 1, 4))[1:])
    looped = triton_tune.candidates(4, 100000, 0, (4, 512, 4))
    assert all(512 <= x * r <= 8192 for x, r, _ in looped[1:])
    persistent = triton_tune.candidates(64, 300, 512, (8, 512, 8))
    assert all(r == 512 for _, r, _ in persistent)


def test_default_mode_does_not_tune(monkeypatch):
    monkeypatch.setattr(config, "cpu_backend", "triton")
    compiled = kiln.compile(lambda x: x.cos() + 1, backend="kiln")
    x = torch.randn(100)
    torch.testing.assert_close(compiled(x), x.cos() + 1)
    assert logs.counters["backend"]["autotune_timed"] == 0
