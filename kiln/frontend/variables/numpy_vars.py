"""NumPy in traced code: an ndarray is a tensor of the graph, a numpy call is torch ops.

Note [NumPy: arrays as tensors]
Inside a compiled function, as torch.compile does:

- an `np.ndarray` input is a graph input `torch.from_numpy(arr)` (same memory; guarded by type,
  dtype, shape and strides like a tensor: kiln.frontend.source.NumpyTensorSource);
- an ndarray made inside is a tensor node held by a NumpyNdarrayVariable; the transformed code
  turns the graph's output back into an ndarray (`t.numpy()`), or into a NumPy scalar where
  NumPy returns one (a full reduction, a ufunc of 0-d values, `a[i, j]`);
- each numpy function is one row of the tables below: the torch op that computes it and how its
  result dtype is found. NumPy's dtype rules hold, not torch's (float64 by default, int64 sums,
  int / int is float64, NEP 50 promotion with Python scalars): the result dtype is what NumPy
  itself gives on a one-element probe (`np.ones((1,) * ndim, dtype)` per array, the Python
  scalars as they are), the torch op computes in that dtype (inputs cast first), so the values
  equal NumPy's. An error of the probe (a bad axis, an overflowing scalar, integers to a
  negative power) is a graph break: NumPy then raises it itself;
- a numpy function without a row, or an argument kiln does not model, is a graph break that
  names it; so is anything that reads array data into Python (`float(a.sum())`, `if a.any()`).
- `torch.from_numpy(a)` / `torch.as_tensor(a)` is the array's tensor (same memory, as eagerly),
  `torch.tensor(a)` a copy; `t.numpy()` an ndarray of the tensor;
- a NumPy scalar input is a 0-d graph input (Note [NumPy: scalar inputs] in numpy_scalars.py).
"""

import operator
import warnings

import numpy as np
import torch

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.source import AttrSource, NumpyTensorSource
from kiln.frontend.variables import tensor as tensor_vars
from kiln.frontend.variables import torch as torch_vars
from kiln.frontend.variables.base import BoundMethodVariable, PythonValueVariable, VariableTracker
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.lists import BaseListVariable, TupleVariable
from kiln.frontend.variables.sym import SymNodeVariable

TensorVariable = tensor_vars.TensorVariable

_DTYPES = {
    np.dtype(np.bool_): torch.bool,
    np.dtype(np.uint8): torch.uint8,
    np.dtype(np.int8): torch.int8,
    np.dtype(np.int16): torch.int16,
    np.dtype(np.int32): torch.int32,
    np.dtype(np.int64): torch.int64,
    np.dtype(np.float16): torch.float16,
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float64,
    np.dtype(np.complex64): torch.complex64,
    np.dtype(np.complex128): torch.complex128,
}
_NP_OF = {v: k for k, v in _DTYPES.items()}
DTYPES = tuple(_DTYPES)  # the numpy dtypes torch has


def torch_dtype(np_dtype):
    """The torch dtype of a numpy dtype (a graph break for one torch lacks)."""
    dt = _DTYPES.get(np.dtype(np_dtype))
    if dt is None:
        unimplemented(f"numpy dtype {np.dtype(np_dtype)} (no torch dtype)")
    return dt


def is_numpy_array(value):
    return type(value) is np.ndarray


def wrap_array(tx, value, source):
    """An ndarray input: the graph input `torch.from_numpy(value)` (Note [NumPy: arrays as tensors])."""
    if np.dtype(value.dtype) not in _DTYPES:
        unimplemented(f"numpy array of dtype {value.dtype}")
    if not value.flags.writeable or any(s < 0 or s % value.itemsize for s in value.strides):
        unimplemented("a read-only numpy array or one with negative strides")
    tx.output.guards.add(GuardKind.TYPE_MATCH, source, np.ndarray)
    flags = AttrSource(AttrSource(source, "flags"), "writeable")
    tx.output.guards.add(GuardKind.CONSTANT_MATCH, flags, True)  # (the graph may write into it)
    prev = tx.output.array_inputs.get(id(value))
    if prev is not None:  # the same array read again (under another name): the same input
        if prev[2] != source:
            tx.output.guards.add(GuardKind.ALIASING, source, prev[2])
        return NumpyNdarrayVariable(prev[1], source=source)
    tensor = tx.output.add_graph_input(torch.from_numpy(value), NumpyTensorSource(source))
    tx.output.array_inputs[id(value)] = (value, tensor, source)
    return NumpyNdarrayVariable(tensor, source=source)


class NumpyNdarrayVariable(VariableTracker):
    """An ndarray (or a NumPy scalar when `scalar`) whose data is a tensor of the graph."""

    keeps_identity = True  # rebuilt once: a local and an argument on the stack are one ndarray

    def __init__(self, tensor, scalar=False, **kw):
        super().__init__(**kw)
        self.tensor = tensor
        self.scalar = scalar

    @property
    def np_dtype(self):
        return _NP_OF[self.tensor.example.dtype]

    @property
    def ndim(self):
        return self.tensor.example.dim()

    def python_type(self):
        return self.np_dtype.type if self.scalar else np.ndarray

    def truthy(self, tx):
        unimplemented("bool() of a numpy array reads its data")

    def probe(self):
        """A one-element stand-in with this value's dtype (Note [NumPy: arrays as tensors])."""
        arr = np.ones((1,) * self.ndim, dtype=self.np_dtype)
        return arr[()] if self.scalar else arr

    def var_getattr(self, tx, name):
        if name == "shape":
            return TupleVariable(list(self.tensor.size_var(tx).items))
        if name == "ndim":
            return ConstantVariable(self.ndim)
        if name == "dtype":
            return NumpyConstVariable(self.np_dtype)
        if name == "size":
            return self.tensor.numel_var(tx)
        if name == "itemsize":
            return ConstantVariable(self.np_dtype.itemsize)
        if name == "T":
            return call(tx, np.transpose, [self], {})
        if name in _ATTRS:  # (strides, imag, real: numpy_info.py)
            return _ATTRS[name](tx, self)
        if name in _METHODS:
            return BoundMethodVariable(self, name)
        if not name.startswith("_") and callable(getattr(np.ndarray, name, None)):
            # another method (a.tobytes): bound here, so the call breaks, where a graph break
            # can resume, rather than the attribute load
            return BoundMethodVariable(self, name)
        unimplemented(f"ndarray attribute {name!r}")

    def call_method(self, tx, name, args, kwargs):
        if name == "__getitem__":
            return self._getitem(tx, args[0])
        if name == "__setitem__":
            return self._setitem(tx, args[0], args[1])
        if name == "__len__":
            if self.ndim == 0:
                unimplemented("len() of a 0-d array")
            return self.tensor.size_var(tx, 0)
        if name == "astype":
            dt = torch_dtype(_dtype_arg(args[0] if args else kwargs["dtype"]))
            if set(kwargs) - {"dtype"}:
                unimplemented(f"ndarray.astype keywords {sorted(kwargs)}")
            return _array(_cast(tx, self.tensor, dt, copy=True), scalar=self.scalar)
        if name == "copy" and not args and not kwargs:
            return _array(_t(tx, torch.clone, [self.tensor]), scalar=self.scalar)
        if name in ("reshape", "transpose") and len(args) > 1:
            args = [TupleVariable(list(args))]  # a.reshape(2, 3), a.transpose(1, 0)
        if name == "tolist" and not args and not kwargs:  # (Python numbers, as Tensor.tolist)
            return self.tensor.call_method(tx, "tolist", [], {})
        if name in ("flatten", "ravel") and not args and not kwargs:
            return _array(_t(tx, torch.flatten, [_t(tx, torch.clone, [self.tensor])]))
        fn = _METHODS.get(name)
        if fn is None:
            unimplemented(f"ndarray.{name}() is not traced")
        return call(tx, fn, [self, *args], kwargs)

    def unpack_var_sequence(self, tx):
        """`for row in a`: the rows, arrays (NumPy scalars for a 1-d array)."""
        if self.ndim == 0:
            unimplemented("iteration over a 0-d array")
        rows = self.tensor.unpack_var_sequence(tx)
        return [NumpyNdarrayVariable(r, scalar=self.ndim == 1) for r in rows]

    def _getitem(self, tx, index):
        if isinstance(index, ConstantVariable) and type(index.value) is tuple:
            index = TupleVariable([ConstantVariable(v) for v in index.value])
        items = index.items if isinstance(index, TupleVariable) else [index]
        plain = []
        for i in items:
            if isinstance(i, NumpyNdarrayVariable):
                if i.np_dtype == np.bool_:
                    unimplemented("indexing with a boolean array (a data-dependent shape)")
                i = i.tensor
            plain.append(i)
        idx = TupleVariable(plain) if isinstance(index, TupleVariable) else plain[0]
        out = torch_vars.call_tensor_op(
            tx, "call_function", operator.getitem, [self.tensor, idx], {}
        )
        ints = (
            all(isinstance(i, ConstantVariable) and type(i.value) is int for i in items)
            and len(items) == self.ndim
        )
        return NumpyNdarrayVariable(out, scalar=ints)

    def _setitem(self, tx, index, value):
        if self.scalar or getattr(self, "readonly", False):
            unimplemented("item assignment to a NumPy scalar or read-only array (it raises)")
        if isinstance(value, NumpyNdarrayVariable):
            value = _cast(tx, value.tensor, self.tensor.example.dtype)
        elif not (
            value.is_python_constant()
            and isinstance(value.as_python_constant(), (int, float, bool))
        ):
            unimplemented(f"ndarray item assignment of {value}")
        if isinstance(index, NumpyNdarrayVariable):
            index = index.tensor
        tx.tensor_setitem(self.tensor, index, value)
        return ConstantVariable(None)

    def reconstruct(self, cg):
        if self.source is not None:
            return super().reconstruct(cg)
        to_numpy = _to_numpy_readonly if getattr(self, "readonly", False) else _to_numpy
        cg.load_object(_to_numpy_scalar if self.scalar else to_numpy, push_null=True)
        cg.reconstruct_tensor(self.tensor)
        cg.extend(emit.call(1))

    def __repr__(self):
        kind = "scalar" if self.scalar else "ndarray"
        return f"NumpyNdarrayVariable({kind}, {tuple(self.tensor.example.shape)}, {self.np_dtype})"


def _to_numpy(t):
    return t.numpy()


def _to_numpy_readonly(t):
    a = t.numpy()
    a.flags.writeable = False
    return a


def _to_numpy_scalar(t):
    return t.numpy()[()]


class NumpyObjectVariable(PythonValueVariable):
    """A NumPy object held as itself: rebuilt from its source, else loaded as the object."""

    def reconstruct(self, cg):
        if self.source is not None:
            return super().reconstruct(cg)
        cg.load_object(self.value)


class NumpyConstVariable(NumpyObjectVariable):
    """A numpy dtype, scalar type (np.float32) or other constant of numpy."""

    def var_getattr(self, tx, name):
        value = getattr(self.value, name)
        if isinstance(value, (int, float, str, bool)):
            return ConstantVariable(value)
        if isinstance(value, np.dtype) or (
            isinstance(value, type) and issubclass(value, np.generic)
        ):
            return NumpyConstVariable(value)  # (a.dtype.type: np.float32, callable as one)
        unimplemented(f"attribute {name!r} of {self.value!r}")

    def call_function(self, tx, args, kwargs):
        """`np.float32(x)`: a scalar type called (numpy_more.py), else the usual break."""
        if SCALAR_TYPE_CALL and isinstance(self.value, type):
            return SCALAR_TYPE_CALL[0](tx, self.value, args, kwargs)
        return super().call_function(tx, args, kwargs)

    def __repr__(self):
        return f"NumpyConstVariable({self.value!r})"


SCALAR_TYPE_CALL = []  # numpy_more.scalar_type_call, set when that module loads


class NumpyFunctionVariable(NumpyObjectVariable):
    """A numpy function or ufunc, called as torch ops (its row in the tables)."""

    def call_function(self, tx, args, kwargs):
        return call(tx, self.value, args, kwargs)

    def __repr__(self):
        return f"NumpyFunctionVariable({_name(self.value)})"


def special(value):
    """A tracker for a function, ufunc, dtype or scalar type of numpy's; else None."""
    if isinstance(value, type):
        return NumpyConstVariable(value) if issubclass(value, np.generic) else None
    if isinstance(value, np.dtype):
        return NumpyConstVariable(value)
    if isinstance(value, np.ufunc) or type(value).__name__ == "_ArrayFunctionDispatcher":
        return NumpyFunctionVariable(value)
    if type(value).__name__ in ("function", "builtin_function_or_method"):
        if (getattr(value, "__module__", None) or "").startswith("numpy"):
            return NumpyFunctionVariable(value)  # (np.zeros, np.arange, np.array are C functions)
    return None


# --- the calls ------------------------------------------------------------------------------------
def _name(fn):
    return f"np.{getattr(fn, '__name__', fn)}"


def _t(tx, fn, args, kwargs=None):
    """fn(*args, **kwargs) of torch on traced values (constants wrapped)."""
    args = [a if isinstance(a, VariableTracker) else ConstantVariable(a) for a in args]
    kwargs = {
        k: v if isinstance(v, VariableTracker) else ConstantVariable(v)
        for k, v in (kwargs or {}).items()
    }
    return torch_vars.TorchVariable(fn).call_function(tx, args, kwargs)


def _cast(tx, t, dtype, copy=False):
    if t.example.dtype == dtype:
        return _t(tx, torch.clone, [t]) if copy else t
    return t.call_method(tx, "to", [ConstantVariable(dtype)], {})


def _array(t, scalar=False):
    return NumpyNdarrayVariable(t, scalar=scalar)


def _dtype_arg(v):
    value = v.as_python_constant() if v.is_python_constant() else getattr(v, "value", None)
    try:
        return np.dtype(value)
    except TypeError:
        unimplemented(f"numpy dtype argument {v}")


def _probe_value(v):
    if isinstance(v, NumpyNdarrayVariable):
        return v.probe()
    if isinstance(v, BaseListVariable):
        return (
            type(v.as_python_constant() if v.is_python_constant() else [])(
                _probe_value(i) for i in v.items
            )
            if v.is_python_constant()
            else [_probe_value(i) for i in v.items]
        )
    if isinstance(v, TensorVariable):
        unimplemented("a torch tensor passed to a numpy function")
    if v.is_python_constant():
        return v.as_python_constant()
    if isinstance(v, NumpyConstVariable):
        return v.value
    unimplemented(f"numpy argument {v}")


def _is_sym_int(v):
    return isinstance(v, SymNodeVariable) and v.value.kind == "int"


def _probe(fn, args, kwargs):
    """NumPy's own result on one-element stand-ins (its dtype; an error is a break)."""
    pargs = [_probe_value(a) for a in args]
    pkwargs = {k: _probe_value(v) for k, v in kwargs.items()}
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (a warning of the stand-ins is not the user's)
            return np.asarray(fn(*pargs, **pkwargs))
    except Exception as e:
        unimplemented(f"{_name(fn)} raised {type(e).__name__} on NumPy's dtype probe: {e}")


def _as_tensor(tx, v, dtype):
    """An array argument as a tensor of `dtype`; a Python scalar as a 0-d tensor of it."""
    if isinstance(v, NumpyNdarrayVariable):
        return _cast(tx, v.tensor, dtype)
    if v.is_python_constant() and isinstance(v.as_python_constant(), (bool, int, float, complex)):
        return _t(tx, torch.full, [(), v.as_python_constant()], {"dtype": dtype})
    if _is_sym_int(v):
        return _t(tx, torch.full, [(), v], {"dtype": dtype})
    unimplemented(f"numpy argument {v}")


def call(tx, fn, args, kwargs):
    """`fn(*args, **kwargs)` of numpy, as torch ops (Note [NumPy: arrays as tensors])."""
    if kwargs.get("out") is not None:
        unimplemented(f"{_name(fn)} with out=")
    kwargs = {k: v for k, v in kwargs.items() if k != "out"}
    rule = _ELEMENTWISE.get(fn)
    if rule is not None:
        return _elementwise(tx, fn, rule, args, kwargs)
    rule = _REDUCTIONS.get(fn)
    if rule is not None:
        return _reduction(tx, fn, rule, args, kwargs)
    rule = _OTHER.get(fn)
    if rule is not None:
        return _as_numpy_gives(rule(tx, fn, args, kwargs), fn, args, kwargs)
    unimplemented(f"numpy function {_name(fn)} is not traced")


def _as_numpy_gives(out, fn, args, kwargs):
    """A 0-d result as the NumPy scalar NumPy's own call on the stand-ins gives (np.clip(s, 0,
    1) of a scalar is a scalar, np.asarray(s) a 0-d array), else as it is."""
    if not isinstance(out, NumpyNdarrayVariable) or out.scalar or out.ndim != 0:
        return out
    try:
        probes = [_probe_value(a) for a in args]
        kw = {k: _probe_value(v) for k, v in kwargs.items()}
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scalar = isinstance(fn(*probes, **kw), np.generic)
    except Exception:  # (an argument without a stand-in, or the stand-ins' own error)
        return out
    return NumpyNdarrayVariable(out.tensor, scalar=True) if scalar else out


def _elementwise(tx, fn, torch_fn, args, kwargs):
    if kwargs:
        unimplemented(f"{_name(fn)} with keywords {sorted(kwargs)}")
    probed = sym_ints_probed(args)
    out_dtype = _probe(fn, probed, {}).dtype
    if out_dtype == np.bool_ and fn not in _LOGICAL:
        compute = np.result_type(*[_probe_value(a) for a in probed])  # comparisons: promoted inputs
    else:
        compute = out_dtype
    check_sym_ints(fn, torch_fn, args, compute)
    zero_safe = torch_fn in _INT_DIVISIONS and compute.kind in "iub" and not _nonzero(args[1])
    plain = torch_fn in _SCALAR_SECOND and _plain_number(args[1], compute)
    tensors = [  # `a / 2`: the number itself (Note [NumPy: numbers as they are])
        a if i == 1 and plain else _as_tensor(tx, a, torch_dtype(compute))
        for i, a in enumerate(args)
    ]
    if zero_safe:  # Note [NumPy: integer division by 0]
        zero = _t(tx, torch.eq, [tensors[1], 0])
        safe = _t(tx, torch.where, [zero, 1, tensors[1]])
        quotient = _t(tx, torch_fn, [tensors[0], safe])
        out = _t(tx, torch.where, [zero, 0, quotient])
    else:
        out = _t(tx, torch_fn, tensors)
    out = _cast(tx, out, torch_dtype(out_dtype))
    scalar = (
        all(not isinstance(a, NumpyNdarrayVariable) or a.scalar or a.ndim == 0 for a in args)
        and out.example.dim() == 0
    )
    return _array(out, scalar=scalar)


# Note [NumPy: integer division by 0]
# NumPy's integer floor_divide/remainder/fmod by 0 give 0 (with a RuntimeWarning); torch's raise.
# A divisor not known non-zero while tracing (a scalar input, an array) divides by
# `where(d == 0, 1, d)` and the result is `where(d == 0, 0, q)`: NumPy's values for every divisor
# in one graph (the warning is not repeated).


# Note [NumPy: numbers as they are]
# `a / 2` with `a` an array: the first operand is cast to the result dtype NumPy computes in, so
# torch's op with the Python number as its second argument computes in that dtype too (a Python
# number never promotes a tensor of its own kind or a higher one), and the graph has one node
# where a 0-d tensor of the number would add a second. Only for the ops with a (Tensor, Scalar)
# form, and for numbers the compute dtype holds exactly (ints NumPy's probe accepted, floats
# where the compute dtype is float64 or complex; never a bool: torch's `t - True` raises).
_SCALAR_SECOND = {
    torch.add, torch.sub, torch.mul, torch.div, torch.floor_divide, torch.remainder,
    torch.fmod, torch.pow, torch.eq, torch.ne, torch.lt, torch.le, torch.gt, torch.ge,
}  # fmt: skip


# Note [NumPy: a symbolic int operand]
# `a % n` with `n` a dynamic Python int: NumPy's dtype rules (NEP 50) take a Python int as weak,
# whatever its value, so the stand-in 1 gives the result dtype; its value matters only where it
# may not fit the dtype (an OverflowError in NumPy, int8 + 1000) or where an int to a negative
# power raises. So a symbolic int is an operand only where any int64 value computes as NumPy
# does: in int64, float32/64 or complex, and not as an integer power.
_ANY_INT_DTYPES = {
    np.dtype(d) for d in (np.int64, np.float32, np.float64, np.complex64, np.complex128)
}


def sym_ints_probed(args):
    """The arguments with each symbolic int as the int 1, for NumPy's probe (see the note)."""
    return [ConstantVariable(1) if _is_sym_int(a) else a for a in args]


def check_sym_ints(fn, torch_fn, args, compute):
    """A break unless every int64 value of a symbolic int operand computes as NumPy does."""
    if not any(_is_sym_int(a) for a in args):
        return
    if compute not in _ANY_INT_DTYPES or (torch_fn is torch.pow and compute.kind == "i"):
        unimplemented(f"{_name(fn)} of a symbolic int in {compute} (its value may overflow)")


# integer x // 0, x % 0, fmod(x, 0): NumPy warns and gives 0, torch raises
_INT_DIVISIONS = {torch.floor_divide, torch.remainder, torch.fmod}


def _nonzero(v):
    return v.is_python_constant() and v.as_python_constant() != 0


def _plain_number(v, compute):
    """Whether `v` may go to torch's op as a Python number (Note [NumPy: numbers as they are])."""
    if isinstance(v, NumpyNdarrayVariable) or not v.is_python_constant():
        return False
    c = v.as_python_constant()
    if type(c) is int:  # (not a bool: torch's `t - True` raises)
        return compute.kind in "iufc"
    return type(c) is float and compute in (np.float64, np.complex128)


def _axis(args, kwargs, ndim):
    axis = args[1] if len(args) > 1 else kwargs.get("axis")
    axis = None if axis is None else axis.as_python_constant()
    if axis is None:
        return None
    return [a % max(ndim, 1) for a in (axis if isinstance(axis, tuple) else (axis,))]


def _reduction(tx, fn, rule, args, kwargs):
    torch_fn, cast_in = rule
    allowed = {"axis", "keepdims", "dtype", "ddof"}
    if set(kwargs) - allowed or len(args) > 2 or not isinstance(args[0], NumpyNdarrayVariable):
        unimplemented(f"{_name(fn)} with these arguments")
    a = args[0]
    out_dtype = torch_dtype(_probe(fn, args, kwargs).dtype)
    axis = _axis(args, kwargs, a.ndim)
    keep = bool(kwargs["keepdims"].as_python_constant()) if "keepdims" in kwargs else False
    ddof = kwargs["ddof"].as_python_constant() if "ddof" in kwargs else 0
    t = _cast(tx, a.tensor, out_dtype) if cast_in else a.tensor
    out = torch_fn(tx, t, axis, keep, ddof)
    out = _cast(tx, out, out_dtype)
    return _array(out, scalar=out.example.dim() == 0)


def _dims(axis, t):
    return list(range(t.example.dim())) if axis is None else axis


def _keep_all(tx, out, t, keep):
    """A reduction over every dim with keepdims: ones for each dim."""
    if keep:
        return _t(tx, torch.reshape, [out, (1,) * t.example.dim()])
    return out


def _single_dim(name, torch_fn):
    def reduce(tx, t, axis, keep, ddof):
        if axis is None:
            return _keep_all(tx, _t(tx, torch_fn, [t]), t, keep)
        if len(axis) != 1:
            unimplemented(f"np.{name} over several axes")
        return _t(tx, torch_fn, [t, axis[0]], {"keepdim": keep})

    return reduce


def _multi_dim(torch_fn):
    def reduce(tx, t, axis, keep, ddof):
        return _t(tx, torch_fn, [t], {"dim": _dims(axis, t), "keepdim": keep})

    return reduce


def _moment(torch_fn):
    def reduce(tx, t, axis, keep, ddof):
        return _t(tx, torch_fn, [t], {"dim": _dims(axis, t), "keepdim": keep, "correction": ddof})

    return reduce


def _arg_reduce(torch_fn):
    def reduce(tx, t, axis, keep, ddof):
        if axis is None:
            return _keep_all(tx, _t(tx, torch_fn, [t]), t, keep)
        return _t(tx, torch_fn, [t, axis[0]], {"keepdim": keep})

    return reduce


def _cumulative(torch_fn):
    def reduce(tx, t, axis, keep, ddof):
        if axis is None:
            return _t(tx, torch_fn, [_t(tx, torch.flatten, [t]), 0])
        return _t(tx, torch_fn, [t, axis[0]])

    return reduce


# ufuncs -> torch function
_ELEMENTWISE = {
    np.add: torch.add,
    np.subtract: torch.sub,
    np.multiply: torch.mul,
    np.divide: torch.div,
    np.floor_divide: torch.floor_divide,
    np.remainder: torch.remainder,
    np.fmod: torch.fmod,
    np.power: torch.pow,
    np.maximum: torch.maximum,
    np.minimum: torch.minimum,
    np.fmax: torch.fmax,
    np.fmin: torch.fmin,
    np.negative: torch.neg,
    np.positive: torch.positive,
    np.absolute: torch.abs,
    np.sign: torch.sign,
    np.exp: torch.exp,
    np.exp2: torch.exp2,
    np.expm1: torch.expm1,
    np.log: torch.log,
    np.log2: torch.log2,
    np.log10: torch.log10,
    np.log1p: torch.log1p,
    np.sqrt: torch.sqrt,
    np.square: torch.square,
    np.reciprocal: torch.reciprocal,
    np.sin: torch.sin,
    np.cos: torch.cos,
    np.tan: torch.tan,
    np.arcsin: torch.asin,
    np.arccos: torch.acos,
    np.arctan: torch.atan,
    np.arctan2: torch.atan2,
    np.sinh: torch.sinh,
    np.cosh: torch.cosh,
    np.tanh: torch.tanh,
    np.hypot: torch.hypot,
    np.floor: torch.floor,
    np.ceil: torch.ceil,
    np.trunc: torch.trunc,
    np.rint: torch.round,
    np.equal: torch.eq,
    np.not_equal: torch.ne,
    np.less: torch.lt,
    np.less_equal: torch.le,
    np.greater: torch.gt,
    np.greater_equal: torch.ge,
    np.logical_and: torch.logical_and,
    np.logical_or: torch.logical_or,
    np.logical_xor: torch.logical_xor,
    np.logical_not: torch.logical_not,
    np.isnan: torch.isnan,
    np.isinf: torch.isinf,
    np.isfinite: torch.isfinite,
    np.bitwise_and: torch.bitwise_and,
    np.bitwise_or: torch.bitwise_or,
    np.bitwise_xor: torch.bitwise_xor,
    np.invert: torch.bitwise_not,
}
# bool-valued ufuncs whose torch op takes any dtype (the others compare in the promoted dtype)
_LOGICAL = {np.logical_and, np.logical_or, np.logical_xor, np.logical_not}

# reductions: numpy function -> (torch computation, cast the input to the result dtype first)
_REDUCTIONS = {
    np.sum: (_multi_dim(torch.sum), True),
    np.mean: (_multi_dim(torch.mean), True),
    np.prod: (_single_dim("prod", torch.prod), True),
    np.max: (_multi_dim(torch.amax), False),
    np.min: (_multi_dim(torch.amin), False),
    np.argmax: (_arg_reduce(torch.argmax), False),
    np.argmin: (_arg_reduce(torch.argmin), False),
    np.std: (_moment(torch.std), True),
    np.var: (_moment(torch.var), True),
    np.any: (_multi_dim(torch.any), False),
    np.all: (_multi_dim(torch.all), False),
    np.cumsum: (_cumulative(torch.cumsum), True),
    np.cumprod: (_cumulative(torch.cumprod), True),
}
_REDUCTIONS[np.amax] = _REDUCTIONS[np.max]
_REDUCTIONS[np.amin] = _REDUCTIONS[np.min]

# everything else: numpy function -> handler(tx, fn, args, kwargs); numpy_shapes.py fills it
# (shapes, factories, linear algebra) through register_handlers
_OTHER = {}


_ATTRS = {}  # ndarray attribute -> handler(tx, array), registered by other modules


def register_handlers(table):
    """Add rows to the table of numpy functions handled by a function of their own."""
    _OTHER.update(table)


# ndarray methods -> the numpy function they call with the array first
_METHODS = {
    "sum": np.sum,
    "mean": np.mean,
    "prod": np.prod,
    "max": np.max,
    "min": np.min,
    "argmax": np.argmax,
    "argmin": np.argmin,
    "std": np.std,
    "var": np.var,
    "any": np.any,
    "all": np.all,
    "cumsum": np.cumsum,
    "cumprod": np.cumprod,
    "reshape": np.reshape,
    "transpose": np.transpose,
    "squeeze": np.squeeze,
    "clip": np.clip,
    "dot": np.dot,
    "astype": None,
    "copy": None,
    "flatten": None,
    "ravel": None,
    "tolist": None,
}

# operators on arrays -> ufuncs
_OPERATORS = {
    operator.add: np.add,
    operator.sub: np.subtract,
    operator.mul: np.multiply,
    operator.truediv: np.divide,
    operator.floordiv: np.floor_divide,
    operator.mod: np.remainder,
    operator.pow: np.power,
    operator.matmul: np.matmul,
    operator.eq: np.equal,
    operator.ne: np.not_equal,
    operator.lt: np.less,
    operator.le: np.less_equal,
    operator.gt: np.greater,
    operator.ge: np.greater_equal,
    operator.and_: np.bitwise_and,
    operator.or_: np.bitwise_or,
    operator.xor: np.bitwise_xor,
    operator.neg: np.negative,
    operator.pos: np.positive,
    operator.invert: np.invert,
    operator.abs: np.absolute,
}
_INPLACE = {
    operator.iadd: np.add,
    operator.isub: np.subtract,
    operator.imul: np.multiply,
    operator.itruediv: np.divide,
    operator.ifloordiv: np.floor_divide,
    operator.imod: np.remainder,
    operator.ipow: np.power,
}


def involved(*values):
    """Whether an operator's operands include an ndarray or a numpy dtype (numpy's operator)."""
    return any(isinstance(v, (NumpyNdarrayVariable, NumpyConstVariable)) for v in values)


def _fold_constants(fn, args):
    """`a.dtype == np.float32`: an operator on numpy constants, folded while tracing."""
    values = [
        a.value if isinstance(a, NumpyConstVariable) else a.as_python_constant() for a in args
    ]
    result = fn(*values)
    if type(result) in (bool, np.bool_):
        return ConstantVariable(bool(result))
    unimplemented(f"operator {getattr(fn, '__name__', fn)} of numpy constants")


def operator_call(tx, fn, args):
    """`a <op> b` / `<op> a` with an ndarray operand: the ufunc numpy calls."""
    if not any(isinstance(a, NumpyNdarrayVariable) for a in args):
        if all(isinstance(a, NumpyConstVariable) or a.is_python_constant() for a in args):
            return _fold_constants(fn, args)
        unimplemented(f"operator {getattr(fn, '__name__', fn)} of {args}")
    if fn in _INPLACE:
        target = args[0]
        if not isinstance(target, NumpyNdarrayVariable) or target.scalar:
            return operator_call(tx, _OUT_OF_PLACE[fn], args)
        if getattr(target, "readonly", False):
            unimplemented("in-place operator on a read-only numpy array (it raises)")
        if any(isinstance(a, TensorVariable) for a in args):
            return _with_array(tx, fn, args)  # (`a /= t` rebinds `a` to a tensor, or raises)
        out = call(tx, _INPLACE[fn], args, {})
        _probe_inplace(fn, args)
        torch_vars.call_tensor_op(
            tx,
            "call_method",
            "copy_",
            [target.tensor, _cast(tx, out.tensor, target.tensor.example.dtype)],
            {},
        )
        return target
    if any(isinstance(a, TensorVariable) for a in args):
        return _with_tensor(tx, fn, args)
    ufunc = _OPERATORS.get(fn)
    if ufunc is None:
        unimplemented(f"operator {getattr(fn, '__name__', fn)} with a numpy array")
    return call(tx, ufunc, args, {})


# Note [NumPy: a scalar next to a tensor]
# Eager torch takes a NumPy scalar next to a tensor as a Python number: the operation runs in
# torch.result_type(tensor, number), the number cast to that dtype (a float64 tensor keeps the
# scalar's full precision; an int tensor and a float scalar compute in the default dtype). The
# traced scalar is a 0-d tensor input, so it is cast to exactly that dtype before the op.
def _with_tensor(tx, fn, args):
    """`np.float64(2) * t`: torch's operator, the NumPy scalar taken as a Python number is (a
    0-d tensor of the dtype torch computes in: Note [NumPy: a scalar next to a tensor])."""
    tensors = [a.example for a in args if isinstance(a, TensorVariable)]
    plain = []
    for a in args:
        if isinstance(a, NumpyNdarrayVariable):
            if not a.scalar:
                return _with_array(tx, fn, args)
            if getattr(a, "constant", None) is not None:
                plain.append(ConstantVariable(a.constant))  # (a constant: the number itself)
                continue
            if not tensors:
                unimplemented(f"operator {getattr(fn, '__name__', fn)} of NumPy scalars")
            dt = a.tensor.example.dtype  # (the Python number of its kind, as torch takes it)
            number = dt == torch.bool or (
                1j if dt.is_complex else 1.0 if dt.is_floating_point else 1
            )
            a = _cast(tx, a.tensor, torch.result_type(tensors[0], number))
        plain.append(a)
    return torch_vars.call_tensor_op(tx, "call_function", _OUT_OF_PLACE.get(fn, fn), plain, {})


# Note [NumPy: an ndarray next to a tensor]
# `t + a` with an ndarray `a` of any shape does not run NumPy's ufunc: Tensor's operator takes
# the array as torch.as_tensor(a) (its dtype kept) and computes in torch's promotion, giving a
# tensor; `t += a` and `a /= t` are out of place (the in-place operators decline: the name is
# rebound to a new tensor). With the array on the left NumPy's operator runs first and, as
# torch's __array_priority__ asks, defers to the tensor's reflected operator for some operators
# and raises TypeError for others. Rather than tabulate that, kiln runs the operator eagerly on
# one-element stand-ins of each operand's dtype and rank: if it gives a new torch.Tensor whose
# dtype is the one torch's own operator gives on the arrays as tensors, the torch operator is
# traced on the array's tensor; anything else (an error, an ndarray, an operand returned) is a
# graph break, and Python then does what it does.
def _with_array(tx, fn, args):
    """`t * a` of a tensor and an ndarray: the torch operator on the array's tensor (Note
    [NumPy: an ndarray next to a tensor])."""
    name = getattr(fn, "__name__", fn)
    stand_ins = []
    for a in args:
        if isinstance(a, NumpyNdarrayVariable):
            stand_ins.append(a.probe())
        elif isinstance(a, TensorVariable):
            if a.device.type != "cpu":  # (NumPy reads CPU tensors only: eager raises)
                unimplemented(f"operator {name} of an ndarray and a {a.device.type} tensor")
            stand_in = torch.ones((1,) * a.example.dim(), dtype=a.example.dtype)
            stand_ins.append(stand_in.requires_grad_(a.example.requires_grad))
        elif a.is_python_constant():
            stand_ins.append(a.as_python_constant())
        else:
            unimplemented(f"operator {name} of an ndarray, a tensor and {a}")
    op = _OUT_OF_PLACE.get(fn, fn)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (NumPy's deprecations on the stand-ins)
            eager = fn(*stand_ins)
            as_torch = op(*[torch.as_tensor(s) if type(s) is np.ndarray else s for s in stand_ins])
    except Exception as e:
        unimplemented(f"operator {name} of an ndarray and a tensor raises {type(e).__name__}: {e}")
    if (
        type(eager) is not torch.Tensor
        or any(eager is s for s in stand_ins)
        or type(as_torch) is not torch.Tensor
        or eager.dtype != as_torch.dtype
    ):
        unimplemented(f"operator {name} of an ndarray and a tensor (not torch's operator)")
    plain = [a.tensor if isinstance(a, NumpyNdarrayVariable) else a for a in args]
    return torch_vars.call_tensor_op(tx, "call_function", op, plain, {})


_OUT_OF_PLACE = {fn: getattr(operator, fn.__name__[1:]) for fn in _INPLACE}
_OUT_OF_PLACE[operator.itruediv] = operator.truediv
_OUT_OF_PLACE[operator.ifloordiv] = operator.floordiv


def _probe_inplace(fn, args):
    """NumPy's casting check of `a op= b` (same_kind): an error is a break."""
    pargs = [_probe_value(a) for a in args]
    try:
        with np.errstate(all="ignore"):
            fn(pargs[0].copy(), pargs[1])
    except Exception as e:
        unimplemented(f"in-place {fn.__name__} on a numpy array raised {type(e).__name__}: {e}")


# --- torch <-> numpy ---------------------------------------------------------------------------------
def tensor_numpy(tx, tensor, args, kwargs):
    """`t.numpy()`: an ndarray of the tensor (same memory)."""
    if args or set(kwargs) - {"force"}:
        unimplemented("Tensor.numpy() with arguments")
    if tensor.example.requires_grad and not kwargs:
        unimplemented("Tensor.numpy() of a tensor that requires grad (it raises)")
    if tensor.device.type != "cpu":
        unimplemented("Tensor.numpy() of a tensor that is not on the CPU")
    if tensor.example.dtype not in _NP_OF:
        unimplemented(f"Tensor.numpy() of a {tensor.example.dtype} tensor")
    if tensor.example.requires_grad:
        tensor = tensor.call_method(tx, "detach", [], {})
    return NumpyNdarrayVariable(tensor)


def torch_from_numpy(tx, fn, args, kwargs):
    """torch.from_numpy / torch.as_tensor / torch.tensor of an ndarray; None when not one."""
    if not args or not isinstance(args[0], NumpyNdarrayVariable):
        return None
    if fn is torch.from_numpy and not kwargs and len(args) == 1:
        if args[0].scalar:
            unimplemented("torch.from_numpy of a NumPy scalar (it raises)")
        return args[0].tensor
    if fn is torch.as_tensor and len(args) == 1 and set(kwargs) <= {"dtype"}:
        t = args[0].tensor
        if "dtype" in kwargs:
            t = _cast(tx, t, kwargs["dtype"].as_python_constant())
        return t
    if fn is torch.tensor and len(args) == 1 and set(kwargs) <= {"dtype"}:
        t = args[0].tensor
        if "dtype" in kwargs:
            return _cast(tx, t, kwargs["dtype"].as_python_constant(), copy=True)
        return _t(tx, torch.clone, [t])
    unimplemented(f"torch.{fn.__name__} of a numpy array with these arguments")


tensor_vars.register_method("numpy", tensor_numpy)
for _fn in (torch.from_numpy, torch.as_tensor, torch.tensor):
    torch_vars.register_function(_fn, torch_from_numpy)
