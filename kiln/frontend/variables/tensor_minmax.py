"""`max(a, b)` / `min(a, b)` builtins with one-element tensors among the items, as graph ops.

Note [Tensors: builtin max/min]
Python's `max(a, b)` compares (`b > a`) and returns the winner: for a one-element tensor that
comparison reads tensor data, which a graph cannot. torch.compile captures it (as a clamp). kiln
writes exactly Python's rule as ops: `max(a, b)` is `torch.where(b > a, b, a)` and `min(a, b)` is
`torch.where(b < a, b, a)` (more items fold left to right, as Python's loop does). The comparison
is the one eager makes, so NaNs and ties pick what eager picks, and the gradient goes to the item
eager returns (a clamp or torch.maximum would split ties and propagate NaNs).
Traced only where the values agree with eager:
  - every tensor has one element by its static shape (with more, eager raises: left to eager);
  - two tensors have the same shape and dtype (the winner keeps its own);
  - a number beside a tensor does not change the tensor's dtype (an int beside an int or float
    tensor, a float beside a float tensor), so the result has the tensor's dtype.
Two differences stay, as in torch.compile: when the number wins, the result is a 0-dim or
one-element tensor holding it, not the Python number (`max(t, 0)` is `tensor(0.)`, not `0`); and
a losing tensor that requires grad gets a zero gradient where eager leaves `.grad` None.
"""

import builtins

import torch

from kiln.exc import unimplemented
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.tensor import TensorVariable
from kiln.frontend.variables.torch import TorchVariable


def _one_element(t):
    return all(isinstance(s, int) and s == 1 for s in t.example.shape)


def _number(v):
    return isinstance(v, ConstantVariable) and type(v.value) in (int, float)


def _check(a, b):
    """Unsupported unless the pair is traced exactly (see the note)."""
    for v in (a, b):
        if isinstance(v, TensorVariable):
            if not _one_element(v):
                unimplemented("max()/min() of a tensor with more than one element (eager raises)")
        elif not _number(v):
            unimplemented(f"max()/min() of a tensor and {v}")
    if isinstance(a, TensorVariable) and isinstance(b, TensorVariable):
        if a.example.shape != b.example.shape or a.example.dtype != b.example.dtype:
            unimplemented("max()/min() of tensors of different shapes or dtypes")
        return
    t, n = (a, b) if isinstance(a, TensorVariable) else (b, a)
    dtype = t.example.dtype
    if dtype == torch.bool or dtype.is_complex:
        unimplemented(f"max()/min() of a {dtype} tensor and a number")
    if type(n.value) is float and not dtype.is_floating_point:
        unimplemented("max()/min() of an integer tensor and a float (the dtype would change)")


def _pick(tx, fn, a, b):
    """`b if b > a else a` (max) / `b if b < a else a` (min) as a where."""
    _check(a, b)
    gt, lt = TorchVariable(torch.gt), TorchVariable(torch.lt)
    wins = gt if fn is builtins.max else lt  # b wins if `b <op> a`
    flipped = lt if fn is builtins.max else gt
    if isinstance(b, TensorVariable):
        cond = wins.call_function(tx, [b, a], {})
    else:
        cond = flipped.call_function(tx, [a, b], {})  # `a < b` is `b > a`
    return TorchVariable(torch.where).call_function(tx, [cond, b, a], {})


def tensor_min_max(tx, fn, items):
    """max/min of items with a tensor among them, or None when no tensor is there."""
    if not any(isinstance(i, TensorVariable) for i in items):
        return None
    acc = items[0]
    for item in items[1:]:
        if isinstance(acc, ConstantVariable) and isinstance(item, ConstantVariable):
            acc = ConstantVariable(fn(acc.value, item.value))
        else:
            acc = _pick(tx, fn, acc, item)
    return acc
