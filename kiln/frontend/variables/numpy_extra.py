"""np.meshgrid, np.fft.fftshift and np.linalg.norm as torch ops (rows of numpy_vars' table of
numpy functions, Note [NumPy: arrays as tensors])."""

import numpy as np
import torch

from kiln.exc import unimplemented
from kiln.frontend.variables.lists import TupleVariable
from kiln.frontend.variables.numpy_vars import (
    NumpyNdarrayVariable,
    _array,
    _cast,
    _name,
    _t,
    register_handlers,
)


def _arrays(fn, args):
    if not args or not all(isinstance(a, NumpyNdarrayVariable) for a in args):
        unimplemented(f"{_name(fn)} of values that are not numpy arrays")
    return args


def _constant_kw(fn, kwargs, allowed):
    if set(kwargs) - set(allowed) or not all(v.is_python_constant() for v in kwargs.values()):
        unimplemented(f"{_name(fn)} with keywords {sorted(kwargs)}")
    return {k: kwargs[k].as_python_constant() if k in kwargs else d for k, d in allowed.items()}


def _meshgrid(tx, fn, args, kwargs):
    """`np.meshgrid(x, y)`: each input flattened, broadcast to the grid and copied (its dtype)."""
    kw = _constant_kw(fn, kwargs, {"indexing": "xy", "copy": True, "sparse": False})
    if kw["indexing"] not in ("xy", "ij") or kw["sparse"] or kw["copy"] is not True:
        unimplemented(f"{_name(fn)} with {kw}")
    arrays = _arrays(fn, args)
    n = len(arrays)
    shaped = []
    for i, a in enumerate(arrays):
        axis = i
        if kw["indexing"] == "xy" and n > 1 and i < 2:
            axis = 1 - i  # (the first two axes swap: x varies along columns)
        shape = tuple(-1 if d == axis else 1 for d in range(n))
        shaped.append(_t(tx, torch.reshape, [a.tensor, shape]))
    grids = _t(tx, torch.broadcast_tensors, shaped)
    return TupleVariable([_array(_t(tx, torch.clone, [g])) for g in grids.unpack_var_sequence(tx)])


def _fftshift(tx, fn, args, kwargs):
    """`np.fft.fftshift(a, axes)`: the zero frequency moved to the centre (a copy, same dtype)."""
    kw = _constant_kw(fn, kwargs, {"axes": None})
    if len(args) == 2 and args[1].is_python_constant():
        kw["axes"] = args[1].as_python_constant()
    elif len(args) != 1:
        unimplemented(f"{_name(fn)} with these arguments")
    (a,) = _arrays(fn, args[:1])
    dims = kw["axes"]
    if dims is not None and not isinstance(dims, int):
        dims = tuple(dims)
    return _array(_t(tx, torch.fft.fftshift, [a.tensor], {"dim": dims}))


def _norm(tx, fn, args, kwargs):
    """`np.linalg.norm(a, axis=...)` with the default order: sqrt of the sum of squares (of
    |a|² for complex), computed as NumPy does in the array's float dtype (float64 for others)."""
    kw = _constant_kw(fn, kwargs, {"ord": None, "axis": None, "keepdims": False})
    if len(args) != 1 or kw["ord"] is not None:
        unimplemented(f"{_name(fn)} with these arguments")
    (a,) = _arrays(fn, args)
    t = a.tensor
    if t.example.dtype.is_complex:
        t = _t(tx, torch.abs, [t])
    elif not t.example.dtype.is_floating_point:
        t = _cast(tx, t, torch.float64)
    axis = kw["axis"]
    if isinstance(axis, tuple) and len(axis) != 1:
        unimplemented(f"{_name(fn)} of a matrix norm (axis={axis})")
    dims = None if axis is None else (axis if isinstance(axis, int) else axis[0])
    squares = _t(tx, torch.mul, [t, t])
    if dims is None:
        total = _t(tx, torch.sum, [squares])
        if kw["keepdims"]:
            total = _t(tx, torch.reshape, [total, (1,) * a.ndim])
    else:
        total = _t(tx, torch.sum, [squares], {"dim": dims, "keepdim": kw["keepdims"]})
    out = _array(_t(tx, torch.sqrt, [total]))
    if out.ndim == 0:
        out.scalar = True  # (a norm over all axes is a NumPy scalar)
    return out


register_handlers(
    {
        np.meshgrid: _meshgrid,
        np.fft.fftshift: _fftshift,
        np.linalg.norm: _norm,
    }
)
