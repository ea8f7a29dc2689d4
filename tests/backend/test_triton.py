"""The Triton code generator, run on CPU tensors by Triton's interpreter (TRITON_INTERPRET=1).

A chosen subset of the backend's op tests runs again through `config.cpu_backend = "triton"`
(every load and store checked to stay inside its tensors), then the Triton-specific rules:
persistent and looped reductions, symbolic sizes, the index-error flag, low precision.
"""

import pytest
import torch
import torch.nn.functional as F

from kiln import config, logs
from kiln.autograd.aten_tracer import trace_aten
from kiln.backend.compile_fx import CompiledGraph, compile_aten_graph
from kiln.backend.decompositions import DECOMPOSITIONS
from kiln.contracts import GraphMeta
from kiln.symbolic.fake import fake_like
from kiln.symbolic.shape_env import ShapeEnv
from tests.backend import test_ops
from tests.backend.helpers import check, compile_fn

triton = pytest.importorskip("triton")

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and __import__("os").environ.get("TRITON_INTERPRET") != "1",
    reason="Triton needs a GPU or TRITON_INTERPRET=1",
)


@pytest.fixture(autouse=True)
def triton_path(monkeypatch):
    from tests.backend.triton_bounds import checked

    monkeypatch.setattr(config, "cpu_backend", "triton")
    monkeypatch.setattr(config, "strict", True)
    checked(monkeypatch)
    before = logs.counters["backend"]["triton_graphs"]
    yield
    assert logs.counters["backend"]["triton_graphs"] > before, "no graph went through Triton"


# the subset of tests/backend/test_ops.py CI runs through Triton (each a few seconds here)
OPS_TESTS = [
    "test_binary_noncontiguous_and_mixed_dtypes",
    "test_int_and_bool_ops",
    "test_reductions_float",
    "test_reductions_bf16_and_f64",
    "test_views",
    "test_indexing_cat_pad",
    "test_index_out_of_bounds_raises",
    "test_creation_and_conversion",
    "test_zero_size_and_scalars",
    "test_scatter_views",
    "test_softmax_int_overloads",
]


@pytest.mark.parametrize("name", OPS_TESTS)
def test_ops_through_triton(name):
    getattr(test_ops, name)()


def test_unary_float32_through_triton():
    test_ops.test_unary_float(torch.float32)


def _source(fn, inputs, **kw):
    return check(fn, inputs, **kw).cpp_src


def test_pointwise_kernel_is_masked_and_one_dimensional():
    src = _source(lambda x, y: (x.sin() * y + 1).relu(), [torch.randn(37, 50), torch.randn(50)])
    assert src.count("@triton.jit\ndef kernel") == 1
    assert "xmask = xindex < xnumel" in src and "tl.arange(0, XBLOCK)\n" in src


def test_persistent_and_looped_reductions():
    small = _source(lambda x: torch.softmax(x, -1), [torch.randn(6, 300)])
    assert "for roffset" not in small  # the row is one block: max, sum and output in one pass
    big = _source(lambda x: torch.softmax(x, -1), [torch.randn(3, 5000)], atol=1e-6, rtol=1e-5)
    assert big.count("for roffset") == 3  # max, sum, normalise: three loops over the row
    assert "tl.debug_barrier()" in big or "red_max" in big


def test_reductions_nan_and_ties():
    x = torch.tensor([[1.0, 3.0, 3.0, -1.0], [2.0, float("nan"), 5.0, float("nan")]])
    check(lambda x: (x.amax(1), x.amin(1), x.argmax(1), x.argmin(1), x.sum(1)), [x])
    y = x.repeat(1, 600)  # looped: the same rules across RBLOCK steps
    check(lambda y: (y.amax(1), y.argmax(1), y.argmin(1)), [y])


def test_looped_variance_reads_its_input_once():
    """Note [Triton: variance in one pass]: a sum and a Welford reduction in one loop."""
    x = torch.randn(4, 5000, dtype=torch.float64).float() * 3 + 1e4  # far from 0: cancellation
    fn = lambda x: (x.var(1), torch.var_mean(x, 1, correction=0), x.std(1, keepdim=True))  # noqa: E731
    src = _source(fn, [x], rtol=1e-4, atol=1e-3)
    assert "red_welford_m2" in src
    assert src.count("for roffset") == 1 and src.count("tl.load(arg0") == 1
    small = _source(lambda x: x.var(1), [torch.randn(6, 300) + 100], rtol=1e-4, atol=1e-4)
    assert "red_welford_m2" not in small  # one block: the two passes read registers


def test_welford_matches_float64_over_symbolic_sizes():
    fn = lambda x: (torch.var_mean(x, 1),)  # noqa: E731
    env = ShapeEnv()
    x = torch.randn(5, 7)
    fakes = [fake_like(x, sizes=env.sizes_of(x, "L['a0']", {0, 1}))]
    gm = trace_aten(fn, fakes, decompositions=DECOMPOSITIONS)
    GraphMeta.update(gm, shape_env=env)
    compiled = compile_aten_graph(gm, fakes)
    assert "red_welford_m2" in compiled.cpp_src
    for n, m in [(3, 1), (2, 7), (4, 3001)]:
        x = torch.randn(n, m) * 5 + 50
        var, mean = compiled(x)
        want_var, want_mean = torch.var_mean(x.double(), 1)
        torch.testing.assert_close(var, want_var.float(), rtol=1e-4, atol=1e-4, equal_nan=True)
        torch.testing.assert_close(mean, want_mean.float(), rtol=1e-5, atol=1e-5)


def test_batch_norm_training_statistics_in_one_pass():
    bn = torch.nn.BatchNorm2d(3)
    x = torch.randn(8, 3, 20, 20)  # 3200 elements a channel: looped
    out = compile_fn(lambda x: (F.batch_norm(x, None, None, bn.weight, bn.bias, True),), [x])
    assert "red_welford_m2" in out.cpp_src
    torch.testing.assert_close(
        out(x)[0], F.batch_norm(x, None, None, bn.weight, bn.bias, True), atol=1e-4, rtol=1e-4
    )


def test_large_float32_sum_is_compensated():
    x = torch.rand(1_000_003) + 1000
    check(lambda x: (x.sum(), x.mean()), [x], rtol=1e-6, atol=1e-3)


def test_low_precision_loads_compute_in_float32():
    x = torch.randn(16, 40, dtype=torch.bfloat16)
    h = torch.randn(16, 40, dtype=torch.float16)
    src = _source(lambda x, h: (x.exp() * 2, h.softmax(-1), x.float().sum(1)), [x, h])
    assert ".to(tl.float32)" in src and ".to(tl.bfloat16)" in src


def test_symbolic_sizes_are_kernel_arguments():
    """One compile serves every size: sizes are kernel arguments (ks0), never constants."""
    fn = lambda x, b: (torch.exp(x * 0.5) + b, (x * b).sum(1), x.softmax(-1))
    env = ShapeEnv()
    x, b = torch.randn(5, 7), torch.randn(7)
    fakes = [
        fake_like(x, sizes=env.sizes_of(x, "L['a0']", {0, 1})),
        fake_like(b, sizes=env.sizes_of(b, "L['a1']", {0})),
    ]
    gm = trace_aten(fn, fakes, decompositions=DECOMPOSITIONS)
    GraphMeta.update(gm, shape_env=env)
    compiled = compile_aten_graph(gm, fakes)
    assert isinstance(compiled, CompiledGraph)
    assert "ks0" in compiled.cpp_src and "ks1" in compiled.cpp_src
    for n, m in [(3, 9), (8, 1200), (1, 2)]:
        x, b = torch.randn(n, m), torch.randn(m)
        for got, want in zip(compiled(x, b), fn(x, b)):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_kiln_compile_training_through_triton_option():
    """options={"cpu_backend": "triton"}: forward and backward graphs as Triton kernels."""
    import kiln

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16))
    ref = __import__("copy").deepcopy(model)
    compiled = kiln.compile(model, options={"cpu_backend": "triton"})
    x = torch.randn(4, 8)
    got, want = compiled(x), ref(x)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    got.sum().backward()
    want.sum().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-5)


def test_triton_without_interpreter_is_refused_for_cpu(monkeypatch):
    """CPU tensors need the interpreter: without it the graph runs eagerly, saying why."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    before = logs.counters["backend"]["eager_fallbacks"]
    out = compile_fn(lambda x: (x + 1,), [torch.randn(3)])
    assert getattr(out, "kiln_fallback", False)
    assert logs.counters["backend"]["eager_fallbacks"] == before + 1
    logs.counters["backend"]["triton_graphs"] += 1  # nothing to run through Triton here


def test_constants_are_blocks():
    """minimum(0, x) and logical ops of a constant: constants are blocks of the kernel's shape
    (the interpreter cannot combine 0-d int1 values with blocks)."""
    x = torch.randn(6, 9)
    check(lambda x: (F.logsigmoid(x), (x > 0) | True, torch.clamp(x, min=0).sum(1)), [x])


def test_bfloat16_stores_round_to_nearest_even():
    x = torch.randn(1000)
    check(lambda x: (x.bfloat16(), (x * 3).bfloat16().float() + 1), [x], atol=0, rtol=0)
