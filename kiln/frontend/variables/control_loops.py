"""torch's map and scan operators in traced code: the loop unrolled into the frame's graph.

Note [Control flow: map and scan unrolled]
`torch._higher_order_ops.map(f, xs, *args)` calls `f` on each slice of `xs` along dim 0 and stacks
the results; `.scan(combine_fn, init, xs, dim=0, reverse=False)` threads a carry through the
slices along `dim` and stacks the per-slice outputs. The number of slices is a static size, so
kiln traces the function once per slice straight into the frame's graph, with the ops eager runs
(scan: the inputs moved to dim 0 and flipped for `reverse`, each slice a `select`, the outputs
stacked, flipped back and moved to `dim`): one graph, eager's values and autograd's gradients.

Eager torch refuses some uses (side effects, in-place changes of an input, an output that is an
input or a view of one, inputs that alias each other, non-tensor outputs, a carry whose shape or
dtype changes). Before unrolling, the function is traced once into a graph of its own (the probe,
control_flow._trace_branch, as for a torch.cond branch) and each of those is a graph break with
the reason, so the call runs in Python and torch raises its own error. So is a symbolic length,
and more slices than config.loop_pass_limit.
"""

import torch

from kiln import config
from kiln.exc import unimplemented
from kiln.frontend.variables import control_flow as cf
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.lists import BaseListVariable, ListVariable, TupleVariable
from kiln.frontend.variables.tensor import TensorVariable
from kiln.frontend.variables.torch import call_tensor_op
from kiln.symbolic.fake import is_symbolic

_HOPS = getattr(torch, "_higher_order_ops", None)
MAP = getattr(_HOPS, "map", None)
SCAN = getattr(_HOPS, "scan", None)


def _tree(value, op, what):
    """(tensor leaves, rebuild(leaves) -> a variable of value's shape): a tensor, or a tuple or
    list of tensors."""
    if isinstance(value, TensorVariable):
        return [value], lambda leaves: leaves[0]
    if isinstance(value, BaseListVariable) and type(value) in (TupleVariable, ListVariable):
        items = list(value.items)
        if all(isinstance(v, TensorVariable) for v in items):
            kind = type(value)
            return items, lambda leaves: kind(list(leaves))
    unimplemented(f"{op}: {what} {value} (a tensor, or a tuple or list of tensors, expected)")


def _static(v, op):
    if is_symbolic(v.example):
        unimplemented(f"{op} on tensors with symbolic sizes")
    return v.example


def _no_shared_storage(leaves, op):
    seen = set()
    for v in leaves:
        key = cf._storage(v.example)
        if key in seen:
            unimplemented(f"{op}: two inputs share memory (torch raises)")
        seen.add(key)


def _op(tx, fn, *args):
    """fn(*args) recorded in the frame's graph (args: variables or Python constants)."""
    args = [
        a if isinstance(a, (TensorVariable, BaseListVariable)) else ConstantVariable(a)
        for a in args
    ]
    return call_tensor_op(tx, "call_function", fn, args, {})


def _length(leaves, dim, op):
    sizes = {_static(v, op).shape[dim] for v in leaves}
    if len(sizes) != 1 or 0 in sizes:
        unimplemented(f"{op}: the inputs' sizes along dim {dim} differ or are 0 (torch raises)")
    (n,) = sizes
    if n > config.loop_pass_limit:
        unimplemented(f"{op} over {n} slices (more than config.loop_pass_limit)")
    return n


def map_op(tx, f, xs, args):
    """Note [Control flow: map and scan unrolled]: torch._higher_order_ops.map."""
    op = "torch map"
    leaves, rebuild = _tree(xs, op, "mapped xs")
    tensor_args = []
    for a in args:
        if isinstance(a, TensorVariable):
            tensor_args.append(a)
        elif not a.is_python_constant():
            unimplemented(f"{op}: extra argument {a} (tensors or constants expected)")
    _no_shared_storage(leaves + tensor_args, op)
    n = _length(leaves, 0, op)
    slices = [_Example(v.example.select(0, 0), v) for v in leaves]
    graph, out = cf._trace_branch(
        tx, f, slices, "the function", pack=lambda phs: [rebuild(phs), *args], op=op
    )
    out_leaves, out_rebuild = _tree(out, op, "the function returns")
    cf._check_no_alias(graph, out_leaves, "the function", op)
    steps = []
    for i in range(n):
        sl = [_op(tx, torch.select, v, 0, i) for v in leaves]
        res = f.call_function(tx, [rebuild(sl), *args], {})
        steps.append(_tree(res, op, "the function returns")[0])
    stacked = [
        _op(tx, torch.stack, ListVariable([s[j] for s in steps]), 0) for j in range(len(steps[0]))
    ]
    return out_rebuild(stacked)


class _Example:
    """A slice's example for the probe: what _trace_branch reads of an operand."""

    def __init__(self, example, like):
        self.example = example
        self.device = like.device


def scan_op(tx, combine_fn, init, xs, dim, reverse):
    """Note [Control flow: map and scan unrolled]: torch._higher_order_ops.scan."""
    op = "torch scan"
    init_leaves, init_rebuild = _tree(init, op, "init")
    xs_leaves, xs_rebuild = _tree(xs, op, "xs")
    if not (dim.is_python_constant() and reverse.is_python_constant()):
        unimplemented(f"{op}: dim and reverse must be constants")
    dim, reverse = dim.as_python_constant(), reverse.as_python_constant()
    if type(dim) is not int or type(reverse) is not bool:
        unimplemented(f"{op}: dim {dim!r} / reverse {reverse!r} (torch raises)")
    ndim = _static(xs_leaves[0], op).dim()
    if not -ndim <= dim < ndim or any(_static(v, op).dim() != ndim for v in xs_leaves):
        unimplemented(f"{op}: dim {dim} does not fit every input (torch raises)")
    dim %= ndim
    _no_shared_storage(init_leaves + xs_leaves, op)
    n = _length(xs_leaves, dim, op)
    for v in init_leaves:
        _static(v, op)
    k = len(init_leaves)
    examples = [_Example(v.example, v) for v in init_leaves]
    examples += [_Example(v.example.select(dim, 0), v) for v in xs_leaves]
    pack = lambda phs: [init_rebuild(phs[:k]), xs_rebuild(phs[k:])]  # noqa: E731
    graph, out = cf._trace_branch(tx, combine_fn, examples, "the function", pack=pack, op=op)
    carry, ys = _pair(out, op)
    carry_leaves = _tree(carry, op, "the carry returned")[0]
    y_leaves, y_rebuild = _tree(ys, op, "the output returned")
    cf._check_same(init_leaves, carry_leaves, op)
    cf._check_no_alias(graph, carry_leaves + y_leaves, "the function", op)
    moved = [_op(tx, torch.movedim, v, dim, 0) if dim else v for v in xs_leaves]
    if reverse:
        moved = [_op(tx, torch.flip, v, [0]) for v in moved]
    carry_leaves, steps = init_leaves, []
    for i in range(n):
        sl = [_op(tx, torch.select, v, 0, i) for v in moved]
        res = combine_fn.call_function(tx, [init_rebuild(carry_leaves), xs_rebuild(sl)], {})
        carry, ys = _pair(res, op)
        carry_leaves = _tree(carry, op, "the carry returned")[0]
        steps.append(_tree(ys, op, "the output returned")[0])
    stacked = []
    for j in range(len(steps[0])):
        s = _op(tx, torch.stack, ListVariable([step[j] for step in steps]), 0)
        if reverse:
            s = _op(tx, torch.flip, s, [0])
        if dim and dim < s.example.dim():
            s = _op(tx, torch.movedim, s, 0, dim)
        stacked.append(s)
    return TupleVariable([_carry_like(carry, carry_leaves), y_rebuild(stacked)])


def _bind_scan(args, kwargs):
    names = ("combine_fn", "init", "xs")
    bound = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in (*names, "dim", "reverse") or k in bound:
            unimplemented(f"torch scan argument {k!r}")
        bound[k] = v
    if len(args) > 3 or any(n not in bound for n in names):
        unimplemented("torch scan called with the wrong arguments")
    dim = bound.get("dim", ConstantVariable(0))
    reverse = bound.get("reverse", ConstantVariable(False))
    return bound["combine_fn"], bound["init"], bound["xs"], dim, reverse


def _pair(out, op):
    if not isinstance(out, BaseListVariable) or len(out.items) != 2:
        unimplemented(f"{op}: the function must return (carry, output) (torch raises)")
    return out.items


def _carry_like(carry, leaves):
    """The final carry, shaped as the function returned it."""
    return _tree(carry, "torch scan", "the carry returned")[1](leaves)


def _map_call(tx, args, kwargs):
    if len(args) < 2 or kwargs:
        unimplemented("torch map called without f and xs, or with keyword arguments")
    return map_op(tx, args[0], args[1], args[2:])


def _scan_call(tx, args, kwargs):
    return scan_op(tx, *_bind_scan(args, kwargs))


cf.LOOP_OPS.update({op: call for op, call in ((MAP, _map_call), (SCAN, _scan_call)) if op})
