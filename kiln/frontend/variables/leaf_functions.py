"""Calls of functions `kiln.leaf_function` marked: one `kiln::leaf_call` node (Note [leaf_function:
an opaque op run at run time] in kiln/symbolic/leaf_ops.py).

The arguments are flattened as nonstrict_trace's are (tensors become the node's inputs, constants
stay in the plan and are guarded as the frame's constants are), and an nn.Module from a source is
passed as itself, its parameters and buffers more inputs, swapped into it around the body
(`leaf_ops.module_tensors`: meta ones for the fake, detached ones for gradients); the result's
structure, constants and tensor metadata come from running the registered fake implementation
on the meta examples. A call without a fake, an argument or result of another type (a user
object), a module the frame changed and a frame with symbolic sizes are breaks that say so; a
`mutates_args` expression naming no tensor is the user's error (kiln.exc.UserError).
"""

import inspect

import torch

from kiln.exc import UserError, unimplemented
from kiln.frontend.variables import nonstrict_calls
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.dicts import ConstDictVariable
from kiln.frontend.variables.lists import ListVariable, TupleVariable
from kiln.frontend.variables.nonstrict_calls import flatten_argument
from kiln.symbolic import leaf_ops, leaf_scalars


class _Slot:
    """A flat input's number, standing in for its tensor while a mutates_args expression runs."""

    def __init__(self, index):
        self.index = index


def _slots_of(value):
    if isinstance(value, _Slot):
        return [value.index]
    if isinstance(value, (list, tuple)):
        return [i for v in value for i in _slots_of(v)]
    if isinstance(value, dict):
        return [i for v in value.values() for i in _slots_of(v)]
    return []


def _mutated_inputs(leaf, site, n_inputs):
    """The flat input numbers the expressions of `mutates_args` name (a module's buffers and
    parameters are slots too while they run: `mod.running_mean`)."""
    if not leaf.leaf_mutates_args:
        return ()
    slots, swaps = iter([_Slot(i) for i in range(n_inputs)]), []
    args = [leaf_ops.rebuild(p, slots, swaps) for p in site.arg_plans]
    kwargs = {k: leaf_ops.rebuild(p, slots, swaps) for k, p in site.kwarg_plans.items()}
    bound = inspect.signature(leaf.leaf_real_fn).bind(*args, **kwargs)
    mutated = set()
    with leaf_ops.module_tensors(swaps):
        for expr in sorted(leaf.leaf_mutates_args):
            try:
                found = _slots_of(eval(expr, {}, dict(bound.arguments)))  # noqa: S307 (the user's)
            except Exception as e:
                unimplemented(f"leaf_function {site.name}: mutates_args {expr!r} raised {e!r}")
            if not found:  # (the user's mistake: raised, neither a break nor an eager run)
                raise UserError(
                    f"leaf_function {site.name}: mutates_args {expr!r} resolved to a non-leaf "
                    "value, not a tensor: name the tensors it changes (e.g. 'model.running_mean')"
                )
            mutated.update(found)
    return tuple(sorted(mutated))


def _wrap_result(tx, plan, tensors):
    if plan is leaf_ops.TENSOR:
        return next(tensors)
    kind, body = plan
    if kind == "const":
        return ConstantVariable(body)
    if kind == leaf_scalars.SCALAR:  # Note [leaf_function: numbers read from tensor data]
        return next(tensors).call_method(tx, "item", [], {})
    if kind == leaf_ops.TREE:  # a registered pytree node: its unflatten function traced
        spec, plans = body
        leaves = [_wrap_result(tx, p, tensors) for p in plans]
        return nonstrict_calls.USER_TREES["unflatten"](tx, leaves, spec)
    if kind is dict:
        return ConstDictVariable({k: _wrap_result(tx, p, tensors) for k, p in body.items()})
    items = [_wrap_result(tx, p, tensors) for p in body]
    return TupleVariable(items) if kind is tuple else ListVariable(items)


def leaf_call(tx, leaf, args, kwargs):
    """The `kiln::leaf_call` node of a call of the leaf function `leaf`, and its result."""
    name = leaf.leaf_real_fn.__qualname__
    if leaf.leaf_fake_fn is None:
        unimplemented(
            f"leaf_function '{leaf.leaf_real_fn.__name__}' requires a fake implementation. "
            "Please provide one using the @<func>.register_fake decorator."
        )
    if tx.output.fake_inputs:
        unimplemented(f"leaf_function {name} in a frame with symbolic sizes")
    what = f"leaf_function {name}"
    tensors = []
    arg_plans = [flatten_argument(a, tensors, name, what, tx, modules=True) for a in args]
    kwarg_plans = {
        k: flatten_argument(v, tensors, name, what, tx, modules=True) for k, v in kwargs.items()
    }
    site = leaf_ops.LeafSite(
        name, leaf.leaf_real_fn, leaf.leaf_fake_fn, arg_plans, kwarg_plans, (), ()
    )
    site.mutated = _mutated_inputs(leaf, site, len(tensors))
    examples = [t.example for t in tensors]
    site.grad_mask = tuple(
        i not in site.mutated and torch.is_grad_enabled() and e.requires_grad
        for i, e in enumerate(examples)
    )
    fake_in = [
        torch.empty_strided(e.shape, e.stride(), dtype=e.dtype, device="meta") for e in examples
    ]
    try:
        out = []
        with leaf_scalars.scalar_reads():  # Note [leaf_function: numbers read from ...]
            result = leaf_ops.call_site(site, leaf.leaf_fake_fn, fake_in)
        site.out_plan = leaf_ops.flatten_value(result, out, name)
    except Exception as e:
        unimplemented(f"the fake implementation of {what} raised {type(e).__name__}: {e}")
    site.out_meta = [(tuple(o.shape), o.dtype) for o in out]
    number = leaf_ops.register_site(site)
    from kiln.frontend.variables.torch import call_tensor_op

    node_out = call_tensor_op(
        tx,
        "call_function",
        leaf_ops.LEAF_CALL,
        [ConstantVariable(number), ListVariable(list(tensors))],
        {},
        what=what,
    )
    flat = list(node_out.items)
    n_out = len(site.out_meta)
    for i, new in zip(site.mutated, flat[n_out:-1]):
        tensors[i].call_method(tx, "copy_", [new], {})
    return _wrap_result(tx, site.out_plan, iter(flat[:n_out]))
