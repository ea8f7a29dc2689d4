"""Random ops in Triton kernels from a seed per graph (Note [Random: numbers from a seed per
graph]), run on CPU tensors by Triton's interpreter; the C++ path and fallback_random keep eager's
numbers."""

import pytest
import torch
import torch.nn.functional as F

import kiln
from kiln import config, logs
from kiln.backend.compile_fx import CompiledGraph

triton = pytest.importorskip("triton")

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and __import__("os").environ.get("TRITON_INTERPRET") != "1",
    reason="Triton needs a GPU or TRITON_INTERPRET=1",
)


@pytest.fixture
def triton_path(monkeypatch):
    monkeypatch.setattr(config, "cpu_backend", "triton")
    monkeypatch.setattr(config, "strict", True)


@pytest.fixture
def sources(monkeypatch):
    """The kernel sources and ATen calls of every graph compiled in the test."""
    seen = []
    load = CompiledGraph.__init__

    def record(self, *args, **kwargs):
        load(self, *args, **kwargs)
        seen.append(self)

    monkeypatch.setattr(CompiledGraph, "__init__", record)
    return seen


def kernels(seen):
    return "\n".join(g.cpp_src for g in seen)


def externs(seen):
    return [str(op) for g in seen for op in g.fallback_ops]


def test_dropout_is_drawn_in_the_kernel_of_the_ops_around_it(triton_path, sources):
    def f(x):
        return F.dropout(x.sin(), 0.3, training=True) * 2

    x = torch.randn(20_000)
    y = kiln.compile(f, backend="kiln")(x)
    assert "tl.rand(" in kernels(sources)
    assert "native_dropout" not in " ".join(externs(sources))
    kept = y != 0
    assert 0.66 < kept.float().mean().item() < 0.74
    torch.testing.assert_close(y[kept], x.sin()[kept] / 0.7 * 2)


def test_manual_seed_repeats_a_call_and_each_call_draws_anew(triton_path):
    f = kiln.compile(
        lambda x: F.dropout(x, 0.5, training=True) + torch.rand_like(x), backend="kiln"
    )
    x = torch.ones(4096)
    torch.manual_seed(3)
    a = f(x)
    torch.manual_seed(3)
    b = f(x)
    c = f(x)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_backward_reads_the_mask_the_forward_drew(triton_path):
    p = 0.4
    f = kiln.compile(lambda x: F.dropout(x * 3, p, training=True), backend="kiln")
    x = torch.randn(8192, requires_grad=True)
    y = f(x)
    y.sum().backward()
    kept = y != 0
    assert 0.55 < kept.float().mean().item() < 0.65
    torch.testing.assert_close(x.grad, kept.float() * 3 / (1 - p))


def test_two_random_ops_draw_different_numbers(triton_path, sources):
    f = kiln.compile(lambda n: torch.rand(n) - torch.rand(n), backend="kiln")
    d = f(5000)
    assert (d != 0).float().mean() > 0.99
    assert kernels(sources).count("tl.rand(") == 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_distributions(triton_path, dtype):
    def f(x):
        u = torch.rand(20_000, dtype=dtype)
        z = torch.randn(20_000, dtype=dtype)
        b = torch.bernoulli(torch.full_like(x, 0.25))
        probs = torch.bernoulli(x)  # x holds probabilities 0 and 1
        v = torch.empty_like(x).uniform_(-2.0, 3.0)
        return u, z, b, probs, v

    x = (torch.arange(20_000) % 2).to(dtype)
    u, z, b, probs, v = kiln.compile(f, backend="kiln")(x)
    assert all(t.dtype == dtype for t in (u, z, b, probs, v))
    assert 0.0 <= u.min().item() and u.max().item() < 1.0
    assert abs(u.float().mean().item() - 0.5) < 0.02
    assert abs(z.float().mean().item()) < 0.05 and abs(z.float().std().item() - 1) < 0.05
    assert set(b.unique().tolist()) <= {0.0, 1.0}
    assert abs(b.float().mean().item() - 0.25) < 0.02
    assert torch.equal(probs, x)
    assert -2.0 <= v.min().item() and v.max().item() <= 3.0
    assert abs(v.float().mean().item() - 0.5) < 0.1


def test_half_uniform_stays_below_one(triton_path):
    u = kiln.compile(lambda: torch.rand(200_000, dtype=torch.bfloat16), backend="kiln")()
    assert u.max().item() < 1.0


def test_uniform_stays_below_its_upper_bound(triton_path):
    """bfloat16 rounds many draws of uniform_(0, 1000) up to 1000: eager never returns it."""
    f = kiln.compile(
        lambda x: torch.empty_like(x).uniform_(0.0, 1000.0), backend="kiln", fullgraph=True
    )
    v = f(torch.empty(500_000, dtype=torch.bfloat16))
    assert v.min().item() >= 0.0 and v.max().item() < 1000.0


def test_random_ops_fused_under_dynamic_sizes(triton_path):
    f = kiln.compile(lambda x: F.dropout(x, 0.5, training=True).sum(), backend="kiln", dynamic=True)
    for n in (1000, 3000):
        x = torch.ones(n)
        total = f(x).item()
        assert 0.8 * n < total < 1.2 * n  # kept elements are 2.0, about half of them


def test_fallback_random_draws_what_eager_draws(triton_path, sources, monkeypatch):
    def f(x):
        return F.dropout(x.cos(), 0.3, training=True) + torch.randn_like(x)

    x = torch.randn(1000)
    torch.manual_seed(1)
    expected = f(x)
    g = kiln.compile(f, backend="kiln", options={"fallback_random": True})
    torch.manual_seed(1)
    assert torch.equal(g(x), expected)
    assert "tl.rand" not in kernels(sources)
    assert {"aten.bernoulli.p", "aten.randn_like.default"} <= set(externs(sources))


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: torch.rand(x.shape, dtype=torch.float64) + x,  # float64: Philox draws float32
        lambda x: torch.rand(x.shape, generator=torch.Generator().manual_seed(0)) + x,
        lambda x: F.dropout(x, 1.0, training=True),  # eager's special case
    ],
    ids=["float64", "generator", "p_one"],
)
def test_cases_left_to_aten_draw_eagers_numbers(triton_path, fn):
    x = torch.randn(100, dtype=torch.float64)
    torch.manual_seed(2)
    expected = fn(x)
    g = kiln.compile(fn, backend="kiln")
    torch.manual_seed(2)
    assert torch.equal(g(x), expected)


def test_cpp_kernels_keep_eagers_random_numbers(sources):
    def f(x):
        return F.dropout(x.sin(), 0.3, training=True) * torch.rand_like(x)

    x = torch.randn(1000)
    torch.manual_seed(5)
    expected = f(x)
    g = kiln.compile(f, backend="kiln")
    torch.manual_seed(5)
    got = g(x)
    assert torch.equal(got == 0, expected == 0)  # the same mask (sin may differ in the last bit)
    torch.testing.assert_close(got, expected)
    assert {"aten.bernoulli.p", "aten.rand_like.default"} <= set(externs(sources))


def test_perf_hint_names_why_a_random_op_is_an_aten_call(capsys):
    logs.set_logs("perf_hints")
    try:
        kiln.compile(lambda x: F.dropout(x, 0.2, training=True), backend="kiln")(torch.ones(10))
    finally:
        logs.set_logs("")
    assert "C++ kernels draw no random numbers" in capsys.readouterr().err


def test_dropout2d_drops_whole_channels(triton_path, sources):
    """The mask is drawn over (N, C, 1, 1) and broadcast: a channel is kept or dropped whole."""
    x = torch.randn(16, 32, 5, 5)
    y = kiln.compile(lambda x: F.dropout2d(x, 0.3, training=True), backend="kiln")(x)
    assert "tl.rand(" in kernels(sources)
    dropped = (y == 0).flatten(2).all(-1)
    kept = torch.isclose(y, x / 0.7).flatten(2).all(-1)
    assert bool((dropped | kept).all()) and 0.55 < kept.float().mean().item() < 0.85
