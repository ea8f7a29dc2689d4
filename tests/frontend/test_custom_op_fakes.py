"""Custom operators without a fake kernel whose result follows from the schema
(Note [Custom ops: results that follow from the schema])."""

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln


@pytest.fixture
def add_into_op():
    with torch.library._scoped_library("kiln_test_fakes", "FRAGMENT") as lib:
        lib.define("add_into(Tensor x, Tensor[] ys, Tensor(a!)? out, SymInt w) -> ()")

        @kiln.disable
        def add_into(x, ys, out, w):
            if out is not None:
                out.add_(x + ys[0] * w)

        lib.impl("add_into", add_into, "CPU")
        yield torch.ops.kiln_test_fakes.add_into


def test_custom_op_returning_nothing_needs_no_fake(add_into_op):
    def f(x, ys, out):
        r = add_into_op(x, ys, out, 2)
        return r, out * 3

    x, ys, out = torch.randn(3), (torch.randn(3), torch.randn(3)), torch.randn(3)
    run_and_compare(f, x, ys, out, fullgraph=True, expected_graphs=1)
    # AOT cannot functionalise the write of an op it has no fake for: the graph runs as traced
    run_and_compare(f, x, ys, out, backend="aot_eager", fullgraph=True, expected_graphs=1)


def test_custom_op_returning_a_tensor_without_fake_still_breaks():
    with torch.library._scoped_library("kiln_test_fakes2", "FRAGMENT") as lib:
        lib.define("double(Tensor x) -> Tensor")
        lib.impl("double", lambda x: x * 2, "CPU")

        def f(x):
            return torch.ops.kiln_test_fakes2.double(x) + 1

        run_and_compare(f, torch.randn(3), expected_breaks=1)
