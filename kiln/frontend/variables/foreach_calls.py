"""torch._foreach_* ops whose meta run fails, traced one tensor at a time.

Note [Torch: foreach ops one tensor at a time]
A foreach op applies one op to each tensor of its lists (`_foreach_lerp_(xs, ys, w)` is
`xs[i].lerp_(ys[i], w)` for each i; `_foreach_pow(s, ts)` is `tuple(torch.pow(s, t) for t in ts)`).
Some of them read a 0-d tensor argument's value in their meta kernel (an `.item()` a meta tensor
cannot answer): those are traced as the per-tensor ops they stand for, in order, which is what
their CPU kernels do. An in-place one returns its first list itself; the others a tuple of the
results.
"""

import torch

from kiln.frontend.variables import torch as torch_vars
from kiln.frontend.variables.lists import BaseListVariable, TupleVariable

_PREFIX = "_foreach_"


def per_tensor(tx, target, args, kwargs):
    """The traced per-tensor form of a foreach call, or None when it has none."""
    name = getattr(target, "__name__", "")
    if not isinstance(name, str) or not name.startswith(_PREFIX) or kwargs:
        return None
    op = name[len(_PREFIX) :]
    inplace = op.endswith("_")
    lists = [a for a in args if isinstance(a, BaseListVariable)]
    if not lists or len({len(a.items) for a in lists}) != 1:
        return None
    if inplace and not isinstance(args[0], BaseListVariable):
        return None
    fn = None if inplace else getattr(torch, op, None)
    if not inplace and fn is None:
        return None
    results = []
    for i in range(len(lists[0].items)):
        item_args = [a.items[i] if isinstance(a, BaseListVariable) else a for a in args]
        if inplace:
            torch_vars.call_tensor_op(tx, "call_method", op, item_args, {})
        else:
            results.append(torch_vars.call_tensor_op(tx, "call_function", fn, item_args, {}))
    return args[0] if inplace else TupleVariable(results)  # (an in-place one: its first list)


torch_vars.register_meta_fallback(per_tensor)
