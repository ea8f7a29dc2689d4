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
