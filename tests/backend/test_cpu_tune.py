"""mode="max-autotune" on CPU (Note [CPU: autotuning matmuls]) and matmuls as loop IR
(Note [Matmuls as loops]): every choice computes what eager computes; choices are kept."""

import pytest
import torch

import kiln
from kiln import config, logs
from kiln.backend import codecache, cpu_tune, lowering_matmul
from kiln.backend.compile_fx import CompiledGraph
from tests.backend.helpers import compile_fn


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "cache_dir", str(tmp_path))
    monkeypatch.setattr(cpu_tune, "_tuned", {})
    monkeypatch.setattr(cpu_tune._disk, "entries", None)
    codecache.clear_memory_cache()  # graphs compiled by earlier tests
    logs.counters["backend"].clear()
    kiln.reset()


def _as_loops(fn, inputs):
    """fn compiled with every matmul as loops; checks they were (no ATen call left)."""
    with lowering_matmul.as_loops(
        [f"{op}{s}" for op in ("mm", "addmm", "bmm") for s in ("", "_1", "_2")]
    ):
        compiled = compile_fn(fn, inputs)
    assert isinstance(compiled, CompiledGraph)
    assert "aten.mm" not in compiled.wrapper_src and "aten.addmm" not in compiled.wrapper_src
    assert "aten.linear" not in compiled.wrapper_src and "aten.bmm" not in compiled.wrapper_src
    return compiled


CASES = {
    "mm": (lambda a, b: a @ b, [(3, 5), (5, 7)]),
    "linear": (lambda x, w, b: torch.nn.functional.linear(x, w, b), [(4, 16), (9, 16), (9,)]),
    "linear_gelu": (
        lambda x, w, b: torch.nn.functional.gelu(torch.nn.functional.linear(x, w, b)),
        [(2, 32), (24, 32), (24,)],
    ),
    "addmm_beta_alpha": (
        lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0),
        [(3, 4), (3, 6), (6, 4)],
    ),
    "bmm": (lambda q, k: q @ k.transpose(1, 2), [(2, 3, 8), (2, 5, 8)]),
    "double": (lambda a, b: a @ b, [(3, 5), (5, 2)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matmul_as_loops_equals_eager(name):
    fn, shapes = CASES[name]
    dtype = torch.float64 if name == "double" else torch.float32
    inputs = [torch.randn(s, dtype=dtype) for s in shapes]
    compiled = _as_loops(fn, inputs)
    torch.testing.assert_close(compiled(*inputs)[0], fn(*inputs), rtol=1e-5, atol=1e-5)


def test_addmm_beta_zero_ignores_a_nan_bias():
    fn = lambda c, a, b: torch.addmm(c, a, b, beta=0)  # noqa: E731
    inputs = [torch.full((2, 3), float("nan")), torch.randn(2, 4), torch.randn(4, 3)]
    compiled = _as_loops(fn, inputs)
    torch.testing.assert_close(compiled(*inputs)[0], fn(*inputs))


def test_operand_producer_runs_once_per_element():
    """A producer of a matmul operand (bias + gelu) is its own kernel, not inlined in the sum
    (where it would run once per output)."""

    def fn(x, w1, w2):
        return torch.nn.functional.gelu(x @ w1.t()) @ w2.t()

    inputs = [torch.randn(2, 16), torch.randn(24, 16), torch.randn(8, 24)]
    compiled = _as_loops(fn, inputs)
    torch.testing.assert_close(compiled(*inputs)[0], fn(*inputs), rtol=1e-5, atol=1e-5)
    last = compiled.cpp_src.rsplit('extern "C" int kernel', 1)[1]
    assert "kiln_erff" not in last  # the second sum reads gelu's buffer


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.GELU(), torch.nn.Linear(48, 8))


@pytest.mark.parametrize("choice", ["loops", "aten"])
def test_max_autotune_each_choice_equals_eager(monkeypatch, choice):
    slow = {"loops": [2.0, 1.0], "aten": [1.0, 2.0]}[choice]  # (aten, loops) seconds
    monkeypatch.setattr(cpu_tune, "_time", lambda *fns: slow)
    model, x = _model(), torch.randn(3, 32)
    compiled = kiln.compile(model, mode="max-autotune-no-cudagraphs")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    assert logs.counters["backend"]["autotune_timed"] == 2  # one per linear shape
    assert set(cpu_tune._tuned.values()) == {choice}


def test_max_autotune_training_graphs_equal_eager():
    model, x = _model(), torch.randn(3, 32, requires_grad=True)
    ref = _model()
    compiled = kiln.compile(model, mode="max-autotune-no-cudagraphs")
    compiled(x).sum().backward()
    x2 = x.detach().clone().requires_grad_()
    ref(x2).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-5, atol=1e-5)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-5)
    assert logs.counters["backend"]["autotune_timed"] >= 2


def test_choices_are_kept_on_disk_for_a_new_process(monkeypatch):
    model, x = _model(), torch.randn(1, 32)
    with torch.no_grad():
        kiln.compile(model, mode="max-autotune-no-cudagraphs")(x)
    timed = logs.counters["backend"]["autotune_timed"]
    assert timed == 2
    monkeypatch.setattr(cpu_tune, "_tuned", {})  # a new process: nothing in memory
    monkeypatch.setattr(cpu_tune._disk, "entries", None)
    kiln.reset()
    logs.counters["backend"].clear()
    with torch.no_grad():
        out = kiln.compile(model, mode="max-autotune-no-cudagraphs")(x)
        torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-5)
    assert logs.counters["backend"]["autotune_timed"] == 0
    assert logs.counters["backend"]["autotune_disk_hits"] >= 2


def test_default_mode_times_nothing():
    model, x = _model(), torch.randn(3, 32)
    with torch.no_grad():
        kiln.compile(model)(x)
    assert logs.counters["backend"]["autotune_timed"] == 0


def test_max_autotune_graph_is_not_the_default_graph_from_the_cache(monkeypatch):
    """The same graph compiled in default mode, then under max-autotune, compiles again (the
    mode and the choices are in the graph's cache key)."""
    monkeypatch.setattr(cpu_tune, "_time", lambda *fns: [2.0, 1.0])  # loops win
    model, x = _model(), torch.randn(3, 32)
    with torch.no_grad():
        kiln.compile(model)(x)
        assert logs.counters["backend"]["graphs_compiled"] == 1
        out = kiln.compile(model, mode="max-autotune-no-cudagraphs")(x)
    torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-5)
    assert logs.counters["backend"]["graph_cache_hits"] == 0
