"""A matmul whose reduction has length 1 is a pointwise product, fused with its users (Note
[Matmuls: outer products]): per-sample gradients' bmm of [B, m, 1] by [B, 1, n]."""

import pytest
import torch
from helpers import check


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_bmm_with_k_one_is_one_fused_kernel(dtype):
    a, b = torch.randn(4, 5, 1, dtype=dtype), torch.randn(4, 1, 6, dtype=dtype)
    c = check(lambda a, b: ((torch.bmm(a, b) * 2).relu(),), [a, b], expect_kernels=1)
    assert "bmm" not in c.wrapper_src, c.wrapper_src


def test_mm_with_k_one_and_strided_operands():
    a = torch.randn(1, 5).t()  # (a column view: stride 1 along m)
    b = torch.randn(7, 1).t()
    c = check(lambda a, b: (torch.mm(a, b) + 1,), [a, b], expect_kernels=1)
    assert "aten.mm" not in c.wrapper_src, c.wrapper_src


def test_k_above_one_stays_a_matmul():
    a, b = torch.randn(4, 5, 2), torch.randn(4, 2, 6)
    c = check(lambda a, b: (torch.bmm(a, b),), [a, b])
    assert "aten.bmm.out" in c.wrapper_src, c.wrapper_src
