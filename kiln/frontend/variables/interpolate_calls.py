"""F.interpolate to a symbolic output size, traced as the upsampling op it runs.

Note [Torch: interpolate to a symbolic size]
`F.interpolate(x, size=skip.shape[-2:])` (U-Nets, feature pyramids) with size symbols calls an
upsampling op's `.vec` overload, a C++ CompositeImplicitAutograd body that wants concrete ints:
its meta run raises "SymIntArrayRef expected to contain only concrete integers". Given the output
size, with no scale factor, F.interpolate is that op's default overload on it (the table below:
the op by mode and spatial rank, align_corners where the mode takes it), which takes SymInts and
has a shape rule: the call is traced as that op. Scale factors, mode "area" (an adaptive pool)
and what F.interpolate rejects keep the failing meta run's graph break.
"""

import inspect

import torch
import torch.nn.functional as F

from kiln.frontend.variables import torch as torch_vars
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.lists import BaseListVariable, ListVariable

aten = torch.ops.aten

# (mode, spatial dims, antialias) -> the op F.interpolate runs for a given output size
_OPS = {
    ("nearest", 1, False): aten.upsample_nearest1d.default,
    ("nearest", 2, False): aten.upsample_nearest2d.default,
    ("nearest", 3, False): aten.upsample_nearest3d.default,
    ("nearest-exact", 1, False): aten._upsample_nearest_exact1d.default,
    ("nearest-exact", 2, False): aten._upsample_nearest_exact2d.default,
    ("nearest-exact", 3, False): aten._upsample_nearest_exact3d.default,
    ("linear", 1, False): aten.upsample_linear1d.default,
    ("bilinear", 2, False): aten.upsample_bilinear2d.default,
    ("bilinear", 2, True): aten._upsample_bilinear2d_aa.default,
    ("bicubic", 2, False): aten.upsample_bicubic2d.default,
    ("bicubic", 2, True): aten._upsample_bicubic2d_aa.default,
    ("trilinear", 3, False): aten.upsample_trilinear3d.default,
}
_TAKES_ALIGN = ("linear", "bilinear", "bicubic", "trilinear")
_SIGNATURE = inspect.signature(F.interpolate)


def _bound(args, kwargs):
    """F.interpolate's parameters by name, defaults as constants (None where they do not bind)."""
    try:
        bound = _SIGNATURE.bind(*args, **kwargs)
    except TypeError:
        return None
    values = {p.name: ConstantVariable(p.default) for p in _SIGNATURE.parameters.values()}
    return values | bound.arguments


def _constant(v):
    return v.as_python_constant() if v.is_python_constant() else ...


def to_size(tx, target, args, kwargs):
    """`F.interpolate(x, size, mode=...)` traced as its upsampling op, or None."""
    if target is not F.interpolate:
        return None
    bound = _bound(args, kwargs)
    if bound is None or _constant(bound["size"]) is None:
        return None
    if _constant(bound["scale_factor"]) is not None:
        return None
    if _constant(bound["recompute_scale_factor"]) not in (None, False):
        return None  # (F.interpolate raises: not meaningful with an explicit size)
    mode, align, antialias = (_constant(bound[k]) for k in ("mode", "align_corners", "antialias"))
    x, size = bound["input"], bound["size"]
    example = getattr(x, "example", None)
    if example is None or not isinstance(mode, str) or not isinstance(antialias, bool):
        return None
    dims = example.dim() - 2
    op = _OPS.get((mode, dims, antialias))
    items = list(size.items) if isinstance(size, BaseListVariable) else [size] * dims
    if op is None or len(items) != dims or align is ...:
        return None
    op_args = [x, ListVariable(items)]
    if mode in _TAKES_ALIGN:
        op_args.append(ConstantVariable(bool(align)))
    elif align is not None:
        return None  # (F.interpolate raises: align_corners with a nearest mode)
    return torch_vars.call_tensor_op(tx, "call_function", op, op_args, {})


torch_vars.register_meta_fallback(to_size)
