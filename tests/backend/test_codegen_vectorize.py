"""Code shapes that gcc vectorizes: bool loads, column reductions with fused stores, reshape indices."""

import pytest
import torch

from tests.backend.helpers import check


def test_masked_softmax_loads_bool_bytes():
    """A bool load blocks gcc's vectorizer: kernels read the byte and compare it with 0."""
    x = torch.randn(4, 64, 64)
    mask = torch.rand(64, 64) > 0.7

    def fn(a, m):
        return (torch.softmax(a.masked_fill(m, float("-inf")), -1),)

    compiled = check(fn, [x, mask])
    assert "reinterpret_cast<const uint8_t*>" in compiled.cpp_src


def test_column_reduction_with_fused_pointwise_store():
    """A gradient stored while its column sum (bias gradient) accumulates: one column kernel."""
    a, b = torch.randn(512, 256), torch.randn(512, 256)

    def fn(x, y):
        g = x * (1 - y) + 1
        return g, g.sum(0)

    compiled = check(fn, [a, b], rtol=1e-5, atol=1e-4)
    assert "ob += 64" in compiled.cpp_src, compiled.cpp_src


def test_column_reduction_over_reshaped_rows():
    """Rows of a [4, 128, 256] tensor viewed as [512, 256]: the row index is split by % and /."""
    a = torch.randn(4, 128, 256)
    b = torch.randn(4, 128, 256)

    def fn(x, y):
        g = (x * y).reshape(512, 256)
        return g * 2, g.sum(0), g.amax(0)

    compiled = check(fn, [a, b], rtol=1e-5, atol=1e-4)
    assert "ob += 64" in compiled.cpp_src, compiled.cpp_src


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_channels_last_batch_norm_statistics_are_column_segments(dtype):
    """NHWC batch statistics: the mean, then the variance around it, then per-channel steps, in
    one column kernel whose later loops read the earlier results from per-lane arrays."""
    x = (torch.randn(4, 24, 5, 7) * 3 + 1).to(dtype).contiguous(memory_format=torch.channels_last)
    run = torch.randn(24).to(dtype)

    def fn(a, r):
        m = a.mean((0, 2, 3))
        v = (a - m[None, :, None, None]).square().mean((0, 2, 3))
        return m, v, r * 0.9 + m * 0.1, torch.rsqrt(v + 1e-5), a.amax((0, 2, 3))

    tol = 2e-2 if dtype == torch.bfloat16 else None
    compiled = check(fn, [x, run], atol=tol, rtol=tol)
    assert "ob += 64" in compiled.cpp_src and "lane_" in compiled.cpp_src, compiled.cpp_src
    assert compiled.kernel_count == 1, compiled.cpp_src


def test_column_segments_keep_nan():
    x = torch.randn(2, 16, 3, 3).contiguous(memory_format=torch.channels_last)
    x[1, 3, 2, 1] = float("nan")
    x[0, 5, 0, 0] = float("inf")

    def fn(a):
        m = a.mean((0, 2, 3))
        return m, (a - m[None, :, None, None]).amax((0, 2, 3))

    check(fn, [x])


def test_reshape_view_index_has_no_division_by_the_whole_size():
    """(128*i0 + i1) // 8192 with i1 < 128 is i0 // 64: no gather in the inner loop."""
    x = torch.randn(4, 64, 128)
    w, bias = torch.randn(128), torch.randn(128)

    def fn(a, w, b):
        h = torch.nn.functional.layer_norm(a, (128,), w, b)
        return (h.reshape(256, 128) * 3,)

    compiled = check(fn, [x, w, bias], rtol=1e-5, atol=1e-5)
    assert "/ 8192" not in compiled.cpp_src, compiled.cpp_src


def test_float_select_has_no_branch():
    """where/relu on float32 select bits (gcc 12 vectorizes no loop with a call and a branch)."""
    x = torch.randn(64, 100)
    x[0, :4] = torch.tensor([float("nan"), -0.0, float("inf"), -float("inf")])

    def fn(a):
        return torch.where(a > 0, torch.exp(a), a * 0.5), torch.relu(torch.sin(a))

    compiled = check(fn, [x], rtol=2e-6, atol=1e-6)
    assert "kiln_self(tmp" in compiled.cpp_src
    got, want = compiled(x)[1], fn(x)[1]
    ok = ~want.isnan()  # the sign of a NaN means nothing
    assert torch.equal(got[ok].signbit(), want[ok].signbit())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_max_min_clamp_selects_match_eager_on_nan_and_signed_zeros(dtype):
    sp = torch.tensor([float("nan"), -0.0, 0.0, float("inf"), -float("inf"), 1.0, -1.0, 3.0])
    a, b = sp.repeat_interleave(8).to(dtype), sp.repeat(8).to(dtype)

    def fn(x, y):
        return (
            torch.maximum(x, y),
            torch.minimum(x, y),
            x.clamp(min=0.0),
            x.clamp(max=-0.0),
            x.clamp(-1, 1),
            torch.clamp(x, min=y),
        )

    compiled = check(fn, [a, b], atol=0, rtol=0)
    for got, want in zip(compiled(a, b), fn(a, b)):
        ok = ~want.isnan()
        assert torch.equal(got.isnan(), want.isnan())
        assert torch.equal(got[ok], want[ok]) and torch.equal(got[ok].signbit(), want[ok].signbit())
    assert ("kiln_self(tmp" in compiled.cpp_src) == (dtype == torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_column_rows_split_across_threads(monkeypatch, dtype):
    """Few outputs, many rows: each thread sums its rows, the partials fold in thread order
    (Note [Codegen: rows split across threads]); NaN and every reduction kind as eager."""
    from kiln import config

    monkeypatch.setattr(config, "num_threads", 2)
    torch.manual_seed(0)
    x = (torch.randn(6, 24, 20, 20) * 4).to(dtype).contiguous(memory_format=torch.channels_last)
    if dtype.is_floating_point:
        x[3, 5, 7, 1] = float("nan")

    def fn(a):
        m = a.sum((0, 2, 3))
        out = [m, a.amax((0, 2, 3)), a.amin((0, 2, 3)), (a > 0).any(3).all(2).any(0)]
        if dtype.is_floating_point:
            out.append((a - m[None, :, None, None] / 2400).square().mean((0, 2, 3)))
        return tuple(out)

    tol = 1e-3 if dtype == torch.float32 else None  # sums of 2400 floats: eager's own rounding
    compiled = check(fn, [x], atol=tol, rtol=tol)
    assert "omp for schedule(static)" in compiled.cpp_src, compiled.cpp_src
