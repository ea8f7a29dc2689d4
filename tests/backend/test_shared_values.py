"""A pointwise value with several consumers is computed once when one consumer needs it in memory."""

import re

import torch

from tests.backend.helpers import check


def _reduction_reads(c):
    """The buffers the reduction kernel reads (its const pointer arguments)."""
    kernels = re.split(r'extern "C" int ', c.cpp_src)[1:]
    (red,) = [k for k in kernels if "acc0" in k]
    return re.findall(r"const float\* __restrict__ (\w+)", red.split("{")[0])


def test_cat_read_by_mm_and_sum_is_computed_once():
    a, b, w = torch.randn(8, 16), torch.randn(8, 16), torch.randn(32, 4)

    def f(a, b, w):
        c = torch.cat([a * 2, b + 1], 1)
        return c @ w, c.sum(0)

    c = check(f, [a, b, w], expect_kernels=2)  # the cat, then the sum reading its buffer
    assert _reduction_reads(c) == ["buf0"]


def test_stacked_grads_feeding_mm_and_bias_sum_computed_once():
    q, k, v = (torch.randn(2, 4, 8, 16) for _ in range(3))
    w = torch.randn(192, 5)

    def f(q, k, v, w):
        s = torch.stack([q, k, v]).permute(1, 3, 0, 2, 4).reshape(16, 192)
        return s @ w, s.sum(0)

    c = check(f, [q, k, v, w], expect_kernels=2)
    assert _reduction_reads(c) == ["buf0"]


def test_a_view_is_not_a_consumer():
    """`clone(x.permute())` feeding a matmul: the expensive x (a transcendental) has one reader,
    the clone, so it is computed straight into the clone's layout: one kernel, not x then a copy."""
    x, w = torch.randn(4, 16, 8), torch.randn(64, 5)

    def f(x, w):
        y = (x.exp() * 2 + x.sin()).permute(1, 0, 2).contiguous().view(16, 32)
        return (y.view(16, 32).t().contiguous().t() @ w[:32],)

    check(f, [x, w], expect_kernels=1)


def test_two_readers_through_views_still_share_one_buffer():
    x = torch.randn(8, 32)

    def f(x):
        e = x.exp()
        return e.t().sum(0), e.view(4, 64).sum(1)

    c = check(f, [x], expect_kernels=2)  # e and one sum, then the other sum reads e's buffer
    (second,) = [k for k in re.split(r'extern "C" int ', c.cpp_src)[1:] if "kernel1" in k[:10]]
    assert "const float* __restrict__ buf1" in second and "exp" not in second
