"""np.meshgrid, np.fft.fftshift and np.linalg.norm traced as torch ops match NumPy's results."""

import numpy as np
import pytest
import torch

import kiln
from kiln.exc import Unsupported
from tests.frontend.variables.test_numpy import np_same


def _full(fn, *args):
    kiln.reset()
    return kiln.compile(fn, backend="eager", fullgraph=True)(*args)


def test_meshgrid_keeps_each_dtype_and_copies():
    def fn(x, y, z):
        a, b, c = x.numpy(), y.numpy(), z.numpy()
        g = np.meshgrid(a, b, c)
        g[0][0, 0, 0] = 100  # (a copy: the input is untouched)
        return g, np.meshgrid(a, b, indexing="ij"), np.meshgrid(b), a

    x = torch.arange(3, dtype=torch.float32)
    y = torch.arange(4, dtype=torch.int64).reshape(2, 2)
    z = torch.tensor([1.5, 2.5], dtype=torch.float64)
    np_same(fn(x.clone(), y, z), _full(fn, x, y, z))


def test_fftshift_over_all_or_some_axes():
    def fn(x):
        a = x.numpy()
        return np.fft.fftshift(a), np.fft.fftshift(a, axes=1), np.fft.fftshift(a, axes=(0,))

    np_same(fn(torch.arange(15).reshape(3, 5)), _full(fn, torch.arange(15).reshape(3, 5)))


def test_norm_default_order():
    def fn(x, n):
        a, b = x.numpy(), n.numpy()
        return (
            np.linalg.norm(a),
            np.linalg.norm(a, axis=0),
            np.linalg.norm(a, axis=1, keepdims=True),
            np.linalg.norm(a, keepdims=True),
            np.linalg.norm(b, axis=-1),
        )

    x = torch.tensor([[3.0, 4.0], [1.0, -2.0]], dtype=torch.float32)
    n = torch.tensor([[1, 2, 2], [0, 3, 4]])
    np_same(fn(x, n), _full(fn, x, n))


def test_norm_of_another_order_breaks():
    def fn(x):
        return np.linalg.norm(x.numpy(), ord=1)

    with pytest.raises(Unsupported):
        _full(fn, torch.ones(3))
