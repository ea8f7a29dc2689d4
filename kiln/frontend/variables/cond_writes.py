"""In-place writes of a torch.cond branch to the tensors it is given: captured as new values.

Note [Control flow: a branch that writes its inputs]
A branch may write a tensor it did not make: an operand (`x.add_(1)`), a tensor of the frame it
closes over (`self.buf.add_(1)`), or a view of one (`x[0].zero_()`). Eager torch.cond runs the
branch on those very tensors, so after the call they hold the new values. kiln keeps the
`kiln::cond` operator free of writes (every stage sees a pure op) and moves the write to the
frame's graph, right after the cond node:

    branch graph:  x_w = x.clone(); <the branch, every use of x now x_w>; return (..., x_w)
    frame graph:   outs = kiln::cond(pred, key, [x, ...]); x.copy_(outs[-1])

Both branches return the new value of every tensor either of them writes (one that a branch
leaves alone comes back as its clone), so the op's outputs are the same whichever runs. The
copy is placed where eager's write is observed from the frame (after the call, before any later
read), and an ATen-level backend sees an ordinary input mutation. What would make the clone
differ from the tensor itself is a graph break instead:

- the written tensor shares memory with another tensor the branches read (a write through one
  would show through the other). Inputs of the frame have examples of their own even where the
  tensors share memory, so for a written input of the frame the tensors are compared, and a
  guard (`GuardKind.SEPARATE_MEMORY`) keeps them apart;
- the clone's layout would differ (the tensor is not dense), the branch reads the storage beyond
  the tensor (`as_strided`, `set_`, ...), or changes its metadata in place (`squeeze_`, `t_`);
- the write goes through an op that is a view or a copy depending on the layout (`reshape`), or
  through `out=` (which may resize);
- grad mode is on: torch.cond refuses such a branch then (it raises), so the call runs in Python.
"""

import contextlib

import torch
import torch.fx

from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.variables.tensor import TensorVariable

# Ops that return their input or a copy depending on its layout: whether they alias at run time
# is not told by the traced examples (under torch.vmap the layout is the batched tensor's).
LAYOUT_ALIASING = frozenset({"contiguous", "reshape", "reshape_as", "flatten", "unflatten"})
# Ops that read a tensor's storage beyond its own elements or change its metadata in place: a
# clone of the tensor would answer them differently.
_STORAGE_OR_METADATA = frozenset(
    {"as_strided", "as_strided_", "set_", "resize_", "resize_as_", "squeeze_", "unsqueeze_"}
    | {"transpose_", "t_", "swapdims_", "swapaxes_", "detach_", "requires_grad_", "rename_"}
    | {"untyped_storage", "storage", "storage_offset", "data_ptr", "share_memory_"}
)


def storage(t):
    """The identity of a tensor example's storage (views share it)."""
    return t.untyped_storage()._cdata


def _name(target):
    return target if isinstance(target, str) else getattr(target, "__name__", "")


def may_alias_by_layout(node, own):
    """Whether `node` or a node of `own` it is computed from is a LAYOUT_ALIASING op."""
    seen, todo = set(), [node]
    while todo:
        n = todo.pop()
        if n in seen or n not in own:
            continue
        seen.add(n)
        if _name(n.target) in LAYOUT_ALIASING:
            return True
        todo.extend(n.all_input_nodes)
    return False


def _inputs(graph):
    """The placeholders of a branch graph and the frame's nodes it reads, in order."""
    own = set(graph.nodes)
    found = {n: None for n in graph.nodes if n.op == "placeholder"}
    for n in graph.nodes:
        for a in n.all_input_nodes:
            if a not in own:
                found.setdefault(a, None)
    return list(found)


def _dense(t):
    """Whether `t` covers its memory without gaps or overlaps (a clone keeps its strides)."""
    dims = sorted((st, sz) for sz, st in zip(t.shape, t.stride()) if sz != 1)
    expected = 1
    for st, sz in dims:
        if st != expected:
            return False
        expected *= sz
    return True


def _example(node):
    val = node.meta.get("example_value")
    return val if isinstance(val, torch.Tensor) else None


def _frame_value(node, items, graph):
    """The frame's node a branch input stands for (an operand's placeholder -> its proxy)."""
    if node.op == "placeholder" and node.graph is graph:
        phs = [n for n in graph.nodes if n.op == "placeholder"]
        return items[phs.index(node)].proxy
    return node


def written_inputs(tx, branches, items, op):
    """The frame's nodes the branches write (`branches`: (graph, writes) pairs, `writes` the
    nodes that write a tensor the graph did not make); graph break when they cannot be captured.
    """
    frame_inputs = {  # storage of an input's example -> (source, the tensor)
        storage(_example(node)): (source, value)
        for source, value, node in tx.output.graph_inputs
        if isinstance(value, torch.Tensor) and _example(node) is not None
    }
    reads = {}  # frame node -> its example, over both branches
    written = {}
    for graph, writes in branches:
        for n in _inputs(graph):
            frame = _frame_value(n, items, graph)
            if _example(frame) is not None:
                reads[frame] = _example(frame)
        own = set(graph.nodes)
        for node in writes:
            if "out" in node.kwargs:
                unimplemented(f"{op}: a branch writes a tensor it is given through out=")
            target = node.args[0] if node.args else None
            if not isinstance(target, torch.fx.Node) or _example(target) is None:
                unimplemented(f"{op}: a branch writes {target} in place")
            if may_alias_by_layout(target, own):
                unimplemented(f"{op}: a branch writes a tensor it may or may not share (layout)")
            hit = [
                n for n in _inputs(graph) if _example(n) is not None and
                storage(_example(n)) == storage(_example(target))
            ]  # fmt: skip
            if len(hit) != 1:
                unimplemented(f"{op}: a branch writes a tensor that shares memory with others")
            written.setdefault(_frame_value(hit[0], items, graph), None)
        if writes and any(_name(n.target) in _STORAGE_OR_METADATA for n in graph.nodes):
            unimplemented(f"{op}: a branch writes its input and reads its storage or metadata")
    if written and torch.is_grad_enabled():
        unimplemented(f"{op}: a branch writes a tensor it is given in grad mode ({op} raises)")
    for w in written:
        mine = storage(_example(w))
        if not _dense(_example(w)):
            unimplemented(f"{op}: a branch writes a tensor that is not dense")
        if any(f is not w and storage(e) == mine for f, e in reads.items()):
            unimplemented(f"{op}: a branch writes a tensor that shares memory with another read")
        if mine in frame_inputs:
            _separate_inputs(tx, frame_inputs, mine, [storage(e) for e in reads.values()], op)
    return list(written)


def _separate_inputs(tx, frame_inputs, mine, others, op):
    """A written input of the frame must share no memory with the other inputs the branches
    read: their examples do not tell (each has a storage of its own), the tensors do, and a guard
    keeps it so."""
    source, value = frame_inputs[mine]
    for other in others:
        if other == mine or other not in frame_inputs:
            continue
        other_source, other_value = frame_inputs[other]
        if value.untyped_storage()._cdata == other_value.untyped_storage()._cdata:
            unimplemented(
                f"{op}: a branch writes an input of the frame that shares memory with another"
            )
        tx.output.guards.add(GuardKind.SEPARATE_MEMORY, source, other_source)


def clone_written(graph, items, written, device):
    """Give `graph` a clone of each written tensor in its place; returns the clones (to be
    returned by the branch as the tensors' new values) as TensorVariables."""
    frame_of = {n: _frame_value(n, items, graph) for n in _inputs(graph)}
    first = next((n for n in graph.nodes if n.op != "placeholder"), None)
    swap, made = {}, []
    for w in written:
        ins = [n for n, f in frame_of.items() if f is w]
        where = graph.inserting_before(first) if first is not None else contextlib.nullcontext()
        with where:  # (a tensor only the other branch reads: a clone of the frame's node)
            clone = graph.call_method("clone", (ins[0] if ins else w,))
        clone.meta["example_value"] = _example(w)
        swap.update((n, clone) for n in ins)
        made.append(clone)
    for node in list(graph.nodes):
        if node.op != "placeholder" and node not in made:
            node.args = torch.fx.node.map_arg(node.args, lambda a: swap.get(a, a))
            node.kwargs = torch.fx.node.map_arg(node.kwargs, lambda a: swap.get(a, a))
    return [TensorVariable(c, _example(w), device) for c, w in zip(made, written)]


def write_back(tx, written, items, new_values, device):
    """In the frame's graph: each written tensor gets its new value (`x.copy_(new)`)."""
    by_proxy = {v.proxy: v for v in items}
    for w, new in zip(written, new_values):
        var = by_proxy.get(w)
        if var is None:  # (a tensor of the frame the branches read)
            var = TensorVariable(w, _example(w), device)
        var.call_method(tx, "copy_", [new], {})
