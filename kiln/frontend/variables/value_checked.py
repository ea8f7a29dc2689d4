"""torch calls whose checks of their input values a graph would skip (Note [Torch: value checks])."""

import torch

from kiln.exc import unimplemented
from kiln.frontend.variables import runtime_asserts
from kiln.frontend.variables import torch as torch_vars
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.tensor import TensorVariable
from kiln.symbolic import shape_env

# Note [Torch: value checks]
# `F.one_hot(x, n)` raises in eager when a class value is negative or not below n: its C++ body
# reads x's min and max. Traced, the call decomposes on data-less tensors, where those reads are
# skipped, and the graph would write a row of zeros (or a wrong one) for a bad class instead of
# raising. So the graph computes the checks eager makes, in eager's order and with its messages,
# as run-time assertions (`aten._assert_async`, RuntimeError: Note [Asserts: operators every
# backend runs]) before the one_hot:
#     torch._assert_async(x.min() >= 0, "Class values must be non-negative.")
#     torch._assert_async(x.max() < n, "Class values must be smaller than num_classes.")
# (none for an empty x, which eager does not check). Without n (`num_classes=-1`) the result's
# size is x.max() + 1, a size read from tensor data: still a graph break, as are a num_classes
# that is not a positive constant and an index tensor that is not int64 (eager raises).
_NEGATIVE = "Class values must be non-negative."
_TOO_LARGE = "Class values must be smaller than num_classes."


def _one_hot(tx, fn, args, kwargs):
    if len(args) == 1:
        args = [*args, kwargs.pop("num_classes", ConstantVariable(-1))]
    if kwargs or len(args) != 2 or not isinstance(args[0], TensorVariable):
        unimplemented("torch.nn.functional.one_hot with unexpected arguments")
    x, n = args
    n = n.as_python_constant() if n.is_python_constant() else None
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        unimplemented(
            "torch.nn.functional.one_hot without a positive constant num_classes (its size is "
            "read from the class values)"
        )
    if type(x) is not TensorVariable or x.example.dtype != torch.int64:
        unimplemented("torch.nn.functional.one_hot of a value that is not an int64 tensor")
    sizes = [shape_env.from_torch(s) for s in x.example.shape]
    if not any(isinstance(s, int) and s == 0 for s in sizes):
        # (a symbolic size is never 0: sizes 0 and 1 are specialised)
        op = torch_vars.call_tensor_op
        low = op(tx, "call_method", "min", [x], {})
        ok = op(tx, "call_function", torch.ge, [low, ConstantVariable(0)], {})
        runtime_asserts.assert_async(tx, torch._assert_async, [ok, ConstantVariable(_NEGATIVE)], {})
        high = op(tx, "call_method", "max", [x], {})
        ok = op(tx, "call_function", torch.lt, [high, ConstantVariable(n)], {})
        runtime_asserts.assert_async(
            tx, torch._assert_async, [ok, ConstantVariable(_TOO_LARGE)], {}
        )
    return torch_vars.call_tensor_op(tx, "call_function", fn, [x, ConstantVariable(n)], {})


torch_vars.register_function(torch.nn.functional.one_hot, _one_hot)
