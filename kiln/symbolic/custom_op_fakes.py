"""Custom operators (torch.library) with no fake kernel whose result follows from the schema alone.

Note [Custom ops: results that follow from the schema]
A custom operator defined with torch.library and given only a CPU/CUDA kernel cannot run on meta
tensors, so its result's metadata is unknown. One kind needs none: an operator that returns
nothing (`-> ()`) and writes some of its arguments (`Tensor(a!)`). Its writes keep the written
tensors' metadata (custom ops may not change their inputs' sizes), and its result is None, as
torch's fake tensors assume too. Such a call is traced as it is; the real kernel runs in the
graph. Every other operator without a meta or fake kernel stays a graph break (its result's
sizes would be a guess). Operators of torch's own namespaces never qualify: their meta kernels
are torch's.
"""

import torch

# namespaces whose operators are torch's own (a missing meta kernel there is not a user's op)
_TORCH_NAMESPACES = frozenset(("aten", "prim", "prims", "quantized", "_quantized", "rngprims"))


def _overload(target):
    """The OpOverload a call of `target` runs: itself, or a packet's only overload; else None."""
    if isinstance(target, torch._ops.OpOverload):
        return target
    if isinstance(target, torch._ops.OpOverloadPacket):
        names = target.overloads()
        if len(names) == 1:
            return getattr(target, names[0])
    return None


def returns_nothing_by_schema(target):
    """The custom OpOverload that `target` calls when its schema returns nothing and writes an
    argument (Note [Custom ops: results that follow from the schema]); else None."""
    op = _overload(target)
    if op is None or op.namespace in _TORCH_NAMESPACES:
        return None
    schema = op._schema
    if schema.returns or not schema.is_mutable:
        return None
    return op


def run_on_meta(target, args, kwargs):
    """`target(*args, **kwargs)` on meta tensors; None for a custom op without a meta kernel
    whose result follows from its schema (it returns nothing)."""
    try:
        return target(*args, **kwargs)
    except NotImplementedError:
        if returns_nothing_by_schema(target) is None:
            raise
        return None
