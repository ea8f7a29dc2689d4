"""`torch.tensor([...])` of a nested list holding tensors or ndarrays of the graph: graph ops.

Note [Tensors: torch.tensor of graph values]
Eagerly, `torch.tensor(data)` walks the nested list: a one-element tensor in it is a scalar
(`torch.tensor([a, b])` of 0-d or [[[n]]] tensors is 1-d), an ndarray a block of its own shape;
the result dtype, unless given, is the promotion of every leaf's type (a tensor's or an
ndarray's dtype, int64 / the default float dtype / bool for Python numbers), and the result is a
new tensor, detached. kiln builds the same thing from graph values: each tensor leaf
`t.detach().reshape(())`, each ndarray leaf its tensor, each number a 0-d constant, all cast to
that dtype, then one `torch.stack` per list level. What would raise eagerly or be read another
way is a graph break: leaves of several shapes at one level, a tensor of more than one element,
a float tensor into an integer dtype (eager refuses it), tensors off the CPU without a device,
`requires_grad=True` / `pin_memory`.
"""

import torch

from kiln.exc import unimplemented
from kiln.frontend.variables import numpy_vars
from kiln.frontend.variables import torch as torch_vars
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.lists import BaseListVariable, ListVariable
from kiln.frontend.variables.numpy_vars import NumpyNdarrayVariable
from kiln.frontend.variables.tensor import TensorVariable
from kiln.frontend.variables.unbacked import is_item_scalar, leaf_dtype, scalar_leaf

_t = numpy_vars._t


def _is_graph_leaf(v):
    return isinstance(v, (TensorVariable, NumpyNdarrayVariable)) or is_item_scalar(v)


def _has_graph_leaf(v):
    if isinstance(v, BaseListVariable):
        return any(_has_graph_leaf(i) for i in v.items)
    return _is_graph_leaf(v)


def _leaf_dtype(v, dtype=None):
    if is_item_scalar(v):
        return leaf_dtype(v)
    if isinstance(v, TensorVariable):
        return v.example.dtype
    if isinstance(v, NumpyNdarrayVariable):
        if v.scalar and not _scalar_fits(v, dtype):
            # (without a dtype, eager's promotion of NumPy scalars is its own: not modelled)
            unimplemented("torch.tensor of a list holding a NumPy scalar")
        return v.tensor.example.dtype
    if isinstance(v, ConstantVariable) and type(v.value) in (bool, int, float, complex):
        return torch.tensor(v.value).dtype  # (the default dtype for floats, as eagerly)
    unimplemented(f"torch.tensor of a list holding {v}")


def _scalar_fits(v, dtype):
    """Whether NumPy scalar v goes into an explicit `dtype` as a plain cast (no float into an
    integer dtype, no bool)."""
    have = v.tensor.example.dtype
    if dtype is None or have == torch.bool or dtype == torch.bool:
        return False
    return dtype.is_floating_point or not have.is_floating_point


def _dtypes(v, dtype=None):
    if isinstance(v, BaseListVariable):
        if not v.items:
            unimplemented("torch.tensor of an empty list inside a list of graph values")
        return [d for i in v.items for d in _dtypes(i, dtype)]
    return [_leaf_dtype(v, dtype)]


def _leaf(tx, v, dtype):
    """One leaf as a tensor of `dtype` (a scalar for tensors and numbers)."""
    if isinstance(v, ConstantVariable):
        return _t(tx, torch.tensor, [v.value], {"dtype": dtype})
    if is_item_scalar(v):
        if leaf_dtype(v).is_floating_point and not (dtype.is_floating_point or dtype.is_complex):
            unimplemented("torch.tensor of a float into an integer dtype (eager raises)")
        return scalar_leaf(tx, v, dtype)
    if isinstance(v, NumpyNdarrayVariable):
        t = v.tensor
    else:
        sizes = v.example.shape
        if not all(type(s) is int for s in sizes) or v.example.numel() != 1:
            unimplemented("torch.tensor of a list holding a tensor of more than one element")
        if torch.device(v.device).type != "cpu":
            unimplemented("torch.tensor of a list holding a tensor off the CPU")
        t = v.call_method(tx, "detach", [], {})
        t = t.call_method(tx, "reshape", [ConstantVariable(())], {})
        if v.example.dtype.is_floating_point and not (dtype.is_floating_point or dtype.is_complex):
            unimplemented("torch.tensor of a float tensor into an integer dtype (eager raises)")
    if t.example.dtype != dtype:
        t = t.call_method(tx, "to", [ConstantVariable(dtype)], {})
    return t


def _build(tx, v, dtype):
    if not isinstance(v, BaseListVariable):
        return _leaf(tx, v, dtype)
    parts = [_build(tx, i, dtype) for i in v.items]
    shapes = {tuple(p.example.shape) for p in parts}
    if len(shapes) != 1:
        unimplemented("torch.tensor of a list whose items have several shapes")
    return _t(tx, torch.stack, [ListVariable(parts)])


def tensor_of_list(tx, fn, args, kwargs):
    """`torch.tensor(data, dtype=, device=)` of a list holding graph values; else numpy's hook."""
    if fn is torch.tensor and args and isinstance(args[0], BaseListVariable):
        if _has_graph_leaf(args[0]):
            return _tensor(tx, args, kwargs)
    if fn is torch.tensor and args and is_item_scalar(args[0]):
        return _tensor(tx, args, kwargs)
    return numpy_vars.torch_from_numpy(tx, fn, args, kwargs)


def _tensor(tx, args, kwargs):
    kwargs = dict(kwargs)
    if len(args) != 1 or not set(kwargs) <= {"dtype", "device", "requires_grad"}:
        unimplemented("torch.tensor of graph values with these arguments")
    opts = {}
    for k, v in kwargs.items():
        if not v.is_python_constant():
            unimplemented(f"torch.tensor with a non-constant {k}")
        opts[k] = v.as_python_constant()
    if opts.get("requires_grad"):
        unimplemented("torch.tensor(..., requires_grad=True) of graph values")
    dtype = opts.get("dtype")
    if dtype is None:
        found = _dtypes(args[0])
        dtype = found[0]
        for d in found[1:]:
            dtype = torch.promote_types(dtype, d)
    else:
        _dtypes(args[0], dtype)  # (every leaf is one kiln models)
    out = _build(tx, args[0], dtype)
    if not isinstance(args[0], BaseListVariable):
        return out
    device = opts.get("device")
    if device is not None and torch.device(device) != torch.device(out.device):
        out = out.call_method(tx, "to", [ConstantVariable(torch.device(device))], {})
    return out


torch_vars.register_function(torch.tensor, tensor_of_list)


# Note [Tensors: legacy constructors]
# `torch.LongTensor([1, 2])` (and FloatTensor, IntTensor ...: CPU tensor types) of a sequence of
# numbers is `torch.tensor(seq, dtype=<its dtype>, device="cpu")`. Called with ints it would be
# sizes of an uninitialized tensor, and with a tensor an alias of it: graph breaks.
_LEGACY_CONSTRUCTORS = (
    torch.FloatTensor,
    torch.DoubleTensor,
    torch.HalfTensor,
    torch.BFloat16Tensor,
    torch.LongTensor,
    torch.IntTensor,
    torch.ShortTensor,
    torch.CharTensor,
    torch.ByteTensor,
    torch.BoolTensor,
)


def _number(v):
    if isinstance(v, NumpyNdarrayVariable):
        return v.scalar  # (a NumPy scalar of the graph)
    if not v.is_python_constant():
        return False
    return type(v.as_python_constant()) in (bool, int, float)


def legacy_constructor(tx, fn, args, kwargs):
    """`torch.LongTensor(seq)`: a tensor of that dtype from a sequence of numbers."""
    if kwargs or len(args) != 1:
        unimplemented(f"torch.{fn.__name__} without one sequence of numbers")
    seq = args[0]
    if isinstance(seq, BaseListVariable):
        flat = seq.items and all(_number(i) for i in seq.items)
    else:
        value = seq.as_python_constant() if seq.is_python_constant() else None
        flat = type(value) in (list, tuple) and value
        flat = flat and all(type(i) in (bool, int, float) for i in value)
    if not flat:
        unimplemented(f"torch.{fn.__name__} of something other than a flat sequence of numbers")
    opts = {"dtype": ConstantVariable(fn.dtype), "device": ConstantVariable(torch.device("cpu"))}
    return torch_vars.TorchVariable(torch.tensor).call_function(tx, [args[0]], opts)


for _cls in _LEGACY_CONSTRUCTORS:
    torch_vars.register_function(_cls, legacy_constructor)
