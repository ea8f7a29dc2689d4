"""`F.interpolate(x, scale_factor=...)` on a tensor with symbolic sizes: symbolic output sizes.

Note [Shapes: interpolate]
With `scale_factor` (and no `recompute_scale_factor`) torch 2.13's `F.interpolate` passes the scale
factors to the C++ op `upsample_*.vec(x, None, scale_factors)`, which computes the output size
`floor(double(size) * scale)` from `x.sizes()` in C++ (no SymInt path): every size of x would be
specialised. kiln records what that C++ does instead: the output sizes as size nodes, then the
explicit-size overload `upsample_*(x, output_size, [align_corners,] *scales)` with the same scales
(the kernels read the scales, so the numerics are eager's). `floor(s * scale)` is exact integer
arithmetic `(s * p) // q` for a scale p/q (q a power of two) whose product with any size is exact
in a double (p, q < 2**20); another scale specialises the size (a guard), as before. Anything else
(a `size=`, antialias, an unknown mode) keeps the old path: one call of `F.interpolate`.
"""

import inspect
import math
import operator

import torch
import torch.nn.functional as F

from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.lists import ListVariable
from kiln.frontend.variables.sym import SymNodeVariable, binary, specialised
from kiln.frontend.variables.tensor import TensorVariable
from kiln.frontend.variables.torch import call_tensor_op

_NEAREST = {"nearest": "upsample_nearest", "nearest-exact": "_upsample_nearest_exact"}
_LINEAR = {
    ("linear", 3): "upsample_linear1d",
    ("bilinear", 4): "upsample_bilinear2d",
    ("bicubic", 4): "upsample_bicubic2d",
    ("trilinear", 5): "upsample_trilinear3d",
}
_SIGNATURE = inspect.signature(F.interpolate)
EXACT_LIMIT = 2**20  # numerator/denominator bound of a scale whose products are exact


def _op(mode, dim):
    """The explicit-size upsample function for `mode` on a `dim`-d input, and whether it is linear."""
    if mode in _NEAREST and 3 <= dim <= 5:
        return getattr(torch._C._nn, f"{_NEAREST[mode]}{dim - 2}d"), False
    name = _LINEAR.get((mode, dim))
    return (getattr(torch._C._nn, name), True) if name else (None, False)


def exact_scale(scale):
    """(p, q) with scale == p / q when `floor(size * scale)` is `(size * p) // q` exactly, else None."""
    if not math.isfinite(scale) or scale <= 0:
        return None
    p, q = float(scale).as_integer_ratio()
    return (p, q) if p < EXACT_LIMIT and q < EXACT_LIMIT else None


def scaled_size(tx, size, scale):
    """The traced value of `floor(float(size) * scale)` for a size variable (Note above)."""
    if not isinstance(size, SymNodeVariable):
        return ConstantVariable(math.floor(float(size.as_python_constant()) * scale))
    ratio = exact_scale(scale)
    if ratio is None:  # a scale kiln cannot floor exactly: the size's value (a guard)
        return ConstantVariable(math.floor(float(specialised(size).value) * scale))
    p, q = ratio
    out = binary(tx, operator.mul, size, ConstantVariable(p)) if p != 1 else size
    return binary(tx, operator.floordiv, out, ConstantVariable(q)) if q != 1 else out


# the deprecated wrappers of F.interpolate, and the arguments they add
WRAPPERS = {
    F.upsample: {},
    F.upsample_nearest: {"mode": "nearest"},
    F.upsample_bilinear: {"mode": "bilinear", "align_corners": True},
}


def interpolate(tx, args, kwargs, fn=F.interpolate):
    """F.interpolate with scale factors on a symbolic tensor as size nodes + upsample; else None."""
    extra = WRAPPERS.get(fn, {})
    if any(k in kwargs for k in extra):
        return None
    kwargs = {**kwargs, **{k: ConstantVariable(v) for k, v in extra.items()}}
    x, c = _symbolic_call(_SIGNATURE, args, kwargs)
    if x is None:
        return None
    if c.get("size") is not None or c.get("recompute_scale_factor") or c.get("antialias"):
        return None
    scale, dim = c.get("scale_factor"), x.example.dim()
    fn, linear = _op(c.get("mode", "nearest"), dim)
    scales = list(scale) if isinstance(scale, tuple | list) else [scale] * (dim - 2)
    if fn is None or len(scales) != dim - 2:
        return None
    if not all(isinstance(s, int | float) and not isinstance(s, bool) for s in scales):
        return None
    align = c.get("align_corners")
    if not linear and align is not None:
        return None  # eager raises: the old path reproduces it
    sizes = [scaled_size(tx, x.size_var(tx, i + 2), float(s)) for i, s in enumerate(scales)]
    extra = [ConstantVariable(bool(align))] if linear else []
    scale_args = [ConstantVariable(float(s)) for s in scales]
    return call_tensor_op(
        tx, "call_function", fn, [x, ListVariable(sizes), *extra, *scale_args], {}
    )


# Note [Shapes: max_pool1d]
# `torch.max_pool1d` (what `F.max_pool1d` calls) is a C++ composite that, for an input not
# requiring grad, runs its own kernel with the output length computed from `x.sizes()`: the length
# would specialise. On a symbolic input kiln records `max_pool1d_with_indices(...)[0]` instead (the
# composite's own path when the input requires grad: the same maxima, with symbolic sizes).
_MAX_POOL1D_SIGNATURE = inspect.signature(F._max_pool1d)
MAX_POOL1D = (F.max_pool1d, F._max_pool1d, torch.max_pool1d)


def max_pool1d(tx, args, kwargs, fn=None):
    """max_pool1d on a symbolic tensor as max_pool1d_with_indices(...)[0]; else None."""
    x, c = _symbolic_call(_MAX_POOL1D_SIGNATURE, args, kwargs)
    if x is None:
        return None
    if c.pop("return_indices", False):
        return None
    if c.get("stride") is None:
        c["stride"] = []
    pooled = call_tensor_op(
        tx,
        "call_function",
        torch.max_pool1d_with_indices,
        [x, *(ConstantVariable(c[k]) for k in ("kernel_size", "stride")), *_rest(c)],
        {},
    )
    return pooled.items[0]


def _rest(c):
    defaults = {"padding": 0, "dilation": 1, "ceil_mode": False}
    return [ConstantVariable(c.get(k, d)) for k, d in defaults.items()]


def _symbolic_call(signature, args, kwargs):
    """(the symbolic input tensor, the other arguments' constant values) of a call, or (None,
    None) when the input is not a symbolic tensor or another argument is not a constant."""
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return None, None
    x = bound.arguments.get("input")
    if not isinstance(x, TensorVariable) or not x.is_symbolic():
        return None, None
    rest = {k: v for k, v in bound.arguments.items() if k != "input"}
    if not all(v.is_python_constant() for v in rest.values()):
        return None, None
    return x, {k: v.as_python_constant() for k, v in rest.items()}
