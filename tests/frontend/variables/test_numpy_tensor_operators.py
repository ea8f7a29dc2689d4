"""A tensor and an ndarray in one operator: torch's operator on the array's tensor where eager
runs it, a break where eager does something else (Note [NumPy: an ndarray next to a tensor])."""

import operator

import numpy as np
import pytest
import torch

import kiln
from tests.frontend.frontend_helpers import CountingBackend, assert_same
from tests.frontend.variables.test_numpy import np_same

pytestmark = pytest.mark.filterwarnings("ignore:__array_wrap__:DeprecationWarning")


def run_and_compare(fn, *args, expected_graphs, expected_breaks=0):
    """Eager and compiled (twice) on the same arrays and fresh tensors: outputs or errors,
    the tensors after the call, and the counts."""
    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(fn, backend=backend)

    def run(f):
        fresh = [a.clone() if isinstance(a, torch.Tensor) else a.copy() for a in args]
        try:
            return f(*fresh), None, fresh
        except Exception as e:
            return None, e, fresh

    expected, expected_exc, expected_args = run(fn)
    for _ in range(2):
        got, got_exc, got_args = run(compiled)
        if expected_exc is not None:
            assert type(got_exc) is type(expected_exc) and str(got_exc) == str(expected_exc)
        else:
            assert got_exc is None, got_exc
            if isinstance(expected, tuple) and any(type(v) is np.float64 for v in expected):
                np_same(expected, got)
            else:
                assert_same(expected, got)
        for e, g in zip(expected_args, got_args):
            np_same(e, g, "args")
    assert backend.calls == expected_graphs
    assert kiln.counters["stats"].get("graph_breaks", 0) == expected_breaks


TENSOR_FIRST = [
    operator.add,
    operator.sub,
    operator.mul,
    operator.truediv,
    operator.floordiv,
    operator.mod,
    operator.pow,
    operator.matmul,
    operator.iadd,
    operator.imul,
    operator.itruediv,
]


def _op_fn(op):
    def fn(a, b):
        return op(a, b)

    return fn


@pytest.mark.parametrize("op", TENSOR_FIRST, ids=lambda op: op.__name__)
@pytest.mark.parametrize("array_dtype", [np.float32, np.float64])
def test_tensor_then_array_is_one_graph(op, array_dtype):
    t = torch.rand(5) + 0.5
    a = (np.random.rand(5) + 0.5).astype(array_dtype)
    if op is operator.matmul and array_dtype is np.float64:
        pytest.skip("covered by test_matmul_of_two_dtypes_runs_as_python")
    run_and_compare(_op_fn(op), t, a, expected_graphs=1)


def test_inplace_operator_rebinds_not_writes():
    def fn(t, a):
        u = t
        t += a
        return t, u, t is u

    run_and_compare(fn, torch.rand(4), np.ones(4), expected_graphs=1)


def test_array_then_tensor_truediv_is_one_graph():
    # NumPy's operator defers to Tensor.__rtruediv__: a float64 tensor
    run_and_compare(
        _op_fn(operator.truediv), np.random.rand(3) + 1, torch.rand(3) + 1, expected_graphs=1
    )


@pytest.mark.parametrize("op", [operator.add, operator.pow, operator.lt])
def test_what_eager_refuses_is_the_same_error(op):
    # `ndarray + tensor` raises TypeError in eager (NumPy 2); `tensor < ndarray` too
    args = (np.random.rand(3), torch.rand(3))
    if op is operator.lt:
        args = args[::-1]
    run_and_compare(_op_fn(op), *args, expected_graphs=0, expected_breaks=1)


def test_matmul_of_two_dtypes_runs_as_python():
    # torch's matmul refuses float32 @ float64; eager gets NumPy's product wrapped as a tensor
    run_and_compare(
        _op_fn(operator.matmul),
        torch.rand(3, 3),
        np.random.rand(3, 3),
        expected_graphs=0,
        expected_breaks=1,
    )


def test_a_tensor_that_requires_grad_runs_as_python():
    # NumPy cannot read a tensor that requires grad: eager raises, so does the compiled call
    run_and_compare(
        _op_fn(operator.mul),
        torch.rand(3, requires_grad=True),
        np.random.rand(3),
        expected_graphs=0,
        expected_breaks=1,
    )


def test_result_feeds_more_tensor_ops():
    def fn(t, a):
        return (t * a + 1).sum(0), a.sum()

    run_and_compare(fn, torch.rand(2, 3), np.random.rand(2, 3), expected_graphs=1)


def test_array_inplace_divided_by_tensor_rebinds_to_a_tensor():
    # `a /= t` is `a = t.__rtruediv__(a)`: a new tensor, the array untouched; `a += t` raises
    def fn(a, t):
        b = a
        a /= t
        return a, b is a

    run_and_compare(fn, np.random.rand(3) + 1, torch.rand(3) + 1, expected_graphs=1)


def test_array_inplace_plus_tensor_is_the_same_error():
    def fn(a, t):
        a += t
        return a

    run_and_compare(fn, np.random.rand(3), torch.rand(3), expected_graphs=0, expected_breaks=1)
