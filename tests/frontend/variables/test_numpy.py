"""NumPy in compiled code, traced as torch ops (Note [NumPy: arrays as tensors]): results equal
NumPy's own, with the same types and dtypes."""

import numpy as np
import pytest
import torch

import kiln
from kiln.exc import Unsupported
from tests.frontend.frontend_helpers import CountingBackend

BACKENDS = ["eager", "aot_eager", "kiln"]


def np_same(expected, got, path="out"):
    """Same Python type, same dtype and shape, values equal to NumPy's (assert_allclose)."""
    assert type(got) is type(expected), f"{path}: {type(got).__name__} != {type(expected).__name__}"
    if isinstance(expected, (np.ndarray, np.generic)):
        assert got.dtype == expected.dtype, f"{path}: dtype {got.dtype} != {expected.dtype}"
        assert np.shape(got) == np.shape(expected), path
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6, err_msg=path)
    elif isinstance(expected, (tuple, list)):
        assert len(got) == len(expected), path
        for i, (e, g) in enumerate(zip(expected, got)):
            np_same(e, g, f"{path}[{i}]")
    elif isinstance(expected, torch.Tensor):
        torch.testing.assert_close(got, expected)
    else:
        assert got == expected, f"{path}: {got!r} != {expected!r}"


def check(fn, *args, backend="eager", graphs=1):
    """fn compiled (fullgraph) equals fn run by NumPy, twice; `graphs` graphs made."""
    kiln.reset()
    counting = CountingBackend() if backend == "eager" else backend
    compiled = kiln.compile(fn, backend=counting, fullgraph=True)
    for _ in range(2):
        np_same(fn(*args), compiled(*args))
    if graphs is not None:
        assert kiln.counters["stats"]["unique_graphs"] == graphs
    return counting


A = np.arange(12, dtype=np.int64).reshape(3, 4)
F32 = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
F64 = np.random.default_rng(0).standard_normal((3, 4))


@pytest.mark.parametrize("backend", BACKENDS)
def test_ufuncs_and_reductions_every_backend(backend):
    def fn(a, b):
        c = np.exp(b) * 2 + np.sin(a)  # int64 -> float64 (NumPy's rule, not torch's float32)
        return c, np.sum(c, axis=1), np.mean(a), c.max(), np.argmax(b, axis=0)

    check(fn, A, F64, backend=backend)


@pytest.mark.parametrize(
    "fn",
    [
        lambda a: a / 2,  # int / int: float64
        lambda a: a // 3,
        lambda a: a % 5,
        lambda a: a**2,
        lambda a: -a,
        lambda a: a + 1.5,  # NEP 50: float64 from an int64 array and a Python float
        lambda a: a.astype(np.int32) + 1,  # stays int32
        lambda a: a.astype(np.float32) * 2.0,  # stays float32
        lambda a: a.astype(np.int32) * a.astype(np.float32),  # float64 in NumPy
        lambda a: a > 5,
        lambda a: (a > 2) & (a < 9),
        lambda a: np.maximum(a, 4),
        lambda a: np.minimum(a.astype(np.float32), 2.5),
        lambda a: np.sqrt(a),
        lambda a: np.where(a > 5, a, -1.0),
        lambda a: np.clip(a, 2, 8),
        lambda a: np.abs(a - 6),
        lambda a: np.logical_not(a > 3),
        lambda a: np.isnan(a.astype(np.float64) / 0),
    ],
)
def test_elementwise_dtype_rules(fn):
    check(fn, A)


@pytest.mark.parametrize(
    "fn",
    [
        lambda a: np.sum(a),  # a NumPy scalar (int64)
        lambda a: a.sum(axis=0, keepdims=True),
        lambda a: np.sum(a.astype(np.int32), axis=1),  # int64 in NumPy
        lambda a: np.mean(a, axis=(0, 1)),
        lambda a: a.prod(axis=1),
        lambda a: np.std(a, ddof=1),
        lambda a: a.var(axis=0),
        lambda a: np.min(a, axis=1),
        lambda a: np.argmin(a),
        lambda a: np.any(a > 10),
        lambda a: np.all(a >= 0, axis=0),
        lambda a: np.cumsum(a, axis=1),
        lambda a: np.cumsum(a),
        lambda a: a.mean(),
    ],
)
def test_reductions(fn):
    check(fn, A)


@pytest.mark.parametrize(
    "fn",
    [
        lambda a, b: a.T,
        lambda a, b: a.reshape(4, 3),
        lambda a, b: np.reshape(a, (2, -1)),
        lambda a, b: np.transpose(a, (1, 0)),
        lambda a, b: np.concatenate([a, b], axis=0),  # int64 and float32: float64
        lambda a, b: np.concatenate((a, a), axis=None),
        lambda a, b: np.stack([b, b], axis=1),
        lambda a, b: np.expand_dims(a, 0),
        lambda a, b: np.squeeze(a[None]),
        lambda a, b: a.flatten(),
        lambda a, b: np.ravel(b),
        lambda a, b: np.dot(a, b.T),
        lambda a, b: a @ b.T,
        lambda a, b: np.matmul(b, a.T.astype(np.float32)),
        lambda a, b: np.dot(a[0], a[1]),  # a NumPy scalar
        lambda a, b: (a[1], a[1, 2], a[:, 1:3], a[..., 0]),
        lambda a, b: a.copy(),
    ],
)
def test_shapes_and_linear_algebra(fn):
    check(fn, A, F32)


@pytest.mark.parametrize(
    "fn",
    [
        lambda a: a + np.zeros((3, 4)),  # float64 by default
        lambda a: a + np.ones(4, dtype=np.int32),
        lambda a: a * np.full((3, 4), 2),  # int64
        lambda a: a + np.arange(4),  # int64
        lambda a: a + np.arange(0.0, 2.0, 0.5),  # float64
        lambda a: a + np.linspace(0, 1, 4),
        lambda a: a[:3, :3] @ np.eye(3),
        lambda a: np.zeros_like(a) + np.ones_like(a, dtype=np.float32),
        lambda a: np.array([1, 2, 3, 4]) * a,
        lambda a: np.asarray(a) + np.array(a, dtype=np.float32),
    ],
)
def test_factories(fn):
    check(fn, A)


def test_attributes_are_constants():
    def fn(a, b):
        return a.shape, a.ndim, a.size, a.dtype, b.dtype, len(a), a.itemsize

    check(fn, A, F32, graphs=0)


def test_dtype_comparisons_and_iteration():
    def fn(a, b):
        out = [row.sum() for row in a] + [v * 2 for v in b[0]]
        return out, a.dtype == np.int64, b.dtype != np.float32, a.dtype == b.dtype

    check(fn, A, F32)


def test_tensor_numpy_and_from_numpy():
    def fn(t, a):
        x = t.numpy() * 2  # float32 ndarray
        y = torch.from_numpy(a) + t.sum()  # float64 tensor + float32 0-d: float64 (torch's rule)
        return x, y, torch.as_tensor(a).shape, torch.tensor(a) * 3

    check(fn, torch.arange(4.0), np.ones(4))


def test_array_input_returned_is_the_same_object():
    def fn(a):
        return a, a * 2

    out = kiln.compile(fn, backend="eager", fullgraph=True)(F64)
    assert out[0] is F64


def test_guards_recompile_on_dtype_and_shape():
    def fn(a):
        return a * 2

    backend = check(fn, A)
    compiled = kiln.compile(fn, backend=backend, fullgraph=True)
    np_same(fn(F32), compiled(F32))
    np_same(fn(F64[:2]), compiled(F64[:2]))
    assert kiln.counters["stats"]["unique_graphs"] == 3


def test_read_only_array_is_not_written():
    def fn(a):
        return a * 2

    kiln.reset()
    compiled = kiln.compile(fn, backend="eager")
    np_same(fn(A), compiled(A.copy()))
    frozen = A.copy()
    frozen.flags.writeable = False  # a guard fails: the frame runs in Python (a break)
    np_same(fn(frozen), compiled(frozen))
    assert kiln.counters["stats"]["unique_graphs"] == 1


def test_setitem_and_inplace_on_an_input_array():
    def fn(a):
        a[0] = 7
        a += 1
        a *= 2
        return a.sum()

    kiln.reset()
    compiled = kiln.compile(fn, backend="eager", fullgraph=True)
    x, y = A.copy(), A.copy()
    np_same(fn(x), compiled(y))
    np_same(x, y)


def test_numpy_scalar_results_are_numpy_scalars():
    def fn(a):
        s = np.sum(a)
        return s, s * 2.0, np.exp(a[0, 0]), a.max()

    check(fn, F32)


@pytest.mark.parametrize("backend", BACKENDS)
def test_mixed_with_torch(backend):
    def fn(t, a):
        n = np.tanh(a).astype(np.float32)
        return t * torch.from_numpy(n), n.mean()

    check(fn, torch.randn(3, 4), F64, backend=backend)


def test_unknown_numpy_function_is_a_named_break():
    def fn(a):
        return np.fft.fft(a)

    with pytest.raises(Unsupported, match="numpy function np.fft is not traced"):
        kiln.compile(fn, backend="eager", fullgraph=True)(F64)
    kiln.reset()
    np.testing.assert_allclose(kiln.compile(fn, backend="eager")(F64), fn(F64))


def test_dtype_errors_are_numpys():
    def fn(a):
        b = a.copy()
        b += 1.5  # int64 += float: NumPy raises (same_kind casting)
        return b

    with pytest.raises(Unsupported, match="in-place"):
        kiln.compile(fn, backend="eager", fullgraph=True)(A)
    kiln.reset()
    with pytest.raises(TypeError, match="Cannot cast ufunc 'add' output"):
        kiln.compile(fn, backend="eager")(A)


def test_reading_array_data_breaks():
    def fn(a):
        if a.sum() > 3:
            return a + 1
        return a - 1

    kiln.reset()
    with pytest.raises(Unsupported, match="numpy array"):
        kiln.compile(fn, backend="eager", fullgraph=True)(A)
    kiln.reset()
    np_same(fn(A), kiln.compile(fn, backend="eager")(A))


def test_numpy_scalar_with_a_tensor():
    def fn(t, a):
        return np.sum(a) * t, t - a.max(), np.add(1, 2) + t

    check(fn, torch.randn(3), A)


def test_arrays_cross_a_graph_break():
    def fn(a):
        b = np.exp(a) + 1
        print("between the graphs")
        return np.log(b) * 2, b

    kiln.reset()
    compiled = kiln.compile(fn, backend="eager")
    np_same(fn(F64), compiled(F64))
    assert kiln.counters["stats"]["graph_breaks"] == 1
    assert kiln.counters["stats"]["unique_graphs"] == 2
