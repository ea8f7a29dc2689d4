"""A tensor made in the frame from an int constant, used as a Python index (Note [Operators:
an index tensor made from a constant])."""

import torch

from kiln.frontend.variables.constant import ConstantVariable

# Note [Operators: an index tensor made from a constant]
# `lst[torch.as_tensor(2)]` indexes with `t.__index__()`, the tensor's value: a graph input's
# value is data the trace does not read (a break). A tensor the frame made itself from an int
# constant (`torch.as_tensor(2)`, `torch.tensor(2)`, of an integer dtype) has a value known while
# tracing, as long as nothing used it since (its graph node has no users: an in-place op, a view,
# an `out=` would be one): the index is that int. Anything else keeps the break.

_MAKERS = (torch.as_tensor, torch.tensor)
INDEXED_BY_INDEX = (list, tuple, range, torch.Size)  # their __getitem__ calls index.__index__()
_INDEX_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def constant_index(var):
    """The int a tensor variable made from a constant stands for as an index (of a list, tuple,
    range or torch.Size: INDEXED_BY_INDEX), or None."""
    node = getattr(var, "proxy", None)
    node = getattr(node, "node", node)
    if getattr(node, "target", None) not in _MAKERS or getattr(node, "users", True):
        return None
    if len(node.args) != 1 or type(node.args[0]) is not int:
        return None
    if set(node.kwargs) - {"dtype", "device"}:
        return None
    example = getattr(var, "example", None)
    if not isinstance(example, torch.Tensor) or example.dim() != 0:
        return None
    if example.dtype not in _INDEX_DTYPES:
        return None
    value = node.args[0]
    if example.dtype is not torch.int64 and torch.tensor(value, dtype=example.dtype) != value:
        return None  # (wrapped around in a narrow dtype)
    return ConstantVariable(value)
