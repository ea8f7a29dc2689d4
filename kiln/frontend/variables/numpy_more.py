"""np.take_along_axis, np.nan_to_num, np.array of arrays, scalar types called (np.float32(x)) and
numpy's dtype queries as torch ops or folded constants (rows of numpy_vars' table of numpy
functions, Note [NumPy: arrays as tensors])."""

import numpy as np
import torch

from kiln.exc import unimplemented
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.lists import BaseListVariable, TupleVariable
from kiln.frontend.variables.numpy_vars import (
    SCALAR_TYPE_CALL,
    NumpyConstVariable,
    NumpyNdarrayVariable,
    _array,
    _cast,
    _dtype_arg,
    _name,
    _probe,
    _probe_value,
    _t,
    check_sym_ints,
    register_handlers,
    torch_dtype,
)
from kiln.frontend.variables.sym import SymNodeVariable


def _take_along_axis(tx, fn, args, kwargs):
    """`np.take_along_axis(a, i, axis)`: torch.take_along_dim, negative indices counted from
    the end first (NumPy indexes with them; gather would raise)."""
    names = ("arr", "indices", "axis")
    if len(args) + len(kwargs) != 3 or set(kwargs) - set(names[len(args) :]):
        unimplemented(f"{_name(fn)} with these arguments")
    a, idx, axis = [*args, *(kwargs[n] for n in names[len(args) :])]
    if not (isinstance(a, NumpyNdarrayVariable) and isinstance(idx, NumpyNdarrayVariable)):
        unimplemented(f"{_name(fn)} of values that are not numpy arrays")
    if not (axis.is_python_constant() or isinstance(axis, SymNodeVariable)):
        unimplemented(f"{_name(fn)} with an axis that is not a constant")
    dim = axis.as_python_constant()  # (an int input made dynamic: specialised, a guard)
    ranks_match = idx.ndim == 1 if dim is None else idx.ndim == a.ndim and -a.ndim <= dim < a.ndim
    if idx.np_dtype.kind not in "iu" or not ranks_match or a.scalar or idx.scalar:
        unimplemented(f"{_name(fn)} of these arrays (NumPy raises)")
    t = a.tensor
    if dim is None:
        t, dim = _t(tx, torch.flatten, [t]), 0
    size = t.size_var(tx, dim)
    i = idx.tensor
    negative = _t(tx, torch.lt, [i, 0])
    i = _t(tx, torch.where, [negative, _t(tx, torch.add, [i, size]), i])
    return _array(_t(tx, torch.take_along_dim, [t, i, dim]))


def _nan_to_num(tx, fn, args, kwargs):
    """`np.nan_to_num(a, nan=, posinf=, neginf=)` of an array: torch.nan_to_num (a copy; each of
    the real and imaginary parts of a complex array, as NumPy)."""
    names = ("x", "copy", "nan", "posinf", "neginf")
    given = dict(zip(names, args))
    if len(args) > len(names) or set(kwargs) - set(names[len(args) :]):
        unimplemented(f"{_name(fn)} with these arguments")
    given.update(kwargs)
    a = given.pop("x")
    if not isinstance(a, NumpyNdarrayVariable):
        unimplemented(f"{_name(fn)} of {a}")
    if not all(v.is_python_constant() for v in given.values()):
        unimplemented(f"{_name(fn)} with keywords that are not constants")
    kw = {k: v.as_python_constant() for k, v in given.items()}
    if kw.pop("copy", True) is not True:
        unimplemented(f"{_name(fn)} with copy=False (it writes into the array)")
    if any(type(v) not in (int, float) for v in kw.values() if v is not None):
        unimplemented(f"{_name(fn)} with a replacement that is not a real number")
    kw.setdefault("nan", 0.0)
    t = a.tensor
    if not (t.example.dtype.is_floating_point or t.example.dtype.is_complex):
        out = _t(tx, torch.clone, [t])  # (an integer or bool array has no NaN: a copy)
    else:
        out = _t(tx, torch.nan_to_num, [t], kw)
    return _array(out, scalar=a.scalar)


def _element_tensor(tx, v, dtype):
    """An element of `np.array([...])` (an array, a number or a nested list) as a tensor."""
    if isinstance(v, NumpyNdarrayVariable):
        return _cast(tx, v.tensor, dtype)
    if isinstance(v, BaseListVariable):
        return _t(
            tx, torch.stack, [TupleVariable([_element_tensor(tx, i, dtype) for i in v.items])]
        )
    if v.is_python_constant() and type(v.as_python_constant()) in (bool, int, float, complex):
        return _t(tx, torch.full, [(), v.as_python_constant()], {"dtype": dtype})
    unimplemented(f"np.array of an element {v}")


def array_of_arrays(tx, fn, seq, kwargs):
    """`np.array([a, b])` of arrays (and numbers): one array stacking them, in the dtype NumPy
    gives on the stand-ins (an error there, e.g. ragged ranks, is a break)."""
    probe = _probe(fn, [seq], kwargs)
    if probe.dtype == np.dtype(object):
        unimplemented(f"{_name(fn)} of {seq} gives an object array")
    dtype = torch_dtype(probe.dtype)
    out = _element_tensor(tx, seq, dtype)
    if out.example.dim() != probe.ndim:
        unimplemented(f"{_name(fn)} of {seq}: nested lists of another depth than the result's")
    return _array(out)


# Note [NumPy: dtype queries folded]
# `np.issubdtype(type(n), np.integer)`, `np.result_type(a, 1.0)`: questions about dtypes, whose
# answers depend on the dtypes and ranks of arrays, never on their data. NumPy answers them on
# the stand-ins of the arrays (Note [NumPy: arrays as tensors]) while tracing; the dtypes and
# ranks are guarded with the arrays, so the answer is a constant of the graph.
_DTYPE_QUERIES = (np.issubdtype, np.result_type, np.promote_types, np.can_cast, np.isscalar)


def _dtype_query(tx, fn, args, kwargs):
    """A dtype question answered on the stand-ins (Note [NumPy: dtype queries folded])."""
    if fn is np.isscalar and isinstance(args[0], NumpyNdarrayVariable):
        return ConstantVariable(args[0].scalar)  # (a NumPy scalar is one; a 0-d array is not)
    pargs = [_query_value(a) for a in args]
    pkwargs = {k: _query_value(v) for k, v in kwargs.items()}
    try:
        value = fn(*pargs, **pkwargs)
    except Exception as e:
        unimplemented(f"{_name(fn)} raised {type(e).__name__} while tracing: {e}")
    if isinstance(value, np.dtype):
        return NumpyConstVariable(value)
    if type(value) in (bool, np.bool_):
        return ConstantVariable(bool(value))
    unimplemented(f"{_name(fn)} gave {type(value).__name__}")


def _query_value(v):
    if isinstance(v, NumpyConstVariable):
        return v.value
    value = getattr(v, "value", None)
    if isinstance(value, type):  # (a class: int, float, np.float32)
        return value
    if isinstance(v, NumpyNdarrayVariable) or v.is_python_constant():
        return _probe_value(v)
    return _dtype_arg(v)


def scalar_type_call(tx, scalar_type, args, kwargs):
    """`np.float32(x)`: of a number, that NumPy scalar (made while tracing; NumPy's error, an
    overflow, is a break); of an array, the array cast to the type (a NumPy scalar for a 0-d
    one, as NumPy); of a symbolic int, a 0-d cast where any int64 value computes as NumPy."""
    if not issubclass(scalar_type, np.generic) or kwargs or len(args) > 1:
        unimplemented(f"call of {scalar_type.__name__} with these arguments")
    dtype = torch_dtype(scalar_type)
    v = args[0] if args else ConstantVariable(0)
    if isinstance(v, NumpyNdarrayVariable):
        scalar = v.scalar or v.ndim == 0
        return _array(_cast(tx, v.tensor, dtype, copy=True), scalar=scalar)
    if v.is_python_constant() and type(v.as_python_constant()) in (bool, int, float, complex):
        try:
            value = scalar_type(v.as_python_constant())
        except Exception as e:
            unimplemented(f"{scalar_type.__name__}() raised {type(e).__name__}: {e}")
        out = _array(_t(tx, torch.full, [(), value.item()], {"dtype": dtype}), scalar=True)
        out.constant = value.item()  # (next to a tensor, torch takes it as this Python number)
        return out
    if isinstance(v, SymNodeVariable) and v.value.kind == "int":
        check_sym_ints(scalar_type, None, [v], np.dtype(scalar_type))
        return _array(_t(tx, torch.full, [(), v], {"dtype": dtype}), scalar=True)
    unimplemented(f"{scalar_type.__name__}() of {v}")


SCALAR_TYPE_CALL.append(scalar_type_call)
register_handlers(
    {
        np.take_along_axis: _take_along_axis,
        np.nan_to_num: _nan_to_num,
        **dict.fromkeys(_DTYPE_QUERIES, _dtype_query),
    }
)
