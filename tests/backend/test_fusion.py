"""Fusion: how many kernels a graph becomes, and which buffers stay in registers."""

import torch
import torch.nn.functional as F

from tests.backend.helpers import check


def test_pointwise_chain_is_one_kernel():
    x, y = torch.randn(64, 33), torch.randn(33)
    c = check(lambda x, y: ((x * 2 + y).relu().sigmoid() - x / 3,), [x, y], expect_kernels=1)
    assert c.cpp_src.count("empty_strided") == 0
    assert c.wrapper_src.count("empty_strided(") == 1  # only the output is allocated


def test_softmax_one_kernel_output_only():
    x = torch.randn(32, 100)
    c = check(lambda x: (x.softmax(-1),), [x], expect_kernels=1)
    assert c.wrapper_src.count("empty_strided(") == 1


def test_log_softmax_one_kernel():
    check(lambda x: (F.log_softmax(x, 1),), [torch.randn(8, 50)], expect_kernels=1)


def test_layer_norm_one_kernel():
    x, w, b = torch.randn(16, 64), torch.randn(64), torch.randn(64)
    c = check(
        lambda x, w, b: (F.layer_norm(x, (64,), w, b),),
        [x, w, b],
        expect_kernels=1,
        atol=1e-5,
        rtol=1e-5,
    )
    assert c.wrapper_src.count("empty_strided(") == 1


def test_gelu_mlp_bias_gelu_fused_between_matmuls():
    x, w1, b1, w2, b2 = (
        torch.randn(8, 16),
        torch.randn(32, 16),
        torch.randn(32),
        torch.randn(16, 32),
        torch.randn(16),
    )

    def mlp(x, w1, b1, w2, b2):
        return (F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2),)

    c = check(mlp, [x, w1, b1, w2, b2], atol=1e-5, rtol=1e-5)
    # two addmm/mm externs; GELU fused with nothing else to write: at most one pointwise kernel
    assert c.kernel_count <= 1, c.wrapper_src


def test_horizontal_reductions_share_a_pass():
    x = torch.randn(16, 40)
    c = check(lambda x: (x.sum(1), x.amax(1), (x * x).sum(1)), [x], expect_kernels=1)
    assert c.cpp_src.count("for (int64_t r0") == 1


def test_dead_code_is_eliminated():
    x = torch.randn(10, 10)

    def f(x):
        unused = x.exp().sum(0)  # noqa: F841
        return (x + 1,)

    c = check(f, [x], expect_kernels=1)
    assert "std::exp" not in c.cpp_src


def test_intermediate_freed_early():
    x, w = torch.randn(8, 8), torch.randn(8, 8)
    c = check(lambda x, w: ((x.relu() @ w).sum(0),), [x, w])
    assert "del buf" in c.wrapper_src


def test_column_reduction_is_blocked_and_vectorized():
    x = torch.randn(300, 70)
    x[3, 5] = float("nan")
    c = check(
        lambda x: (x.sum(0), x.amax(0), (x > 0).all(0), x.prod(0)),
        [x],
        expect_kernels=1,
        atol=1e-5,
        rtol=1e-5,
    )
    assert "ob +=" in c.cpp_src


def test_buffers_are_reused():
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(16, 16, generator=g) / 4, torch.randn(16, 16, generator=g) / 4

    def f(x, w):
        a = (x.relu() @ w).exp()
        b = (a @ w).sin()
        return ((b @ w) * 2,)

    c = check(f, [x, w], atol=1e-4, rtol=1e-4)
    assert "; del buf" in c.wrapper_src, c.wrapper_src


def test_views_returned_by_aten_calls_are_never_reused():
    x = torch.randn(6, 6)

    def f(x):
        d = torch.ops.aten.as_strided.default(x, (6,), (1,))  # an ATen call: a view of x
        y = d.sin().view(1, 6) + 1
        z = (y @ torch.ones(6, 6)).view(6).cos()  # same size as d: a reuse candidate
        return (z * 2,)

    x0 = x.clone()
    c = check(f, [x], atol=1e-5, rtol=1e-5)
    c(x)
    torch.testing.assert_close(x, x0, rtol=0, atol=0)


def test_softmax_exp_computed_once_and_output_written_in_place():
    x = torch.randn(32, 100)
    c = check(lambda x: (x.softmax(-1),), [x], expect_kernels=1)
    body = c.cpp_src.split('extern "C" int kernel0')[1]
    assert body.count("kiln_expf(") + body.count("kiln_vexp(") == 1  # inline or Sleef exp
    assert c.wrapper_src.count("empty_strided(") == 1
    assert "written in place" in c.wrapper_src


def test_keepdim_row_statistics_fuse_with_their_rows():
    x = torch.randn(64, 128)

    def rms(x):
        y = torch.tanh(x)
        return (y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6),)

    check(rms, [x], expect_kernels=1, atol=1e-5, rtol=1e-5)
