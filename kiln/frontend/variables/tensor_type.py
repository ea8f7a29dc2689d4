"""`Tensor.type()`: the legacy type name of a traced tensor, and conversions by type.

Note [Tensor: legacy type names]
`t.type()` with no argument is a string naming the tensor's dtype and device ("torch.FloatTensor",
"torch.cuda.HalfTensor"): a constant while tracing (dtype and device are fixed by the guards).
`t.type(T)` with T such a string, a legacy tensor class (`torch.HalfTensor`) or a dtype is the
conversion to that dtype: `t.to(dtype)`, or the tensor itself when the dtype is already its own
(as `type` returns it). A target on another device, or anything else, is a break.
"""

import torch

from kiln.exc import unimplemented
from kiln.frontend.variables import tensor as tensor_vars
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.torch import call_tensor_op

_DTYPES = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.complex64,
    torch.complex128,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
)


def _names():
    return {torch.empty(0, dtype=d).type(): d for d in _DTYPES}  # "torch.FloatTensor" -> float32


_BY_NAME = _names()
_BY_DTYPE = {d: n for n, d in _BY_NAME.items()}


def _type_name(t):
    name = _BY_DTYPE.get(t.example.dtype)
    if name is None or t.device.type not in ("cpu", "cuda"):
        unimplemented(f"Tensor.type() of a {t.example.dtype} tensor on {t.device.type}")
    return name if t.device.type == "cpu" else name.replace("torch.", "torch.cuda.", 1)


def _target(arg):
    """(dtype, is_cuda) of a type() argument, or None."""
    value = arg.as_python_constant() if arg.is_python_constant() else None
    if isinstance(value, torch.dtype):
        return value, None
    if isinstance(value, str):
        cuda = value.startswith("torch.cuda.")
        dtype = _BY_NAME.get(value.replace("torch.cuda.", "torch.", 1))
        return (dtype, cuda) if dtype is not None else None
    value = getattr(arg, "value", None)
    if isinstance(value, type(torch.FloatTensor)):  # torch.HalfTensor, torch.cuda.FloatTensor
        return value.dtype, value.is_cuda
    return None


def tensor_type(tx, t, args, kwargs):
    """`t.type()` / `t.type(T)` (Note [Tensor: legacy type names])."""
    if not args and not kwargs:
        return ConstantVariable(_type_name(t))
    if kwargs or len(args) != 1:
        unimplemented("Tensor.type() with these arguments")
    target = _target(args[0])
    if target is None:
        unimplemented(f"Tensor.type({args[0]})")
    dtype, cuda = target
    if cuda is not None and cuda != (t.device.type == "cuda"):
        unimplemented("Tensor.type() to another device")
    if dtype == t.example.dtype:
        return t  # (type() returns the tensor itself)
    return call_tensor_op(tx, "call_method", "to", [t, ConstantVariable(dtype)], {})


tensor_vars.register_method("type", tensor_type)
