"""torch.cond in traced code: each branch traced into a graph of its own, one `kiln::cond` node.

Note [Control flow: tracing torch.cond]
`torch.cond(pred, true_fn, false_fn, operands)`:

- `pred` a Python constant, or a symbolic bool (a size comparison): the branch it selects is
  inlined like any call (a symbolic `pred` is guarded, as `if` on it would be).
- `pred` a one-element tensor (data-dependent): both branches are traced, each into its own FX
  graph whose placeholders are the operands; a tensor of the frame a branch reads (a closed-over
  tensor, a parameter) is lifted into an extra operand of both branches. The frame's graph gets
  one node `torch.ops.kiln.cond(pred, key, [operands..., lifted...])`
  (Note [Control flow: cond as an operator], kiln/symbolic/control_ops.py), which picks the
  branch at run time.

What torch.cond refuses is a graph break here, so that the call runs in Python and eager
torch.cond raises its own error: branches whose outputs differ in number, shape, dtype or device,
outputs that are not tensors, operands that are not tensors. What kiln does not capture is a
graph break too, with the reason: a branch with side effects (a print, a store to a list or an
object), a branch that writes a tensor in place in a way kiln cannot capture (Note [Control
flow: a branch that writes its inputs], cond_writes.py), a branch kiln cannot trace, symbolic sizes.
`torch.while_loop(cond_fn, body_fn, carried)` is traced the same way into one `kiln::while_loop`
node (Note [Control flow: while_loop as an operator]) when its carried values are tensors that
need no gradient; other uses are graph breaks. torch._higher_order_ops's map and scan are
unrolled into the frame's graph (control_loops.py, Note [Control flow: map and scan unrolled]);
the other control-flow operators are graph breaks that name them.

Note [Control flow: associative_scan inlined]
`associative_scan(combine_fn, xs, dim, combine_mode="generic")` is, in eager torch, Python: a
log-depth scan over strided slices that calls `torch.vmap(combine_fn)` on each pair of slices.
kiln traces that code like user code (its module is in config.traced_modules), so the graph has
the slicing, the vmapped combine_fn (one vmap node per level) and the concatenations, and the
values are eager's to the bit, gradients included. Selective-scan models (Mamba, Jamba, Zamba in
transformers) call it only while compiling. combine_mode="pointwise" (eager: CUDA only, a scan
compiled by torch) stays a graph break; on CPU tensors eager raises, and so does the break.
"""

import contextlib
import operator
import types

import torch
import torch.fx

from kiln.exc import Unsupported, unimplemented
from kiln.frontend.variables import cond_writes
from kiln.frontend.variables.base import PythonValueVariable
from kiln.frontend.variables.exceptions import ObservedException
from kiln.frontend.variables.functions import UserFunctionVariable
from kiln.frontend.variables.lists import BaseListVariable, ListVariable, TupleVariable
from kiln.frontend.variables.sym import SymNodeVariable
from kiln.frontend.variables.tensor import TensorVariable
from kiln.frontend.variables.torch import _mutates, wrap_tensor_result
from kiln.symbolic import control_ops
from kiln.symbolic.fake import is_symbolic

# Built-in backends that compile each branch graph too (the first time it runs); "eager" and
# user callables (handed the frame's graphs only) run the branch graphs as they are.
_COMPILING_BACKENDS = ("aot_eager", "kiln")

LOOP_OPS = {}  # torch's map and scan -> fn(tx, args, kwargs), filled by control_loops.py
_COND = getattr(torch, "cond", None)
_WHILE_LOOP = getattr(torch, "while_loop", None)
_ASSOCIATIVE_SCAN = getattr(getattr(torch, "_higher_order_ops", None), "associative_scan", None)
_INLINED_HELPERS = getattr(_ASSOCIATIVE_SCAN, "__module__", None)
# Note [Control flow: the cond operator called directly]
# Eager torch.cond compiles a wrapper that calls the operator object `cond_op(pred, true_fn,
# false_fn, operands)` (read from torch.cond's globals, never imported): kiln
# asked to compile that wrapper (torch.compile routed to kiln) traces the operator as torch.cond.
_COND_OP = getattr(_COND, "__globals__", {}).get("cond_op")


def handles(fn):
    """Whether `fn` is a control-flow operator this module answers for."""
    if fn is _COND or fn is _WHILE_LOOP:
        return True
    if _COND_OP is not None and fn is _COND_OP:
        return True
    if not isinstance(fn, types.FunctionType):
        return False
    if fn.__module__ == _INLINED_HELPERS and fn is not _ASSOCIATIVE_SCAN:
        return False  # Note [Control flow: associative_scan inlined]
    return (fn.__module__ or "").startswith("torch._higher_order_ops")


class ControlFlowOpVariable(PythonValueVariable):
    """torch.cond, torch.while_loop, ... before they are called."""

    def call_function(self, tx, args, kwargs):
        fn = self.value
        if fn is _COND or (fn is _COND_OP and len(args) == 4 and not kwargs):
            return cond(tx, *_bind_cond(args, kwargs))
        if fn is _WHILE_LOOP and len(args) == 3 and not kwargs:
            return while_loop(tx, *args)
        loop = LOOP_OPS.get(fn)  # map, scan (control_loops.py)
        if loop is not None:
            return loop(tx, args, kwargs)
        if fn is _ASSOCIATIVE_SCAN and _generic_mode(args, kwargs):
            # Note [Control flow: associative_scan inlined]
            return UserFunctionVariable(fn).call_function(tx, args, kwargs)
        name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn))
        unimplemented(f"control-flow operator {name} is not captured (it runs in Python)")

    def reconstruct(self, cg):
        if self.source is not None:
            return super().reconstruct(cg)
        cg.load_object(self.value)

    def __repr__(self):
        return f"ControlFlowOpVariable({getattr(self.value, '__name__', self.value)})"


def _generic_mode(args, kwargs):
    """Whether an associative_scan call asks for combine_mode="generic" (a constant)."""
    mode = kwargs.get("combine_mode", args[4] if len(args) > 4 else None)
    return mode is not None and mode.is_python_constant() and mode.as_python_constant() == "generic"


def _bind_cond(args, kwargs):
    names = ("pred", "true_fn", "false_fn", "operands")
    bound = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in names or k in bound:
            unimplemented(f"torch.cond argument {k!r}")
        bound[k] = v
    if len(args) > 4 or any(n not in bound for n in names[:3]):
        unimplemented("torch.cond called with the wrong arguments")
    return bound["pred"], bound["true_fn"], bound["false_fn"], bound.get("operands")


def cond(tx, pred, true_fn, false_fn, operands):
    """Note [Control flow: tracing torch.cond]."""
    items = _operand_items(tx, operands)
    if isinstance(pred, SymNodeVariable) or (
        pred.is_python_constant() and not isinstance(pred, TensorVariable)
    ):
        branch = true_fn if pred.truthy(tx) else false_fn
        return branch.call_function(tx, items, {})
    if not isinstance(pred, TensorVariable):
        unimplemented(f"torch.cond predicate {pred} (a bool or a one-element tensor expected)")
    if pred.example.numel() != 1:
        unimplemented("torch.cond predicate with more than one element (torch.cond raises)")
    for v in [pred, *items]:
        if not isinstance(v, TensorVariable):
            unimplemented(f"torch.cond operand {v} is not a tensor (torch.cond raises)")
        if is_symbolic(v.example):
            unimplemented("torch.cond on tensors with symbolic sizes")
    t_writes, f_writes = [], []
    t_graph, t_out = _trace_branch(tx, true_fn, items, "true_fn", writes=t_writes)
    f_graph, f_out = _trace_branch(tx, false_fn, items, "false_fn", writes=f_writes)
    t_items, f_items = _outputs(t_out, "true_fn"), _outputs(f_out, "false_fn")
    _check_same(t_items, f_items)
    _check_no_alias(t_graph, t_items, "true_fn")
    _check_no_alias(f_graph, f_items, "false_fn")
    device = items[0].device if items else pred.device
    # Note [Control flow: a branch that writes its inputs]
    written = cond_writes.written_inputs(
        tx, [(t_graph, t_writes), (f_graph, f_writes)], items, "torch.cond"
    )
    n_out = len(t_items)
    if written:
        t_items = t_items + cond_writes.clone_written(t_graph, items, written, device)
        f_items = f_items + cond_writes.clone_written(f_graph, items, written, device)
    lifted = _lift([t_graph, f_graph], [t_items, f_items])
    outputs = [(tuple(v.example.shape), v.example.dtype) for v in t_items]
    settings = tx.output.settings
    compiler = settings.backend if settings.backend_name in _COMPILING_BACKENDS else None
    key = control_ops.register_branches(
        torch.fx.GraphModule(torch.nn.Module(), t_graph, class_name="CondTrue"),
        torch.fx.GraphModule(torch.nn.Module(), f_graph, class_name="CondFalse"),
        outputs,
        compiler,
        settings.backend_name if compiler is not None else "",
        str(device),
    )
    proxies = [v.proxy for v in items] + lifted
    examples = [v.example for v in items] + [n.meta["example_value"] for n in lifted]
    result = control_ops.COND(pred.example, key, examples)
    node = tx.output.create_node("call_function", control_ops.COND, (pred.proxy, key, proxies), {})
    out = wrap_tensor_result(tx, node, list(result), device)
    cond_writes.write_back(tx, written, items, out.items[n_out:], device)
    if isinstance(t_out, TensorVariable):
        return out.items[0]
    if isinstance(t_out, TupleVariable):
        return TupleVariable(out.items[:n_out])
    return ListVariable(out.items[:n_out])


def while_loop(tx, cond_fn, body_fn, carried):
    """`torch.while_loop(cond_fn, body_fn, carried)`: one `kiln::while_loop` node whose loop runs
    at run time (Note [Control flow: while_loop as an operator])."""
    items = _operand_items(tx, carried)
    for v in items:
        if not isinstance(v, TensorVariable):
            unimplemented(f"torch.while_loop carried value {v} is not a tensor")
        if is_symbolic(v.example):
            unimplemented("torch.while_loop on tensors with symbolic sizes")
    if not items:
        unimplemented("torch.while_loop without carried values")
    c_graph, c_out = _trace_branch(tx, cond_fn, items, "cond_fn")
    b_graph, b_out = _trace_branch(tx, body_fn, items, "body_fn")
    (c_item,) = _outputs(c_out, "cond_fn") if isinstance(c_out, TensorVariable) else [None]
    if c_item is None or c_item.example.numel() != 1 or c_item.example.dtype != torch.bool:
        unimplemented("torch.while_loop: cond_fn does not return a one-element bool tensor")
    b_items = _outputs(b_out, "body_fn")
    _check_same(items, b_items)
    lifted = _lift([c_graph, b_graph], [[c_item], b_items])
    examples = [v.example for v in items] + [n.meta["example_value"] for n in lifted]
    if torch.is_grad_enabled() and any(e.requires_grad for e in examples):
        unimplemented("torch.while_loop on tensors that require grad (no gradient is captured)")
    settings = tx.output.settings
    compiler = settings.backend if settings.backend_name in _COMPILING_BACKENDS else None
    key = control_ops.register_branches(
        torch.fx.GraphModule(torch.nn.Module(), c_graph, class_name="WhileCond"),
        torch.fx.GraphModule(torch.nn.Module(), b_graph, class_name="WhileBody"),
        [(tuple(v.example.shape), v.example.dtype) for v in items],
        compiler,
        "while" + (settings.backend_name if compiler is not None else ""),
        str(items[0].device),
    )
    result = control_ops.WHILE_LOOP(key, examples[: len(items)], examples[len(items) :])
    proxies = [v.proxy for v in items]
    node = tx.output.create_node(
        "call_function", control_ops.WHILE_LOOP, (key, proxies, lifted), {}
    )
    out = wrap_tensor_result(tx, node, list(result), items[0].device)
    return TupleVariable(out.items)


def _operand_items(tx, operands):
    if operands is None:
        return []
    if not isinstance(operands, BaseListVariable):
        unimplemented(f"torch.cond operands {operands} (a tuple of tensors expected)")
    return list(operands.unpack_var_sequence(tx))


def _trace_branch(tx, fn, items, name, pack=None, op="torch.cond", local_writes=False, writes=None):
    """Trace `fn(*items)` into a graph of its own: (graph, the value it returns); `pack` makes the
    call's arguments from the items' placeholders. `local_writes`: in-place changes of tensors the
    graph made itself (sharing no memory with its inputs) are allowed; `writes`: a list that
    collects the other in-place ops (for cond_writes) instead of a graph break."""
    graph = torch.fx.Graph()
    args = []
    for i, v in enumerate(items):
        ph = graph.placeholder(f"arg{i}")
        ph.meta["example_value"] = v.example
        args.append(TensorVariable(ph, v.example, v.device))
    output = tx.output
    effects = output.side_effects
    snapshot, version = effects.snapshot(), effects.version

    def create_node(kind, target, node_args, node_kwargs):
        return graph.create_node(kind, target, tuple(node_args), dict(node_kwargs))

    prev = output.__dict__.get("create_node")  # (a cond inside a branch of another)
    output.create_node = create_node  # every op the branch records goes to its graph
    try:
        result = fn.call_function(tx, pack(args) if pack else args, {})
    except Unsupported as e:
        unimplemented(f"{op}: {name} is not traceable: {e.msg}")
    except ObservedException:  # (raised by the branch: eager torch.cond raises it too)
        unimplemented(f"{op}: {name} raises an exception")
    finally:
        if prev is None:
            del output.create_node
        else:
            output.create_node = prev
    if effects.version != version or effects.changed_since(snapshot):
        unimplemented(f"{op}: {name} has side effects (not captured)")
    for node in graph.nodes:
        if node.op in ("call_function", "call_method") and (
            _mutates(node.target, node.kwargs) or node.target is operator.setitem
        ):
            if writes is not None and _writes_own_tensor(graph, node):
                continue
            if writes is not None:
                writes.append(node)
            elif not (local_writes and _writes_own_tensor(graph, node)):
                unimplemented(f"{op}: {name} mutates a tensor in place (not captured)")
    return graph, result


def _writes_own_tensor(graph, node):
    """Whether an in-place op writes a tensor `graph` made (no `out=`; its memory is not that of
    a placeholder or of a tensor read from outside the graph)."""
    target = node.args[0] if node.args else None
    if "out" in node.kwargs or not isinstance(target, torch.fx.Node) or target.op == "placeholder":
        return False
    own = set(graph.nodes)
    outside = [n for n in graph.nodes if n.op == "placeholder"]
    outside += [a for n in graph.nodes for a in n.all_input_nodes if a not in own]
    written = target.meta.get("example_value")
    if (
        target not in own
        or type(written) is not torch.Tensor
        or cond_writes.may_alias_by_layout(target, own)
    ):
        return False
    return all(
        not isinstance(n.meta.get("example_value"), torch.Tensor)
        or _storage(n.meta["example_value"]) != _storage(written)
        for n in outside
    )


def _outputs(out, name):
    """The tensors a branch returns (a tensor, or a tuple or list of them)."""
    items = out.items if isinstance(out, BaseListVariable) else [out]
    if isinstance(out, BaseListVariable) and type(out) not in (TupleVariable, ListVariable):
        unimplemented(f"torch.cond: {name} returns {out}")
    for v in items:
        if not isinstance(v, TensorVariable):
            unimplemented(f"torch.cond: {name} returns {v}, not a tensor (torch.cond raises)")
        if is_symbolic(v.example):
            unimplemented("torch.cond on tensors with symbolic sizes")
    return items


def _check_same(t_items, f_items, op="torch.cond"):
    if len(t_items) != len(f_items):
        unimplemented(
            f"{op}: the branches return {len(t_items)} and {len(f_items)} tensors ({op} raises)"
        )
    for i, (a, b) in enumerate(zip(t_items, f_items)):
        ea, eb = a.example, b.example
        if ea.shape != eb.shape or ea.dtype != eb.dtype or a.device != b.device:
            unimplemented(
                f"{op}: output {i} differs between the branches "
                f"({tuple(ea.shape)} {ea.dtype} vs {tuple(eb.shape)} {eb.dtype}; {op} raises)"
            )


_storage = cond_writes.storage


def _check_no_alias(graph, items, name, op="torch.cond"):
    """An output that is (a view of) an operand, a tensor of the frame or another output: torch.cond
    refuses it."""
    own = set(graph.nodes)
    inputs = [n for n in graph.nodes if n.op == "placeholder"]
    inputs += [a for n in graph.nodes for a in n.all_input_nodes if a not in own]
    inputs += [v.proxy for v in items if v.proxy not in own]
    seen = {
        _storage(n.meta["example_value"])
        for n in inputs
        if isinstance(n.meta.get("example_value"), torch.Tensor)
    }
    for v in items:
        if _storage(v.example) in seen:
            unimplemented(f"{op}: {name} returns an alias of its input ({op} raises)")
        seen.add(_storage(v.example))


def _lift(graphs, outputs, op="torch.cond"):
    """Finish the branch graphs: the frame's nodes they read become extra placeholders (the
    same list in both); returns those nodes of the frame's graph."""
    foreign = {}
    for graph, items in zip(graphs, outputs):
        own = set(graph.nodes)
        for node in graph.nodes:
            for a in node.all_input_nodes:
                if a not in own:
                    foreign.setdefault(a, None)
        for v in items:
            if v.proxy not in own:
                foreign.setdefault(v.proxy, None)
    lifted = list(foreign)
    for n in lifted:
        if not isinstance(n.meta.get("example_value"), torch.Tensor):
            unimplemented(f"{op}: a traced function reads {n.name}, not a tensor")
        if is_symbolic(n.meta["example_value"]):
            unimplemented(f"{op} on tensors with symbolic sizes")
    for graph, items in zip(graphs, outputs):
        first = next((n for n in graph.nodes if n.op != "placeholder"), None)
        where = graph.inserting_before(first) if first is not None else contextlib.nullcontext()
        with where:
            phs = {}
            for j, n in enumerate(lifted):
                ph = graph.placeholder(f"lifted{j}")
                ph.meta["example_value"] = n.meta["example_value"]
                phs[n] = ph
        swap = phs.get
        for node in list(graph.nodes):
            if node.op != "placeholder":
                node.args = torch.fx.node.map_arg(node.args, lambda a, swap=swap: swap(a, a))
                node.kwargs = torch.fx.node.map_arg(node.kwargs, lambda a, swap=swap: swap(a, a))
        graph.output(tuple(phs.get(v.proxy, v.proxy) for v in items))
        graph.lint()
    return lifted
