"""np.finfo / np.iinfo / np.dtype fold on constants and guard as inputs; ndarray strides, imag,
real (Note [NumPy: info objects and dtypes as constants])."""

import numpy as np
import pytest
import torch

import kiln
from kiln.exc import Unsupported
from tests.frontend.frontend_helpers import CountingBackend
from tests.frontend.variables.test_numpy import np_same


def _full(fn, *args):
    kiln.reset()
    return kiln.compile(fn, backend="eager", fullgraph=True)(*args)


def test_info_of_a_constant_dtype_folds():
    def fn(x):
        lo = np.finfo(np.float32).min
        hi = np.iinfo(np.int16).max
        return x + lo, x + hi, lo, hi, np.finfo("float64").eps, np.iinfo(np.int8).bits

    x = torch.arange(3, dtype=torch.float32)
    np_same(fn(x), _full(fn, x))


def test_np_dtype_call_folds():
    def fn(x):
        dt = np.dtype("float")
        return np.full_like(x, 1.5, dtype=dt), dt, np.ones_like(x, dtype=np.int32)

    x = torch.ones(2, 3)
    expected, got = fn(x), _full(fn, x)
    np_same(expected, got)
    assert got[1] is np.dtype("float")


@pytest.mark.parametrize("kind, info", [(float, np.finfo), (int, np.iinfo)])
def test_dtype_input_is_guarded(kind, info):
    def fn(a, dt):
        return a + info(dt).max

    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(fn, backend=backend)
    a = torch.zeros(2, dtype=torch.float64 if kind is float else torch.int64)
    same = [np.dtype(kind), np.ones(1, dtype=kind).dtype, np.dtype(np.dtype(kind).name)]
    for dt in same:
        torch.testing.assert_close(compiled(a, dt), fn(a, dt))
    assert backend.calls == 1
    other = np.dtype(np.float16 if kind is float else np.int16)
    torch.testing.assert_close(compiled(a, other), fn(a, other))
    assert backend.calls == 2


def test_info_input_is_guarded_by_its_dtype():
    def fn(a, inf):
        return a + inf.max, inf

    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(fn, backend=backend)
    a = torch.zeros(2, dtype=torch.int64)
    for inf in (np.iinfo(np.int64), np.iinfo(int), np.iinfo(np.int8), np.iinfo(np.int64)):
        expected, got = fn(a, inf), compiled(a, inf)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1] is inf
    assert backend.calls == 2


def test_strides_imag_real_of_an_input_array():
    def fn(x):
        a = x.numpy()
        return a.strides, a.itemsize, a.imag, a.real, torch.from_numpy(a.imag.copy())

    for x in (torch.ones(2, 3), torch.ones(3, 2, dtype=torch.float64).t()):
        expected, got = fn(x), _full(fn, x)
        np_same(expected, got)
        assert got[2].flags.writeable == expected[2].flags.writeable


def test_imag_real_of_a_complex_array_are_views():
    def fn(x):
        a = x.numpy()
        a.imag[0] = 5.0
        a.real[1] = -1.0
        return a.imag * 2, a.real

    x = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64)
    y = x.clone()
    np_same(fn(x), _full(fn, y))
    torch.testing.assert_close(x, y)


def test_writing_the_imag_of_a_real_array_breaks():
    def fn(x):
        a = x.numpy()
        a.imag[0] = 1.0
        return a

    with pytest.raises(ValueError):
        fn(torch.ones(2))
    with pytest.raises(Unsupported):
        _full(fn, torch.ones(2))


def test_strides_of_a_computed_array_break():
    def fn(x):
        return (x.numpy() + 1).strides

    with pytest.raises(Unsupported):
        _full(fn, torch.ones(2, 2))


def test_numpy_function_and_scalar_type_inputs_are_guarded():
    def fn(x, f, t):
        return f(x.numpy()).astype(t)

    kiln.reset()
    compiled = kiln.compile(fn, backend="eager")
    x = torch.tensor([0.5, 1.0])
    for f, t in ((np.sin, np.float32), (np.cos, np.float32), (np.cos, np.float64)):
        np_same(fn(x, f, t), compiled(x, f, t))
