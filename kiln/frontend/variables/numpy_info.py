"""NumPy's constant records (np.finfo, np.iinfo, np.dtype) and ndarray layout attributes.

Note [NumPy: info objects and dtypes as constants]
`np.finfo(np.float32)`, `np.iinfo(dt)` and `np.dtype("float")` depend only on their arguments:
with constant arguments (literals, numpy dtypes and scalar types) they are called while tracing
and the result is a constant. A dtype input is guarded by its type and equality (`np.dtype(float)`
and `np.ones(1).dtype` are the same constant, `np.dtype(np.float16)` is not); an finfo/iinfo
input by its type and its dtype (what all of its attributes are computed from). A NumPy scalar
attribute (`finfo.max`, an np.float32) is a 0-d constant of the graph with NumPy's scalar type
(Note [NumPy: scalar inputs]), so `t + info.max` and returning it behave as in eager.
"""

import numpy as np
import torch

from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.source import AttrSource
from kiln.frontend.variables.base import VariableTracker
from kiln.frontend.variables.constant import ConstantVariable, is_literal
from kiln.frontend.variables.lists import TupleVariable
from kiln.frontend.variables.numpy_vars import (
    _ATTRS,
    NumpyConstVariable,
    NumpyFunctionVariable,
    NumpyNdarrayVariable,
    NumpyObjectVariable,
    _t,
    torch_dtype,
)

_INFO_TYPES = (np.finfo, np.iinfo)
_CLASSES = (np.finfo, np.iinfo, np.dtype)


def special(value):
    """A tracker for np.finfo / np.iinfo / np.dtype or an info object; else None."""
    if any(value is c for c in _CLASSES):
        return NumpyInfoClassVariable(value)
    if type(value) in _INFO_TYPES:
        return NumpyInfoVariable(value)
    return None


def guard_input(tx, value, special, source):
    """Guard numpy's tracker `special` of `value` read from `source`, which it then loads from: a
    dtype by equality, an info object by its dtype, a function or scalar type by identity."""
    kinds = (NumpyConstVariable, NumpyFunctionVariable, NumpyInfoClassVariable, NumpyInfoVariable)
    if not isinstance(special, kinds) or special.source is not None:
        return
    guards = tx.output.guards
    if isinstance(value, np.dtype):
        guards.add(GuardKind.CONSTANT_MATCH, source, value)
    elif type(value) in _INFO_TYPES:
        guards.add(GuardKind.TYPE_MATCH, source, type(value))
        guards.add(GuardKind.CONSTANT_MATCH, AttrSource(source, "dtype"), value.dtype)
    else:
        guards.add(GuardKind.ID_MATCH, source, value)
    special.source = source


def _constant(v, what):
    """An argument of np.finfo/np.iinfo/np.dtype: a literal, numpy dtype or scalar type, or a
    Python number type (anything else could run code of its own when numpy converts it)."""
    if isinstance(v, NumpyConstVariable):
        return v.value
    if isinstance(v, VariableTracker) and v.is_python_constant():
        value = v.as_python_constant()
        if is_literal(value) or value in (int, float, complex, bool):
            return value
    unimplemented(f"{what} of a value kiln does not fold ({v})")


class NumpyInfoClassVariable(NumpyObjectVariable):
    """np.finfo, np.iinfo or np.dtype: called on constants, folded."""

    def call_function(self, tx, args, kwargs):
        name = f"np.{self.value.__name__}"
        cargs = [_constant(a, name) for a in args]
        ckw = {k: _constant(v, name) for k, v in kwargs.items()}
        try:
            result = self.value(*cargs, **ckw)
        except Exception as e:
            unimplemented(f"{name}(...) raised {type(e).__name__}: {e}")
        if isinstance(result, np.dtype):
            return NumpyConstVariable(result)
        return NumpyInfoVariable(result)

    def __repr__(self):
        return f"NumpyInfoClassVariable({self.value.__name__})"


class NumpyInfoVariable(NumpyObjectVariable):
    """An np.finfo / np.iinfo object (a constant, or an input guarded by its dtype)."""

    def var_getattr(self, tx, name):
        try:
            value = getattr(self.value, name)
        except AttributeError:
            unimplemented(f"{type(self.value).__name__} has no attribute {name!r}")
        return numpy_constant(tx, value, f"attribute {name!r} of {type(self.value).__name__}")

    def __repr__(self):
        return f"NumpyInfoVariable({self.value!r})"


def numpy_constant(tx, value, what):
    """A constant of numpy's (literal, dtype, NumPy scalar) as a VariableTracker."""
    if is_literal(value):
        return ConstantVariable(value)
    if isinstance(value, np.dtype):
        return NumpyConstVariable(value)
    if isinstance(value, np.generic) and np.ndim(value) == 0:
        dt = torch_dtype(value.dtype)
        out = NumpyNdarrayVariable(
            _t(tx, torch.full, [(), value.item()], {"dtype": dt}), scalar=True
        )
        out.constant = value.item()  # (next to a tensor, torch takes it as this Python number)
        return out
    unimplemented(f"{what} is a {type(value).__name__}")


# --- ndarray attributes ----------------------------------------------------------------------------
def strides(tx, array):
    """`a.strides`: torch's strides times the item size, for an array that is an input or an input
    tensor's `.numpy()` (a computed array's layout is the compiled code's, not NumPy's)."""
    t = array.tensor
    if t.source is None and array.source is None:
        unimplemented("ndarray.strides of a computed array (its layout is not NumPy's)")
    if t.is_symbolic():
        unimplemented("ndarray.strides of an array with symbolic sizes")
    itemsize = array.np_dtype.itemsize
    return TupleVariable([ConstantVariable(s * itemsize) for s in t.example.stride()])


def imag(tx, array):
    """`a.imag`: the imaginary part (a view) of a complex array; zeros of a real one."""
    t = array.tensor
    if t.example.dtype.is_complex:
        return NumpyNdarrayVariable(_t(tx, torch.imag, [t]), scalar=array.scalar)
    zeros = NumpyNdarrayVariable(_t(tx, torch.zeros_like, [t]), scalar=array.scalar)
    zeros.readonly = True  # (NumPy's zeros of a real array's `imag` are not writeable)
    return zeros


def real(tx, array):
    """`a.real`: the real part of a complex array, a view of a real one (both share memory)."""
    t = array.tensor
    if t.example.dtype.is_complex:
        return NumpyNdarrayVariable(_t(tx, torch.real, [t]), scalar=array.scalar)
    return NumpyNdarrayVariable(t.call_method(tx, "view_as", [t], {}), scalar=array.scalar)


_ATTRS.update({"strides": strides, "imag": imag, "real": real})
