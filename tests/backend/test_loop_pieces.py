"""Inner loops cut into pieces (cat segments, tiles), reordered by strides; hoisted invariants."""

import pytest
import torch

from tests.backend.helpers import check

DTYPES = [torch.float32, torch.float64, torch.bfloat16]


def _qkv(dtype, b=2, h=4, t=16, d=32):
    return [torch.randn(b, h, t, d).to(dtype) for _ in range(3)]


def _merge_heads(q, k, v):
    b, h, t, d = q.shape
    return torch.cat([x.transpose(1, 2).reshape(b, t, h * d) for x in (q, k, v)], -1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_qkv_cat_is_tiled(dtype):
    """Heads merged and concatenated: segments per input, tiles of one head's width."""

    def fn(q, k, v):
        return (_merge_heads(q, k, v),)

    compiled = check(fn, _qkv(dtype), atol=0, rtol=0)
    assert "o2_t" in compiled.cpp_src and "o2_l" in compiled.cpp_src, compiled.cpp_src


@pytest.mark.parametrize("dtype", DTYPES)
def test_qkv_cat_column_sum_is_tiled(dtype):
    """The bias gradient of a fused qkv projection: a column sum over the merged heads."""

    def fn(q, k, v):
        y = _merge_heads(q, k, v)
        return y.sum((0, 1)), y * 2

    tol = 2e-2 if dtype == torch.bfloat16 else None
    compiled = check(fn, _qkv(dtype), atol=tol, rtol=tol)
    if dtype != torch.bfloat16:  # bf16: the cat is stored rounded first, the sum reads that
        assert "o0_l" in compiled.cpp_src, compiled.cpp_src


def test_cat_segments_fold_the_select():
    """cat along the inner dim of pieces of different layouts: one loop per input, no select."""
    x = torch.randn(8, 48)
    y = torch.randn(40, 8).t()  # non-contiguous

    def fn(a, b):
        return (torch.cat([a * 2, b + 1, torch.sin(a)], 1),)

    compiled = check(fn, [x, y])
    src = compiled.cpp_src[compiled.cpp_src.index("int kernel0") :]
    assert "o1 = 48; o1 < 88" in src, src
    assert "kiln_self(" not in src, src


def test_cat_with_odd_sizes_and_broadcast():
    """Segments that no tile divides, and a broadcast input."""
    x, y, z = torch.randn(3, 5, 7), torch.randn(3, 5, 1), torch.randn(1, 5, 11)

    def fn(a, b, c):
        return (torch.cat([a, b.expand(3, 5, 4), c.expand(3, 5, 11)], -1) * 3,)

    check(fn, [x, y, z])


def test_cat_zero_size_piece_and_int64():
    x, y = torch.arange(12).reshape(3, 4), torch.empty(3, 0, dtype=torch.int64)

    def fn(a, b):
        return (torch.cat([a, b, a * 2], 1),)

    check(fn, [x, y])


def test_slice_scatter_segments():
    """slice_scatter's inside/outside comparisons cut the loop too (logical_and folds)."""
    x, s = torch.randn(6, 64), torch.randn(6, 16)

    def fn(a, b):
        return (torch.slice_scatter(a, b, 1, 16, 32) * 2,)

    check(fn, [x, s])
