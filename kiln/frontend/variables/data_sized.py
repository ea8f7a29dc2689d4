"""`torch.nonzero(x)` kept in the graph under fullgraph=True (or config.capture_dynamic_output_shape_ops):
a result whose length is read from tensor data.

Note [Shapes: results sized by tensor data]
`x.nonzero()` has as many rows as x has nonzero elements: a size no trace can know. torch.compile
captures it under `fullgraph=True` (a graph break would be an error there) or with
`capture_dynamic_output_shape_ops`, and so does kiln: the result is a tensor of sizes `(u, x.dim())`
with `u` a new unbacked symbol (Note [Shapes: unbacked scalars]), strides `(1, u)` as eager's
column-major result, and the facts `u >= 0`, `u <= x.numel()` known without a check (nonzero
cannot break them). Ops after it compute with `u` symbolically; anything that needs its value
(a branch on the length, a view that must know it is 1) is the usual data-dependent break, an
error under fullgraph, as in torch.compile. `as_tuple=True` is the columns of that result, each
`(u,)`. Without the switch and outside fullgraph it stays the graph break it was (torch's default).
"""

import operator

import torch

from kiln import config
from kiln.exc import unimplemented
from kiln.frontend.variables import tensor as tensor_vars
from kiln.frontend.variables import torch as torch_vars
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.lists import TupleVariable
from kiln.symbolic import shape_env
from kiln.symbolic.fake import ProxyTensor
from kiln.symbolic.rule_sizes import same_size as _same_size

_REASON = "Tensor.nonzero() has a data-dependent shape"


def captures_data_sized(tx):
    """Whether ops sized by tensor data stay in the graph (see the note)."""
    return config.capture_dynamic_output_shape_ops or tx.output.settings.fullgraph


def nonzero(tx, tensor, args, kwargs):
    """`x.nonzero()` / `torch.nonzero(x)` / `as_tuple=True` (Note [Shapes: results sized by ...])."""
    kwargs = dict(kwargs)
    as_tuple = kwargs.pop("as_tuple", ConstantVariable(False))
    if args or kwargs or not as_tuple.is_python_constant():
        unimplemented("Tensor.nonzero() with these arguments")
    if not captures_data_sized(tx):
        unimplemented(_REASON)
    ex = tensor.example
    if ex.dim() == 0 or ex.layout != torch.strided or tensor.device.type == "meta":
        unimplemented("Tensor.nonzero() of a 0-d or non-strided tensor")
    env = tx.output.shape_env
    rows = env.create_unbacked("int")
    env.assume(rows.expr >= 0)
    numel = 1
    for n in ex.shape:
        numel *= shape_env.from_torch(n)
    env.assume(rows.expr <= (numel.expr if isinstance(numel, shape_env.SymNode) else numel))
    node = tx.output.create_node("call_function", torch.nonzero, (tensor.proxy,), {})
    hint, ndim = shape_env.hint_of(rows), ex.dim()
    meta = torch.empty_strided((hint, ndim), (1, hint), dtype=torch.int64, device="meta")
    example = ProxyTensor(meta, tensor.device, None, False, [rows, ndim], [1, rows], 0)
    node.meta["example_value"] = example
    result = tensor_vars.tensor_variable(node, example, tensor.device)
    if not as_tuple.as_python_constant():
        return result
    columns = result.call_method(tx, "unbind", [ConstantVariable(1)], {})
    return TupleVariable(list(columns.unpack_var_sequence(tx)))


def masked_items(tx, tensor, index):
    """`x[mask]` for a bool mask over x's leading dims, when captured: `x[mask.nonzero(as_tuple=
    True)]`, the indexing eager does by the mask's positions; else None."""
    if not captures_data_sized(tx) or not _is_mask_of(index, tensor):
        return None
    columns = nonzero(tx, index, [], {"as_tuple": ConstantVariable(True)})
    return torch_vars.call_tensor_op(tx, "call_function", operator.getitem, [tensor, columns], {})


def _is_mask_of(index, tensor):
    """A bool tensor whose sizes are the leading sizes of `tensor` (the same expressions)."""
    if not isinstance(index, tensor_vars.TensorVariable) or index.example.dtype != torch.bool:
        return False
    mask, ex = index.example, tensor.example
    if not 1 <= mask.dim() <= ex.dim():
        return False
    sizes = [
        (shape_env.from_torch(a), shape_env.from_torch(b)) for a, b in zip(mask.shape, ex.shape)
    ]
    return all(_same_size(a, b) for a, b in sizes)


def _nonzero_function(tx, fn, args, kwargs):
    if args and isinstance(args[0], tensor_vars.TensorVariable):
        return nonzero(tx, args[0], list(args[1:]), kwargs)
    return None


def _argwhere(tx, tensor, args, kwargs):
    """`torch.argwhere(x)` / `x.argwhere()`: eager's is `x.nonzero()`, the same result."""
    if args or kwargs:
        unimplemented("Tensor.argwhere() with these arguments")
    return nonzero(tx, tensor, [], {})


def _argwhere_function(tx, fn, args, kwargs):
    if len(args) == 1 and not kwargs and isinstance(args[0], tensor_vars.TensorVariable):
        return _argwhere(tx, args[0], [], {})
    return None


def _where_function(tx, fn, args, kwargs):
    """`torch.where(cond)` with one argument: eager's is `cond.nonzero(as_tuple=True)`."""
    if len(args) == 1 and not kwargs and isinstance(args[0], tensor_vars.TensorVariable):
        return nonzero(tx, args[0], [], {"as_tuple": ConstantVariable(True)})
    return None


tensor_vars.register_method("nonzero", nonzero)
torch_vars.register_function(torch.where, _where_function)
torch_vars.register_function(torch.nonzero, _nonzero_function)
tensor_vars.register_method("argwhere", _argwhere)
torch_vars.register_function(torch.argwhere, _argwhere_function)


def unique_consecutive(tx, tensor, args, kwargs):
    """`torch.unique_consecutive(x)` (no dim, no inverse or counts): values `(u,)` with `u`
    unbacked, `1 <= u <= x.numel()` for a nonempty x (Note [Shapes: results sized by ...])."""
    flags = dict(zip(("return_inverse", "return_counts", "dim"), args), **kwargs)
    if len(args) > 3 or any(
        not v.is_python_constant() or v.as_python_constant() not in (None, False)
        for v in flags.values()
    ):
        unimplemented("torch.unique_consecutive with an inverse, counts or a dim")
    ex = tensor.example
    if ex.layout != torch.strided or tensor.device.type == "meta":
        unimplemented("torch.unique_consecutive of a non-strided tensor")
    if not captures_data_sized(tx):
        unimplemented("torch.unique_consecutive has a data-dependent shape")
    env = tx.output.shape_env
    count = env.create_unbacked("int")
    numel = 1
    for n in ex.shape:
        numel *= shape_env.from_torch(n)
    env.assume(count.expr <= (numel.expr if isinstance(numel, shape_env.SymNode) else numel))
    env.assume(count.expr >= (1 if isinstance(numel, int) and numel > 0 else 0))
    node = tx.output.create_node("call_function", torch.unique_consecutive, (tensor.proxy,), {})
    meta = torch.empty((shape_env.hint_of(count),), dtype=ex.dtype, device="meta")
    example = ProxyTensor(meta, tensor.device, None, False, [count], [1], 0)
    node.meta["example_value"] = example
    return tensor_vars.tensor_variable(node, example, tensor.device)


def _unique_consecutive_function(tx, fn, args, kwargs):
    if args and isinstance(args[0], tensor_vars.TensorVariable):
        return unique_consecutive(tx, args[0], list(args[1:]), kwargs)
    return None


tensor_vars.register_method("unique_consecutive", unique_consecutive)
torch_vars.register_function(torch.unique_consecutive, _unique_consecutive_function)
