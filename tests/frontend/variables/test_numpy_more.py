"""np.take_along_axis, np.nan_to_num, np.array of arrays, dtype queries, ndarray.tolist() and a
symbolic int next to an array, compiled, match NumPy run eagerly."""

import numpy as np
import pytest
import torch

import kiln
from kiln.exc import Unsupported
from tests.frontend.variables.test_numpy import check, np_same


def _full(fn, **kw):
    kiln.reset()
    return kiln.compile(fn, backend="eager", fullgraph=True, **kw)


def test_take_along_axis_with_negative_indices_and_no_axis():
    def fn(a, i, j):
        return (
            np.take_along_axis(a, i, 1),
            np.take_along_axis(a, i[:, :1], -1),
            np.take_along_axis(a, j, None),
            np.take_along_axis(a, np.argmax(a, axis=0)[None, :], axis=0),
        )

    a = np.array([[3.0, 1.0, 2.0], [0.5, 4.0, -1.0]], dtype=np.float32)
    i = np.array([[0, -1], [2, -3]])
    check(fn, a, i, np.array([5, -1, 0]))


def test_take_along_axis_of_mismatched_ranks_breaks():
    def fn(a, i):
        return np.take_along_axis(a, i, 0)

    with pytest.raises(Unsupported, match="take_along_axis of these arrays"):
        _full(fn)(np.ones((2, 3)), np.zeros(2, dtype=np.int64))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.int64])
def test_nan_to_num_each_dtype(dtype):
    def fn(a):
        return np.nan_to_num(a), np.nan_to_num(a, nan=-1.0, posinf=7.0), np.nan_to_num(a, True, 2)

    values = [np.nan, np.inf, -np.inf, 1.5] if dtype != np.int64 else [1, 2, 3, 4]
    a = np.array(values).astype(dtype)
    if dtype == np.complex64:
        a.imag = [np.inf, np.nan, 0, 1]
    check(fn, a)
    assert not np.isnan(a).all() or dtype == np.int64  # (the input kept its NaNs: a copy)


def test_array_of_scalars_arrays_and_numbers():
    def fn(x, y, a, b):
        return (
            np.array([x, y]),
            np.array([a, b]),
            np.asarray([x, 2.5]),
            np.array([[x, y], [y, x]], dtype=np.float32),
            np.array([a, b + 1, a * 2]),
        )

    check(fn, np.float64(1), np.float64(2), np.arange(2), np.arange(2) + 2)
    check(fn, np.int32(1), np.int32(-3), np.ones(3, np.float32), np.zeros(3, np.float32))


def test_array_of_ragged_arrays_breaks():
    def fn(a, b):
        return np.array([a, b])

    with pytest.raises(Unsupported, match="np.array raised ValueError"):
        _full(fn)(np.ones(2), np.ones((2, 2)))


def test_tolist_of_arrays_and_scalars(monkeypatch):
    monkeypatch.setattr(kiln.config, "capture_scalar_outputs", True)

    def fn(a, f):
        return a.tolist(), a[1].tolist(), (f * 2).tolist(), f.sum().tolist()

    check(fn, np.arange(5), np.array([[0.5, 1.5], [2.0, 3.0]], dtype=np.float32))
    got = kiln.compile(fn, backend="eager", fullgraph=True)(np.arange(3), np.ones((1, 1)))
    assert [type(v) for v in got[0]] == [int, int, int] and type(got[3]) is float


def test_dtype_queries_fold_to_constants():
    def fn(x, n, a):
        return (
            np.issubdtype(type(n), np.integer) + x,
            np.issubdtype(a.dtype, np.floating),
            np.result_type(a, 1.0),
            np.promote_types(a.dtype, np.int64),
            np.can_cast(a, np.float64),
            np.isscalar(a),
            np.isscalar(a.sum()),
        )

    x = torch.randn(4)
    for a in (np.ones(3, np.float32), np.ones(3, np.int16)):
        kiln.reset()
        compiled = kiln.compile(fn, backend="eager", fullgraph=True)
        np_same(fn(x, 4096, a), compiled(x, 4096, a))


def test_symbolic_int_next_to_arrays_one_graph():
    def fn(x, n, s):
        return x * n, n - x, np.where(x > 1, n, x), x + (s - n), s * n

    kiln.reset()
    compiled = kiln.compile(fn, backend="eager", fullgraph=True, dynamic=True)
    for x, n in ((np.arange(4.0), 3), (np.arange(4, dtype=np.float32), 5), (np.arange(3), 9)):
        for s in (np.int64(7), np.int64(-2)):
            np_same(fn(x, n, s), compiled(x, n, s))
    assert kiln.counters["stats"]["unique_graphs"] == 3  # (one per dtype, none per value)


def test_symbolic_int_next_to_a_narrow_int_array_breaks():
    def fn(a, n):
        return a + n  # (int8 + 1000 raises OverflowError in NumPy)

    with pytest.raises(Unsupported, match="symbolic int"):
        _full(fn, dynamic=True)(np.ones(3, np.int8), 3)


def test_a_method_not_traced_breaks_at_its_call():
    def fn(x):
        x += 1
        z = x.tobytes()  # (a graph break at the call: a graph on each side)
        x += 1
        return z, x.sum()

    a, b = np.array([1, 2]), np.array([1, 2])
    kiln.reset()
    compiled = kiln.compile(fn, backend="eager")
    np_same(fn(a), compiled(b))
    np_same(a, b)
    assert kiln.counters["stats"]["unique_graphs"] == 2


def test_take_along_axis_of_an_axis_that_changes():
    def fn(a, i, axis):
        return np.take_along_axis(a, i, axis)

    kiln.reset()
    compiled = kiln.compile(fn, backend="eager", fullgraph=True)
    a = np.arange(12.0).reshape(3, 4)
    for axis, i in ((0, np.array([[2, 0, 1, -1]])), (1, np.array([[3], [0], [-2]]))):
        np_same(fn(a, i, axis), compiled(a, i, axis))  # (the axis, dynamic later, specialised)


def test_scalar_types_called():
    def fn(x, a, s):
        return (
            np.float32(2) * x,
            np.float32(2) * a,
            np.int64(a.sum()),
            np.float32(a),
            np.float64(s),
            np.float32(),
            np.int8(3) + a.astype(np.int8),
            np.complex64(1.5),
        )

    x = torch.ones(2, dtype=torch.float64)
    check(fn, x, np.arange(3), np.float32(1.5))


def test_scalar_type_of_a_symbolic_int_and_an_overflow():
    def fn(a, n):
        return np.float64(n) * a, np.int64(n) + 1

    compiled = _full(fn, dynamic=True)
    for n in (5, 7, -3):
        np_same(fn(np.arange(3.0), n), compiled(np.arange(3.0), n))
    assert kiln.counters["stats"]["unique_graphs"] == 1

    def overflow(a):
        return np.int8(1000) + a  # (OverflowError in NumPy)

    with pytest.raises(Unsupported, match="int8\\(\\) raised OverflowError"):
        _full(overflow)(np.arange(3, dtype=np.int8))


def test_scalar_type_of_an_array_dtype():
    def fn(a):
        return a.dtype.type(3) * a, a.dtype.type(a.sum())

    check(fn, np.arange(3, dtype=np.float32))
    check(fn, np.arange(3, dtype=np.int16))
