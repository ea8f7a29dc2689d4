"""torch._prims_common's dtype helpers fold on constant dtypes (type promotion in one graph)."""

import torch
from torch._prims_common import (
    ELEMENTWISE_TYPE_PROMOTION_KIND,
    dtype_to_type,
    elementwise_dtypes,
    get_higher_dtype,
)

import kiln


def _promoted(x, y):
    compute, result = elementwise_dtypes(
        x, y, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT
    )
    return (x.to(compute) + y.to(compute)).to(result)


def _as_float(x):
    compute, _ = elementwise_dtypes(
        x, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.INT_TO_FLOAT
    )
    return x.to(compute) / 2


def _python_type(x):
    if dtype_to_type(x.dtype) is float:
        return x * 2
    return x + 1


def test_elementwise_dtypes_in_one_graph():
    a, b = torch.randn(3, dtype=torch.float16), torch.randn(3)
    out = kiln.compile(_promoted, fullgraph=True)(a, b)
    ref = _promoted(a, b)
    assert out.dtype == ref.dtype == torch.float32
    torch.testing.assert_close(out, ref)
    i = torch.tensor([1, 2, 3])
    torch.testing.assert_close(kiln.compile(_as_float, fullgraph=True)(i), _as_float(i))


def test_dtype_to_type_compares_with_the_builtin():
    f = kiln.compile(_python_type, fullgraph=True)
    torch.testing.assert_close(f(torch.ones(2)), torch.full((2,), 2.0))
    torch.testing.assert_close(f(torch.ones(2, dtype=torch.int64)), torch.full((2,), 2))


def test_higher_dtype_of_constants():
    def f(x):
        return x.to(get_higher_dtype(torch.int32, torch.float16))

    assert kiln.compile(f, fullgraph=True)(torch.ones(2)).dtype == torch.float16
