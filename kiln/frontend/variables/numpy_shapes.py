"""NumPy shape functions, factories and linear algebra as torch ops: the rows of numpy_vars'
table of numpy functions that need a handler of their own (Note [NumPy: arrays as tensors])."""

import numpy as np
import torch

from kiln.exc import unimplemented
from kiln.frontend.variables import numpy_more
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.lists import BaseListVariable, TupleVariable
from kiln.frontend.variables.numpy_vars import (
    NumpyNdarrayVariable,
    _array,
    _as_tensor,
    _cast,
    _dtype_arg,
    _name,
    _probe,
    _probe_value,
    _t,
    check_sym_ints,
    register_handlers,
    sym_ints_probed,
    tensor_numpy,
    torch_dtype,
)
from kiln.frontend.variables.sym import SymNodeVariable
from kiln.frontend.variables.tensor import TensorVariable


def _arrays_dtype(items):
    return torch_dtype(np.result_type(*[_probe_value(i) for i in items]))


def _reshape(tx, fn, args, kwargs):
    a, shape = args[0], args[1] if len(args) > 1 else kwargs.get("newshape", kwargs.get("shape"))
    if set(kwargs) - {"newshape", "shape"} or shape is None:
        unimplemented(f"{_name(fn)} with these arguments")
    return _array(_t(tx, torch.reshape, [a.tensor, shape]))


def _transpose(tx, fn, args, kwargs):
    a = args[0]
    axes = args[1] if len(args) > 1 else kwargs.get("axes")
    if axes is None or (axes.is_python_constant() and axes.as_python_constant() is None):
        perm = list(reversed(range(a.ndim)))
    else:
        perm = list(axes.as_python_constant())
    return _array(_t(tx, torch.permute, [a.tensor, perm]))


def _joined(tx, fn, args, kwargs, torch_fn):
    seq = args[0]
    axis = args[1] if len(args) > 1 else kwargs.get("axis", ConstantVariable(0))
    if not isinstance(seq, BaseListVariable) or set(kwargs) - {"axis"}:
        unimplemented(f"{_name(fn)} with these arguments")
    items = list(seq.items)
    if not all(isinstance(i, NumpyNdarrayVariable) for i in items):
        unimplemented(f"{_name(fn)} of values that are not arrays")
    _probe(fn, [seq], {"axis": axis} if torch_fn is torch.cat else {})
    dt = _arrays_dtype(items)
    tensors = [_cast(tx, i.tensor, dt) for i in items]
    ax = axis.as_python_constant()
    if ax is None:
        tensors, ax = [_t(tx, torch.flatten, [t]) for t in tensors], 0
    return _array(_t(tx, torch_fn, [TupleVariable(tensors), ax]))


def _where(tx, fn, args, kwargs):
    if len(args) != 3 or kwargs:
        unimplemented("np.where with one argument (a data-dependent shape)")
    out_dtype = _probe(fn, sym_ints_probed(args), {}).dtype
    check_sym_ints(fn, torch.where, args, out_dtype)
    out = torch_dtype(out_dtype)
    c = _as_tensor(tx, args[0], torch.bool)
    return _array(
        _t(tx, torch.where, [c, _as_tensor(tx, args[1], out), _as_tensor(tx, args[2], out)])
    )


def _clip(tx, fn, args, kwargs):
    if kwargs or len(args) != 3:
        unimplemented("np.clip with these arguments")
    out = torch_dtype(_probe(fn, args, {}).dtype)
    bounds = [
        None
        if b.is_python_constant() and b.as_python_constant() is None
        else _as_tensor(tx, b, out)
        for b in args[1:]
    ]
    return _array(_t(tx, torch.clamp, [_cast(tx, args[0].tensor, out), *bounds]))


def _matmul(tx, fn, args, kwargs):
    a, b = args
    if kwargs or not all(isinstance(v, NumpyNdarrayVariable) for v in args):
        unimplemented(f"{_name(fn)} with these arguments")
    if fn is np.dot and (a.ndim > 2 or b.ndim > 2 or a.ndim == 0 or b.ndim == 0):
        unimplemented("np.dot of arrays that are not vectors or matrices")
    out = torch_dtype(_probe(fn, args, {}).dtype)
    result = _t(tx, torch.matmul, [_cast(tx, a.tensor, out), _cast(tx, b.tensor, out)])
    return _array(result, scalar=result.example.dim() == 0)


def _shape_arg(v):
    """A factory's shape: symbolic sizes stay symbolic (np.ones([2, n]) of an int input n)."""
    if isinstance(v, SymNodeVariable):
        return TupleVariable([v])
    if isinstance(v, BaseListVariable) and any(isinstance(i, SymNodeVariable) for i in v.items):
        if all(isinstance(i, (SymNodeVariable, ConstantVariable)) for i in v.items):
            return TupleVariable(list(v.items))
    shape = v.as_python_constant()
    return (shape,) if isinstance(shape, int) else tuple(shape)


def _factory(torch_fn):
    def make(tx, fn, args, kwargs):
        if set(kwargs) - {"dtype"} or len(args) > 2:
            unimplemented(f"{_name(fn)} with these arguments")
        dtype = args[1] if len(args) > 1 else kwargs.get("dtype")
        probe_kwargs = {} if dtype is None else {"dtype": dtype}
        np_dtype = _probe(fn, [ConstantVariable(())], probe_kwargs).dtype
        shape = _shape_arg(args[0])
        return _array(_t(tx, torch_fn, [shape], {"dtype": torch_dtype(np_dtype)}))

    return make


def _full(tx, fn, args, kwargs):
    if set(kwargs) - {"dtype"} or len(args) > 3:
        unimplemented("np.full with these arguments")
    dtype = args[2] if len(args) > 2 else kwargs.get("dtype")
    np_dtype = _probe(
        fn, [ConstantVariable(()), args[1]], {} if dtype is None else {"dtype": dtype}
    ).dtype
    fill = args[1].as_python_constant()
    return _array(_t(tx, torch.full, [_shape_arg(args[0]), fill], {"dtype": torch_dtype(np_dtype)}))


def _like(torch_fn):
    def make(tx, fn, args, kwargs):
        if args and isinstance(args[0], TensorVariable):
            # `np.ones_like(t)`: NumPy reads the tensor through its __array__ (t.numpy())
            args = [tensor_numpy(tx, args[0], [], {}), *args[1:]]
        if set(kwargs) - {"dtype"} or not isinstance(args[0], NumpyNdarrayVariable):
            unimplemented(f"{_name(fn)} with these arguments")
        np_dtype = _probe(fn, args, kwargs).dtype
        rest = [a.as_python_constant() for a in args[1:]]
        return _array(_t(tx, torch_fn, [args[0].tensor, *rest], {"dtype": torch_dtype(np_dtype)}))

    return make


def _arange(tx, fn, args, kwargs):
    if set(kwargs) - {"dtype", "step", "start", "stop"}:
        unimplemented("np.arange with these arguments")
    values = [a.as_python_constant() for a in args]
    kw = {k: v for k, v in kwargs.items() if k != "dtype"}
    values += [v.as_python_constant() for v in kw.values()]
    if not all(isinstance(v, (int, float)) for v in values):
        unimplemented("np.arange of values that are not Python numbers")
    dtype = kwargs.get("dtype")
    np_dtype = np.result_type(*values) if dtype is None else _dtype_arg(dtype)
    consts = [ConstantVariable(a.as_python_constant()) for a in args]
    kw = {k: ConstantVariable(v.as_python_constant()) for k, v in kw.items()}
    return _array(_t(tx, torch.arange, consts, {**kw, "dtype": torch_dtype(np_dtype)}))


def _linspace(tx, fn, args, kwargs):
    if set(kwargs) - {"num", "dtype"} or len(args) > 3:
        unimplemented("np.linspace with these arguments")
    start, stop = args[0].as_python_constant(), args[1].as_python_constant()
    num = (
        args[2] if len(args) > 2 else kwargs.get("num", ConstantVariable(50))
    ).as_python_constant()
    dtype = np.dtype(np.float64) if "dtype" not in kwargs else _dtype_arg(kwargs["dtype"])
    out = _t(tx, torch.linspace, [start, stop, num], {"dtype": torch.float64})
    return _array(_cast(tx, out, torch_dtype(dtype)))


def _eye(tx, fn, args, kwargs):
    if set(kwargs) - {"dtype", "M"} or len(args) > 2:
        unimplemented("np.eye with these arguments")
    n = args[0].as_python_constant()
    m = (args[1] if len(args) > 1 else kwargs.get("M", ConstantVariable(None))).as_python_constant()
    dtype = np.dtype(np.float64) if "dtype" not in kwargs else _dtype_arg(kwargs["dtype"])
    return _array(_t(tx, torch.eye, [n, n if m is None else m], {"dtype": torch_dtype(dtype)}))


def _asarray(tx, fn, args, kwargs):
    if set(kwargs) - {"dtype"} or len(args) != 1:
        unimplemented(f"{_name(fn)} with these arguments")
    v = args[0]
    copy = fn is np.array
    if isinstance(v, NumpyNdarrayVariable):
        dt = (
            torch_dtype(_dtype_arg(kwargs["dtype"]))
            if "dtype" in kwargs
            else v.tensor.example.dtype
        )
        return _array(_cast(tx, v.tensor, dt, copy=copy))
    if v.is_python_constant():
        value = np.asarray(
            v.as_python_constant(), dtype=_dtype_arg(kwargs["dtype"]) if "dtype" in kwargs else None
        )
        return _array(_t(tx, torch.tensor, [value.tolist()], {"dtype": torch_dtype(value.dtype)}))
    if isinstance(v, BaseListVariable):
        return numpy_more.array_of_arrays(tx, fn, v, kwargs)
    unimplemented(f"{_name(fn)} of {v}")


def _unary_shape(torch_name):
    def op(tx, fn, args, kwargs):
        a = args[0]
        if not isinstance(a, NumpyNdarrayVariable):
            unimplemented(f"{_name(fn)} of {a}")
        if torch_name == "squeeze":
            axis = args[1] if len(args) > 1 else kwargs.get("axis")
            if axis is None:
                return _array(_t(tx, torch.squeeze, [a.tensor]))
            return _array(_t(tx, torch.squeeze, [a.tensor, axis]))
        if torch_name == "unsqueeze":
            axis = args[1] if len(args) > 1 else kwargs["axis"]
            return _array(_t(tx, torch.unsqueeze, [a.tensor, axis]))
        return _array(_t(tx, torch.flatten, [a.tensor]))  # ravel

    return op


# numpy function -> handler(tx, fn, args, kwargs)
_OTHER = {
    np.reshape: _reshape,
    np.transpose: _transpose,
    np.concatenate: lambda tx, fn, a, k: _joined(tx, fn, a, k, torch.cat),
    np.stack: lambda tx, fn, a, k: _joined(tx, fn, a, k, torch.stack),
    np.where: _where,
    np.clip: _clip,
    np.dot: _matmul,
    np.matmul: _matmul,
    np.zeros: _factory(torch.zeros),
    np.ones: _factory(torch.ones),
    np.empty: _factory(torch.zeros),  # (uninitialised in NumPy: zeros are one of its values)
    np.full: _full,
    np.zeros_like: _like(torch.zeros_like),
    np.ones_like: _like(torch.ones_like),
    np.empty_like: _like(torch.zeros_like),
    np.full_like: _like(torch.full_like),
    np.arange: _arange,
    np.linspace: _linspace,
    np.eye: _eye,
    np.array: _asarray,
    np.asarray: _asarray,
    np.squeeze: _unary_shape("squeeze"),
    np.expand_dims: _unary_shape("unsqueeze"),
    np.ravel: _unary_shape("flatten"),
}


def register():
    """Put this module's rows into numpy_vars' table (builder.py calls it once)."""
    register_handlers(_OTHER)
