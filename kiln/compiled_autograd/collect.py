"""Walk the autograd graph at `.backward()`: per node a cache key, its sizes, and the run-time inputs.

    GraphRoot (NodeCall 0) -> SumBackward0 (NodeCall 1) -> AccumulateGrad (NodeCall 2)

The walk is depth-first from the roots in `next_functions` order; a node's position is its
`NodeCall k`. This is the whole cost of a cache hit, so it touches each node once and reads only
what the key needs (Note [Compiled autograd: the key]).
"""

import torch
import torch.autograd.graph

from kiln.compiled_autograd import hooks as H
from kiln.exc import Unsupported

__all__ = ["AutogradGraph", "collect", "is_kiln_compiled_function", "tensor_ident"]

# Note [Compiled autograd: the key]
# Two backward calls may share one compiled graph when everything the capture baked in is equal:
# per node its name, its edges (as NodeCall indices), the non-tensor values it saved (scalars,
# dims, sizes), the dtype/device/layout of each saved tensor and which earlier input it aliases,
# the dtype/device of the grads it receives (`_input_metadata`), and the number of hooks in each
# slot. Integers (saved sizes, tensor shapes and strides) are kept apart as the node's *sizes*:
# a change there is a "changed shapes" miss that may make the graph size-generic (cache.py);
# everything else is a "new autograd node" miss. Saved tensors, root grads, leaves and retained
# tensors are the graph's `inputs`; hooks and opaque custom-Function nodes its `hooks`.

_SAVED_ATTRS = {}  # node type -> names of its `_saved_*` attributes
_SCALAR_TYPES = (bool, float, str, complex, type(None), torch.dtype, torch.device, torch.layout)
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def tensor_ident(t):
    """Which data a tensor views: equal for the same view of the same memory."""
    return (t.data_ptr(), t.shape, t.stride(), t.dtype, t.device)


def _saved_attrs(node):
    t = type(node)
    names = _SAVED_ATTRS.get(t)
    if names is None:
        names = _SAVED_ATTRS[t] = tuple(a for a in dir(node) if a.startswith("_saved_"))
    return names


_COMPILED_FUNCTION = []  # kiln.autograd.aot.CompiledFunction, imported on first use


def is_kiln_compiled_function(cls):
    """Whether an autograd.Function class is one of kiln's ahead-of-time CompiledFunctions."""
    if not _COMPILED_FUNCTION:
        from kiln.autograd.aot import CompiledFunction

        _COMPILED_FUNCTION.append(CompiledFunction)
    return isinstance(cls, type) and issubclass(cls, _COMPILED_FUNCTION[0])


class AutogradGraph:
    """What one backward call looks like: nodes, keys, sizes, inputs, hooks."""

    def __init__(self):
        self.nodes = [None]  # NodeCall k -> node (0 is the GraphRoot)
        self.names = ["torch::autograd::GraphRoot"]
        self.keys = []  # per NodeCall: hashable key
        self.sizes = []  # per NodeCall: tuple of ints
        self.inputs = []  # graph inputs (tensors)
        self.hooks = []  # hooks and opaque nodes
        self.alias = {}  # tensor identity -> input index (first occurrence)
        self.index = {}  # id(node) -> NodeCall k
        self.node_inputs = []  # per NodeCall: list of input indices of its saved tensors
        self.node_hooks = []  # per NodeCall: {output_nr: [hook index]}
        self.node_retain = []  # per NodeCall: {output_nr: input index}
        self.node_post = []  # per NodeCall (AccumulateGrad): [hook index] post-acc hooks
        self.leaf_input = {}  # NodeCall k of an AccumulateGrad -> input index of its variable
        self.node_hook_slot = {}  # NodeCall k of an opaque custom Function -> hooks index
        self.root_edges = []
        self.engine_inputs = []  # edges/tensors handed to the engine as `inputs`
        self.num_root_grads = 0
        self.accumulate = True
        self.leaves = []  # NodeCall k of AccumulateGrad nodes (accumulation order)
        self.consumed = []  # NodeCall k of nodes a compiled backward already ran without retain

    def add_input(self, t, key, sizes):
        """Lift a tensor as a graph input; its metadata goes to key/sizes. Returns its index."""
        if type(t) not in _PLAIN_TENSORS:
            raise Unsupported(f"a tensor of type {type(t).__name__} in the autograd graph")
        # (the hot path of a cache hit: each tensor attribute read once; sparse tensors have no
        # strides and raise here, which sends the call to the eager engine)
        shape, stride, dtype, device = t.shape, t.stride(), t.dtype, t.device
        ident = (t.data_ptr(), shape, stride, dtype, device)  # = tensor_ident(t)
        alias = self.alias
        first = alias.get(ident, -1)
        inputs = self.inputs
        idx = len(inputs)
        if first < 0:
            alias[ident] = idx
        inputs.append(t)
        key.append((dtype, device, t.requires_grad, first))
        sizes += shape
        sizes += stride
        sizes.append(t.storage_offset())
        return idx

    def add_hook(self, h):
        self.hooks.append(h)
        return len(self.hooks) - 1

    def consumed_check(self):
        """NodeCall indices of nodes whose saved tensors an earlier compiled backward consumed."""
        return self.consumed

    def mark_consumed(self):
        """After a backward without retain_graph: a second one raises as eager's would."""
        for k, idxs in enumerate(self.node_inputs):
            if k and idxs:
                self.nodes[k].metadata["kiln_consumed"] = True

    @property
    def flat_sizes(self):
        return [s for per in self.sizes for s in per]


def _add_saved(g, v, key, sizes, idxs):
    if isinstance(v, torch.Tensor):
        idxs.append(g.add_input(v, key, sizes))
    elif isinstance(v, bool) or isinstance(v, _SCALAR_TYPES):
        key.append(v)
    elif isinstance(v, int):
        key.append("i")
        sizes.append(v)
    elif isinstance(v, (tuple, list)):
        key.append(("(", len(v)))
        for x in v:
            _add_saved(g, x, key, sizes, idxs)
    else:
        raise Unsupported(f"a saved value of type {type(v).__name__}")


def _root_edge(t):
    if isinstance(t, torch.autograd.graph.GradientEdge):
        return t.node, t.output_nr
    if t.grad_fn is not None:
        return t.grad_fn, t.output_nr
    if t.requires_grad:
        e = torch.autograd.graph.get_gradient_edge(t)
        return e.node, e.output_nr
    raise Unsupported("a root that does not require grad")


def collect(roots, grads, inputs, accumulate):
    """Walk the graph of one backward call (`inputs`: the user's, or () for every leaf)."""
    g = AutogradGraph()
    g.accumulate = accumulate
    key0, sizes0 = ["GraphRoot", len(roots)], []
    g.node_inputs.append([])
    edges = []
    for t, gr in zip(roots, grads):
        if not isinstance(gr, torch.Tensor):
            raise Unsupported("a root without a grad tensor")
        g.add_input(gr, key0, sizes0)
        edges.append(_root_edge(t))
    g.num_root_grads = len(roots)
    g.root_edges = edges
    for h in (g.node_hooks, g.node_retain, g.node_post):
        h.append({} if h is not g.node_post else [])

    # depth-first, preorder, children in next_functions order
    index = g.index
    stack = []
    for node, _ in reversed(edges):
        stack.append(node)
    order = []
    while stack:
        node = stack.pop()
        if id(node) in index:
            continue
        index[id(node)] = len(g.nodes)
        g.nodes.append(node)
        g.names.append(node.name())
        order.append(node)
        for nxt, _ in reversed(node.next_functions):
            if nxt is not None and id(nxt) not in index:
                stack.append(nxt)
    key0.append(tuple((index[id(n)], nr) for n, nr in edges))
    g.keys.append(tuple(key0))
    g.sizes.append(tuple(sizes0))

    for k, node in enumerate(order, start=1):
        _collect_node(g, k, node)

    if inputs:
        ins = []
        for t in inputs:
            if isinstance(t, torch.autograd.graph.GradientEdge):
                raise Unsupported("GradientEdge inputs")
            if accumulate and t.grad_fn is not None:
                raise Unsupported("backward(inputs=...) with a non-leaf input")
            node, nr = _root_edge(t)
            ins.append((index.get(id(node), -1), nr))
            g.engine_inputs.append(t)
        g.keys.append(("inputs", tuple(ins)))
        g.sizes.append(())
        if accumulate:
            g.leaves = [
                index[id(_root_edge(t)[0])] for t in inputs if id(_root_edge(t)[0]) in index
            ]
    else:
        g.leaves = [k for k in range(1, len(g.nodes)) if k in g.leaf_input]
        g.engine_inputs = [g.nodes[k].variable for k in g.leaves]
    return g


def _collect_node(g, k, node):
    name = g.names[k]
    key = [name]
    sizes = []
    idxs = []
    node_hooks, node_retain, node_post = {}, {}, []
    if name == "torch::autograd::AccumulateGrad":  # the hot case: one per parameter
        var = node.variable  # (its metadata is the grad's: no _input_metadata needed)
        g.leaf_input[k] = g.add_input(var, key, sizes)
        pre = H.wrap_dict(var._backward_hooks)
        hooks = g.hooks
        if pre:
            n = len(hooks)
            hooks += pre
            node_hooks[0] = list(range(n, len(hooks)))
        post = var._post_accumulate_grad_hooks
        if post:
            n = len(hooks)
            hooks += post.values()
            node_post = list(range(n, len(hooks)))
        key.append((len(pre), len(node_post)))
        g.node_inputs.append(idxs)
        g.node_hooks.append(node_hooks)
        g.node_retain.append(node_retain)
        g.node_post.append(node_post)
        g.keys.append(tuple(key))
        g.sizes.append(tuple(sizes))
        return
    index = g.index
    key.append(tuple((-1, 0) if n is None else (index[id(n)], nr) for n, nr in node.next_functions))
    for md in node._input_metadata:
        key.append((md.dtype, md.device, md.is_nested_tensor))
        sizes.extend(md.shape)
    if isinstance(node, torch.autograd.function.BackwardCFunction):
        cls = node._forward_cls
        if cls.__name__ == "BackwardHookFunction" or not hasattr(cls, "backward"):
            raise Unsupported(f"module backward hooks ({name}) are node hooks kiln cannot see")
        key.append((_class_serial(cls), tuple(node.needs_input_grad)))
        if is_kiln_compiled_function(cls):
            for t in node.saved_tensors:
                if t is None:
                    raise Unsupported("a CompiledFunction saved None")
                idxs.append(g.add_input(t, key, sizes))
            sizes += node.kiln_sizes  # a symbolic plan's saved sizes (ints)
        else:
            if len(node.next_functions) != len(node.needs_input_grad):
                raise Unsupported(f"{name}: a custom Function with non-tensor inputs")
            g.node_hook_slot[k] = g.add_hook(node)
    else:
        for attr in _saved_attrs(node):
            key.append(attr)
            _add_saved(g, getattr(node, attr), key, sizes, idxs)
    meta = node.metadata
    if meta:
        if idxs and meta.get("kiln_consumed"):
            g.consumed.append(k)
        for nr, hs in H.tensor_hooks(node).items():
            node_hooks[nr] = [g.add_hook(h) for h in hs]
        for nr, t in H.retained(node).items():
            node_retain[nr] = g.add_input(t, key, sizes)
        key.append(tuple((nr, len(v)) for nr, v in sorted(node_hooks.items())))
        key.append(tuple(sorted(node_retain)))
    g.node_inputs.append(idxs)
    g.node_hooks.append(node_hooks)
    g.node_retain.append(node_retain)
    g.node_post.append(node_post)
    g.keys.append(tuple(key))
    g.sizes.append(tuple(sizes))


_SERIALS = {}


def _class_serial(cls):
    """A number for a custom Function class that is never reused (ids of dead classes are)."""
    serial = cls.__dict__.get("_kiln_ca_serial")
    if serial is None:
        serial = len(_SERIALS) + 1
        _SERIALS[serial] = cls.__qualname__
        cls._kiln_ca_serial = serial
    return serial
