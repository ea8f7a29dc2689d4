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


@pytest.mark.parametrize("dtype", DTYPES)
def test_transposed_pointwise_runs_the_contiguous_dim_inside(dtype):
    """x.t() + y with the output laid out like x.t(): two of three indices step along dim 0."""
    x, y = torch.randn(40, 72).to(dtype), torch.randn(72, 40).to(dtype)

    def fn(a, b):
        return (a.t() * 2 + b,)

    compiled = check(fn, [x, y])
    assert "o0b += 16" in compiled.cpp_src, compiled.cpp_src


def test_per_channel_vectors_do_not_reorder_a_contiguous_kernel():
    """A batch norm's affine step reads four per-channel vectors `w[o1]`: they stay in cache, so
    the loop over the contiguous H*W runs inside (no blocks stepping along the channels)."""
    x = torch.randn(4, 32, 8, 8)
    m, r, w, b = (torch.randn(32, 1, 1) for _ in range(4))

    def fn(a, m, r, w, b):
        return (((a - m) * r * w + b).relu(),)

    compiled = check(fn, [x, m, r, w, b])
    assert "o1b +=" not in compiled.cpp_src, compiled.cpp_src


@pytest.mark.parametrize("dtype", DTYPES)
def test_transposed_operand_is_staged_through_tiles(dtype):
    """x.t().contiguous() and y in x.t() + y read along another dim than the inner loop: their
    tiles are copied once into a local array (Note [Codegen: transposed pointwise kernels])."""
    x, y = torch.randn(70, 45).to(dtype), torch.randn(45, 70).to(dtype)
    compiled = check(lambda a: (a.t().contiguous(),), [x])
    assert "stage0[" in compiled.cpp_src, compiled.cpp_src
    compiled = check(lambda a, b: (a.t() * 2 + b,), [x, y])
    assert "stage0[" in compiled.cpp_src, compiled.cpp_src


def test_staged_permutes_of_three_dims():
    x = torch.randn(3, 40, 33)
    check(lambda a: (a.permute(0, 2, 1).contiguous() + 1,), [x])
    check(lambda a: (a.permute(2, 0, 1).contiguous(),), [x])
    y = torch.randn(33, 40, 3)
    check(lambda a, b: (a.permute(2, 1, 0) - b,), [x, y])


def test_transposed_pointwise_edge_blocks_and_zero_size():
    check(lambda a, b: (a.t() + b,), [torch.randn(37, 21), torch.randn(21, 37)])
    check(lambda a, b: (a.t() + b,), [torch.randn(0, 21), torch.randn(21, 0)])


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_norm_statistics_merge_contiguous_inner_loops(dtype):
    """Sums over (N, H, W) keeping C: H and W form one contiguous inner loop of H*W."""
    x = torch.randn(4, 8, 6, 10).to(dtype)

    def fn(a):
        return a.sum((0, 2, 3)), (a * a).mean((0, 2, 3)), a.amax((0, 2, 3))

    tol = 2e-2 if dtype == torch.bfloat16 else None
    compiled = check(fn, [x], atol=tol, rtol=tol)
    assert "r2 < 60" in compiled.cpp_src, compiled.cpp_src


def test_merge_keeps_non_contiguous_and_argmax_loops():
    x = torch.randn(6, 5, 7).transpose(1, 2)  # the reduced dims are not contiguous together
    check(lambda a: (a.sum((1, 2)), a.reshape(6, -1).argmax(1)), [x])


@pytest.mark.parametrize("idx_dtype", [torch.int64, torch.int32])
def test_embedding_layer_norm_hoists_the_row_index(idx_dtype):
    """The token index is loaded and checked once per row, outside the reduction loops."""
    idx = torch.tensor([[1, 5, 0, 7], [3, 3, 2, -1]]).to(idx_dtype)
    wte, wpe = torch.randn(8, 32), torch.randn(4, 32)

    def fn(i, a, b):
        x = a[i] + b[torch.arange(4)]
        return (torch.nn.functional.layer_norm(x, (32,)),)

    compiled = check(fn, [idx, wte, wpe], atol=1e-5, rtol=1e-5)
    src = compiled.cpp_src[compiled.cpp_src.index("int kernel0") :]
    loop = src.index("for (int64_t r0")
    assert src.index("kiln_err = 1") < loop, src


def test_hoisted_index_check_still_raises():
    idx = torch.tensor([[1, 9]])
    w = torch.randn(8, 16)

    def fn(i, a):
        return (a[i].sum(-1),)

    with pytest.raises(IndexError):
        check(fn, [idx, w])


@pytest.mark.parametrize(
    "shape,dim", [((3, 300001), 1), ((100003, 48), 0), ((2, 5000, 40), (0, 1))]
)
def test_float_partial_sums_stay_precise_on_large_inputs(shape, dim):
    """Runs of float partial sums (Note [Codegen: float partial sums]) with a large offset."""
    x = torch.rand(shape) + 1000.0

    def fn(a):
        return a.sum(dim), a.mean(dim)

    compiled = check(fn, [x])
    assert "_f = 0" in compiled.cpp_src or "_f[j] = 0" in compiled.cpp_src, compiled.cpp_src


def test_index_algebra_folds_a_split_flat_index():
    """k*(X // k) + X % k is X again (a view of a view), so merged loops load contiguously."""
    from kiln.backend.ir import Ix, set_range

    set_range("t_i", 0, 131071)
    i = Ix.var("t_i")
    assert (i % 512) + (i // 512) * 512 == i
    assert ((i + 7) // 64) * 64 + (i + 7) % 64 + 1 == i + 8
    assert str((i // 512) * 512 + i % 256) != str(i)  # different moduli stay apart


def test_merged_loops_through_reshapes_load_contiguously():
    x = torch.randn(256, 512)

    def fn(a):
        y = a.view(4, 64, 512)
        return (torch.tanh(y) * y + 1,)

    compiled = check(fn, [x])
    src = compiled.cpp_src[compiled.cpp_src.index("int kernel0") :]
    assert "%" not in src.split("return kiln_err")[0], src
