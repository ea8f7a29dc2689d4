"""Cut a joint forward+backward graph into a forward graph and a backward graph.

A joint graph takes (primals_1.., tangents_1..) and returns (forward outputs.., input grads..).
A partitioner returns (fw_gm, bw_gm): fw_gm(primals) -> (forward outputs.., saved..) and
bw_gm(saved.., tangents..) -> input grads. Two of them:

- default_partition: the backward reads whatever forward values it uses (saves them all).
- min_cut_rematerialization_partition: a max-flow min-cut over the joint graph chooses the cheapest
  set of values to save, recomputing cheap pointwise work in the backward:

      joint: cos = cos(x); cos_1 = cos(cos); ... sin(cos), sin(x) in the backward
      default saves (x, cos); min-cut saves (x) and recomputes cos = cos(x) in the backward.
"""

import math
import operator

import torch
import torch.fx

from kiln.contracts import GraphMeta
from kiln.symbolic import graph_constants
from kiln.symbolic.assert_ops import is_assert
from kiln.symbolic.fake import is_view_op
from kiln.symbolic.shape_env import from_torch, hint_of

aten = torch.ops.aten

__all__ = [
    "default_partition",
    "min_cut_rematerialization_partition",
    "JointInfo",
    "extract_graph",
    "saved_bytes",
]


class JointInfo:
    """The parts of a joint graph: primals, tangents, forward and backward outputs, node sets."""

    def __init__(self, joint, num_fwd_outputs):
        nodes = list(joint.graph.nodes)
        self.nodes = nodes
        self.primals = [n for n in nodes if n.op == "placeholder" and n.name.startswith("primals")]
        self.tangents = [
            n for n in nodes if n.op == "placeholder" and n.name.startswith("tangents")
        ]
        outs = list(nodes[-1].args[0])
        self.fw_outs = outs[:num_fwd_outputs]
        self.bw_outs = outs[num_fwd_outputs:]
        self.required_fw = _ancestors(self.fw_outs)
        self.required_bw = _ancestors(self.bw_outs)
        self.tangent_closure = _descendants(self.tangents)
        # items of forward multi-output ops stay with their op (a tuple cannot be saved)
        for n in list(self.required_fw):
            if isinstance(n.meta.get("val"), (tuple, list)):
                self.required_fw.update(u for u in n.users if u.target is operator.getitem)
        self.fw_side = self.required_fw | set(self.primals)
        # sizes computed from the primals alone are forward values (saved as ints if needed)
        self.fw_side.update(n for n in nodes if is_size_node(n) and n not in self.tangent_closure)


def is_size_node(n):
    """Whether a node computes a size or a float of sizes (val a torch.SymInt / SymFloat)."""
    return n.op == "call_function" and isinstance(n.meta.get("val"), torch.SymInt | torch.SymFloat)


def _is_size(n):
    """Whether a node's value is a size: computed, or an int input of the graph (`x.split([n, m])`
    with n and m symbolic)."""
    return isinstance(n.meta.get("val"), torch.SymInt | torch.SymFloat)


def _ints_for_floats(saved):
    """`saved` with each float of sizes replaced by the int sizes it is computed from.

    Note [Partitioner: saved floats]: a float of sizes (`n / (n - 1)`, Note [Tracer: float sizes])
    is never saved: the backward recomputes it from the int sizes, which are saved as ints
    (Note [Partitioner: saved sizes]); the runtime only saves tensors and ints.
    """
    out, todo = set(), list(saved)
    while todo:
        n = todo.pop()
        if isinstance(n.meta.get("val"), torch.SymFloat):
            todo.extend(n.all_input_nodes)
        else:
            out.add(n)
    return out


# Note [Partitioner: saved sizes]
# In a symbolic joint graph the backward may need a size (`expand(g, [s0, s1, 16])`). A size node
# that depends on the primals only is a forward value: saved like any other, it is an int output of
# the forward and an int placeholder of the backward (cheap: the min-cut gives it capacity 1, so it
# is saved rather than keeping a tensor alive only for its size); the min-cut may also recompute it
# from a saved tensor (`sym_size(saved, d)`). An int input of the graph (`x.split([n, m])` with n
# symbolic) the backward reads is saved the same way. Saved values are ordered tensors first, then sizes:
# the runtime keeps tensors with save_for_backward and sizes on the ctx.


def _ancestors(outs):
    seen, stack = set(), [o for o in outs if isinstance(o, torch.fx.Node)]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack.extend(n.all_input_nodes)
    return seen


def _descendants(starts):
    seen, stack = set(), list(starts)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack.extend(u for u in n.users if u.op != "output")
    return seen


def extract_graph(joint, inputs, outputs, name, sink=(), keep=()):
    """A GraphModule computing outputs from inputs, copying the joint nodes it needs in order;
    nodes in `sink` are placed right before their first use (Note [Partitioner: recompute
    order]); nodes in `keep` (run-time assertions) are copied though nothing reads them."""
    graph = torch.fx.Graph()
    env = {}
    for inp in inputs:
        p = graph.placeholder(inp.name)
        p.meta.update(inp.meta)
        env[inp] = p
    needed, stack = set(), [o for o in outputs if isinstance(o, torch.fx.Node)] + list(keep)
    inset = set(inputs)
    while stack:
        n = stack.pop()
        if n in needed or n in inset:
            continue
        needed.add(n)
        stack.extend(n.all_input_nodes)

    def emit(n):
        if n.op == "placeholder":
            raise AssertionError(f"partition: {name} graph needs {n.name}, which is not an input")
        env[n] = graph.node_copy(n, lambda a: env[a])

    def emit_with_inputs(n):  # n's unemitted sunk inputs first (depth first), then n
        stack = [(n, False)]
        while stack:
            m, ready = stack.pop()
            if m in env:
                continue
            if ready:
                emit(m)
                continue
            stack.append((m, True))
            for a in reversed(m.all_input_nodes):
                if a in needed and a not in env:
                    stack.append((a, False))

    for n in joint.graph.nodes:
        if n in needed and n not in env and n not in sink:
            emit_with_inputs(n)
    for o in outputs:
        if isinstance(o, torch.fx.Node) and o not in env:
            emit_with_inputs(o)
    graph.output(tuple(env[o] if isinstance(o, torch.fx.Node) else o for o in outputs))
    gm = graph_constants.graph_module(joint, graph)
    return gm


# Note [Partitioner: recompute order]
# The joint graph holds the forward first, so a forward value the backward recomputes (a layer
# norm, an activation) would come first in the backward graph, computed long before its use and
# alive for the whole backward: every recomputed node is placed right before its first user
# instead, as the autograd engine would run it (views of inputs and sizes stay in place).
def _sunk(info):
    """The forward computations a backward may recompute, with the views of them; sizes and views
    of inputs stay where they are (they cost nothing)."""
    sink = set()
    for n in info.nodes:
        if n.op != "call_function" or n in info.tangent_closure or is_size_node(n):
            continue
        if not is_view_op(n.target) or any(a in sink for a in n.all_input_nodes):
            sink.add(n)
    return sink


def _split(joint, info, saved):
    saved = _ints_for_floats(saved)
    saved = [n for n in info.nodes if n in saved and not _is_size(n)] + [
        n for n in info.nodes if n in saved and _is_size(n)
    ]  # graph order, tensors first (Note [Partitioner: saved sizes])
    # Note [Asserts: operators every backend runs]: a check runs where its values are computed
    checks = [n for n in info.nodes if n.op == "call_function" and is_assert(n.target)]
    fw_checks = [n for n in checks if n not in info.tangent_closure]
    bw_checks = [n for n in checks if n in info.tangent_closure]
    fw = extract_graph(joint, info.primals, info.fw_outs + saved, "forward", keep=fw_checks)
    bw = extract_graph(
        joint, saved + info.tangents, info.bw_outs, "backward", _sunk(info), keep=bw_checks
    )
    GraphMeta.update(fw, num_saved=len(saved))
    return fw, bw


def default_partition(joint, joint_inputs=None, *, num_fwd_outputs):
    """Save every forward value the backward reads."""
    info = JointInfo(joint, num_fwd_outputs)
    bw_nodes = info.required_bw - info.fw_side
    saved = set()
    for n in info.fw_side:
        if n.op == "get_attr":
            continue
        if any(u in bw_nodes for u in n.users):
            saved.add(n)
    return _split(joint, info, saved)


# Note [Partitioner: banned recompute]
# The min-cut may recompute a forward value in the backward only when that is cheap and gives the
# same answer: pointwise ops, views, casts and non-random factories. Random ops (their draw would
# differ: dropout keeps one mask) and expensive ops (matmul, convolution, attention, reductions,
# normalizations) are tied to the source with infinite capacity, so they run once in the forward
# and, if the backward needs them, their outputs (or something cheaper after them) are saved.
_RECOMPUTABLE_EXTRA = {
    aten.clone.default,
    aten._to_copy.default,
    aten.expand.default,
    aten.full.default,
    aten.zeros.default,
    aten.ones.default,
    aten.scalar_tensor.default,
    aten.zeros_like.default,
    aten.ones_like.default,
    aten.full_like.default,
    aten.empty_like.default,
    aten.where.self,
    aten.cat.default,
    aten.fill.Scalar,
    aten.arange.default,
    aten.arange.start,
    aten.arange.start_step,
    aten.lift_fresh_copy.default,
}


def is_random(n):
    """Whether a node draws random numbers."""
    t = n.target
    return isinstance(t, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in t.tags


def can_recompute(n):
    """Whether the min-cut may recompute this node in the backward (see the note above)."""
    if n.op != "call_function":
        return n.op == "get_attr"
    if n.target is operator.getitem:
        return can_recompute(n.args[0])
    if is_size_node(n):
        return True
    t = n.target
    if not isinstance(t, torch._ops.OpOverload) or is_random(n):
        return False
    if t in _RECOMPUTABLE_EXTRA or is_view_op(t):
        return True
    return torch.Tag.pointwise in t.tags


def _nbytes(n):
    val = n.meta.get("val")
    if isinstance(val, torch.SymInt):
        return 1
    if isinstance(val, torch.SymFloat):
        return 2  # recomputed from its int sizes when the cut falls here
    if not isinstance(val, torch.Tensor):
        return math.inf
    return max(1, hint_of(from_torch(val.numel())) * val.element_size())


def min_cut_rematerialization_partition(joint, joint_inputs=None, *, num_fwd_outputs):
    """Save the fewest bytes: a min cut between the primals and the backward's needs."""
    import networkx as nx

    info = JointInfo(joint, num_fwd_outputs)
    g = nx.DiGraph()
    g.add_nodes_from(["source", "sink"])
    tangent_set = set(info.tangents)
    for n in info.nodes:
        if n.op in ("output", "get_attr") or n in tangent_set:
            continue
        if n in info.tangent_closure:
            g.add_edge(n.name + "_in", "sink", capacity=math.inf)
            _add_user_edges(g, n)
            continue
        if n.op == "placeholder" or (n in info.required_fw and not can_recompute(n)):
            g.add_edge("source", n.name + "_in", capacity=math.inf)
        g.add_edge(n.name + "_in", n.name + "_out", capacity=_nbytes(n))
        _add_user_edges(g, n)
    for o in info.bw_outs:  # the grads themselves are needed in the backward
        if isinstance(o, torch.fx.Node) and o.op != "get_attr" and o not in tangent_set:
            g.add_edge(
                o.name + ("_in" if o in info.tangent_closure else "_out"), "sink", capacity=math.inf
            )
    try:
        _, (reachable, non_reachable) = nx.minimum_cut(g, "source", "sink")
    except nx.NetworkXUnbounded:
        return default_partition(joint, joint_inputs, num_fwd_outputs=num_fwd_outputs)
    by_name = {n.name: n for n in info.nodes}
    saved = set()
    for u, v in g.edges:
        if u in reachable and v in non_reachable and u.endswith("_in") and v == u[:-3] + "_out":
            saved.add(by_name[u[:-3]])
    fw, bw = _split(joint, info, saved)
    if any(is_random(n) for n in bw.graph.nodes) and any(is_random(n) for n in fw.graph.nodes):
        return default_partition(joint, joint_inputs, num_fwd_outputs=num_fwd_outputs)
    return fw, bw


def _add_user_edges(g, n):
    for u in n.users:
        if u.op != "output":
            g.add_edge(n.name + "_out", u.name + "_in", capacity=math.inf)


def saved_bytes(fw_gm):
    """Bytes of the values a forward graph saves for the backward."""
    num_saved = GraphMeta.of(fw_gm).num_saved
    outs = list(fw_gm.graph.output_node().args[0])
    saved = outs[len(outs) - num_saved :] if num_saved else []
    return sum(_nbytes(n) for n in saved if isinstance(n, torch.fx.Node))
