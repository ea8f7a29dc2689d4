"""`Tensor.new(...)`, the legacy constructor, as the modern call each argument form means.

Note [Tensors: Tensor.new]
`x.new(...)` makes a tensor with x's dtype and device; what it makes depends on the arguments'
Python types, not their values:

| arguments                              | eager meaning                      | traced as              |
| -------------------------------------- | ---------------------------------- | ---------------------- |
| none (or only `size=`)                 | an empty 0-element (sized) tensor  | `x.new_empty(size)`    |
| ints / SymInts, or one `torch.Size`    | uninitialised tensor of that size  | `x.new_empty(sizes)`   |
| one list or tuple (not a torch.Size)   | a tensor holding that data         | `x.new_tensor(data)`   |
| one tensor of x's dtype                | an alias of that tensor            | `t.view_as(t)`         |

Anything else (another dtype, tensors inside the data, unknown keywords) is a graph break, so
eager raises or computes it exactly.
"""

from kiln.exc import unimplemented
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.lists import BaseListVariable, SizeVariable, TupleVariable
from kiln.frontend.variables.sym import SymNodeVariable
from kiln.frontend.variables.torch import call_tensor_op


def _is_int(var):
    if isinstance(var, SymNodeVariable):
        return True
    return isinstance(var, ConstantVariable) and type(var.value) is int


def _is_data(var):
    if isinstance(var, BaseListVariable):
        return True
    return isinstance(var, ConstantVariable) and type(var.value) in (tuple, list)


def tensor_new(tx, tensor, args, kwargs):
    """`tensor.new(*args, **kwargs)` per Note [Tensors: Tensor.new]."""
    kwargs = dict(kwargs)
    if set(kwargs) - {"size", "device"}:
        unimplemented(f"Tensor.new() with keywords {sorted(kwargs)}")
    size = kwargs.pop("size", None)
    if size is not None:
        if args:
            unimplemented("Tensor.new() with both sizes and size=")
        args = [size] if isinstance(size, SizeVariable) else list(size.unpack_var_sequence(tx))
    if len(args) == 1 and isinstance(args[0], type(tensor)) and not kwargs:
        other = args[0]
        if other.example.dtype != tensor.example.dtype or other.device != tensor.device:
            unimplemented("Tensor.new(tensor) of another dtype or device (eager raises)")
        return call_tensor_op(tx, "call_method", "view_as", [other, other], {}, what="new")
    if len(args) == 1 and isinstance(args[0], SizeVariable):
        sizes = list(args[0].items)
    elif all(_is_int(a) for a in args):
        sizes = list(args) if args or size is not None else [ConstantVariable(0)]
    elif len(args) == 1 and _is_data(args[0]):
        data = args[0]
        if not data.is_python_constant():
            unimplemented("Tensor.new(data) with data that is not constant")
        return call_tensor_op(tx, "call_method", "new_tensor", [tensor, data], kwargs, what="new")
    else:
        unimplemented(f"Tensor.new() with arguments {args}")
    return call_tensor_op(
        tx, "call_method", "new_empty", [tensor, TupleVariable(sizes)], kwargs, what="new"
    )
