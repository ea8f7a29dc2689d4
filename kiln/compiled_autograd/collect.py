"""Walk the autograd graph at `.backward()`: per node a cache key, its sizes, and the run-time inputs.

    GraphRoot (NodeCall 0) -> SumBackward0 (NodeCall 1) -> AccumulateGrad (NodeCall 2)

The walk is depth-first from the roots in `next_functions` order; a node's position is its
`NodeCall k`. This is the whole cost of a cache hit, so it touches each node once and reads only
what the key needs (Note [Compiled autograd: the key]).
"""

import functools
import itertools
import operator

import torch
import torch.autograd.graph

from kiln import node_hooks
from kiln.autograd.aot import CompiledFunction
from kiln.compiled_autograd import hooks as H
from kiln.exc import Unsupported
from kiln.symbolic import hook_ops

__all__ = [
    "AutogradGraph",
    "collect",
    "is_kiln_compiled_function",
    "node_sizes",
    "tensor_ident",
]

# Note [Compiled autograd: the key]
# Two backward calls may share one compiled graph when everything the capture baked in is equal:
# per node its name, its edges (as NodeCall indices), the non-tensor values it saved (scalars,
# dims, sizes), the dtype/device/layout of each saved tensor and which earlier input it aliases,
# the dtype/device of the grads it receives (`_input_metadata`), and the number of hooks in each
# slot. Integers (saved sizes, tensor shapes and strides) are kept apart as the node's *sizes*:
# a change there is a "changed shapes" miss that may make the graph size-generic (cache.py);
# everything else is a "new autograd node" miss. Saved tensors, root grads, leaves and retained
# tensors are the graph's `inputs`; hooks and opaque custom-Function nodes its `hooks`.

# Note [Compiled autograd: size groups]
# A node's sizes are the ints of its key, in order; they are collected as groups (a tensor's
# torch.Size, its strides and offset, a saved int) because flattening every group on every call
# cost as much as the rest of the walk. A hit compares the groups as they are (cache.py); the
# flat positions (`flat_sizes`, `node_sizes`) are only built where sizes are dynamic or missed.
_chain = itertools.chain.from_iterable


def node_sizes(groups):
    """One node's sizes as a flat list of ints."""
    return list(_chain(groups))


# tensor attribute readers for C-level maps (add_inputs)
_DATA_PTR = torch.Tensor.data_ptr
_SIZE = torch.Tensor.size
_STRIDE = torch.Tensor.stride
_OFFSET = torch.Tensor.storage_offset
_META = operator.attrgetter("dtype", "device", "requires_grad")
_NO_ALIAS = [-1]
_VARIABLE = operator.attrgetter("variable")
_PRE = operator.attrgetter("_backward_hooks")
_POST = operator.attrgetter("_post_accumulate_grad_hooks")
_repeat = itertools.repeat

_SAVED_ATTRS = {}  # node type -> names of its `_saved_*` attributes
_SCALAR_TYPES = (bool, float, str, complex, type(None), torch.dtype, torch.device, torch.layout)
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
_PLAIN_TENSOR_SET = frozenset(_PLAIN_TENSORS)


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
        _COMPILED_FUNCTION.append(CompiledFunction)
    return isinstance(cls, type) and issubclass(cls, _COMPILED_FUNCTION[0])


class AutogradGraph:
    """What one backward call looks like: nodes, keys, sizes, inputs, hooks."""

    def __init__(self):
        self.nodes = [None]  # NodeCall k -> node (0 is the GraphRoot)
        self.names = ["torch::autograd::GraphRoot"]
        self.keys = []  # per NodeCall: hashable key
        self.sizes = []  # per NodeCall: tuple of size groups (tuples of ints)
        self.inputs = []  # graph inputs (tensors)
        self.hooks = []  # hooks and opaque nodes
        self.node_post = {}  # AccumulateGrad NodeCall k -> [hook index] of the node's post hooks
        self.alias = {}  # data_ptr -> first input index at that address
        self.alias_full = {}  # tensor_ident -> first input index (only for shared addresses)
        self.alias_full_ptrs = set()
        self.shapes, self.strides, self.metas = [], [], []  # per input (lift)
        self.index = {}  # id(node) -> NodeCall k
        self.node_inputs = []  # per NodeCall: input indices of its saved tensors (None: leaf)
        self.node_retain = []  # per NodeCall: {output_nr: input index} (None: leaf)
        self.leaf_hooks = None  # (AccumulateGrad NodeCalls, (pre, post) counts, first index)
        self._post = None  # NodeCall k -> [hook index] of its post-accumulate hooks (lazily)
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
        ptr = t.data_ptr()
        inputs = self.inputs
        idx = len(inputs)
        first = self.alias.setdefault(ptr, idx)  # the first input at this address
        if first != idx:  # (rare: compare the whole identity, tensor_ident)
            first = self._same_data(first, (ptr, shape, stride, dtype, device), idx)
        else:
            first = -1
        inputs.append(t)
        meta = (dtype, device, t.requires_grad)
        self.shapes.append(shape)
        self.strides.append(stride)
        self.metas.append(meta)
        key.append((meta, first))
        sizes.append(shape)  # (sizes are kept as groups: Note [Compiled autograd: size groups])
        sizes.append(stride)
        sizes.append((t.storage_offset(),))
        return idx

    def add_inputs(self, ts, key, sizes):
        """add_input for many tensors at once (a CompiledFunction's saved tensors); returns
        their indices."""
        firsts, metas, shapes, strides = self.lift(ts)
        key += zip(metas, firsts)
        sizes += _chain(zip(shapes, strides, zip(map(_OFFSET, ts))))
        return range(len(self.inputs) - len(ts), len(self.inputs))

    def lift(self, ts):
        """Lift tensors as graph inputs, each attribute read by one C-level map over them:
        per tensor its first alias (or -1), (dtype, device, requires_grad), size and stride."""
        if not _PLAIN_TENSOR_SET.issuperset(map(type, ts)):
            bad = next(t for t in ts if type(t) not in _PLAIN_TENSORS)
            raise Unsupported(f"a tensor of type {type(bad).__name__} in the autograd graph")
        inputs = self.inputs
        n0 = len(inputs)
        idxs = range(n0, n0 + len(ts))
        ptrs = list(map(_DATA_PTR, ts))
        firsts = list(map(self.alias.setdefault, ptrs, idxs))
        shapes = list(map(_SIZE, ts))
        strides = list(map(_STRIDE, ts))
        metas = list(map(_META, ts))
        if firsts == list(idxs):
            firsts = _NO_ALIAS * len(ts)
        else:  # some address seen before (a parameter saved by a CompiledFunction and then
            # accumulated): the same tensor object, else compare whole identities there
            all_shapes, all_strides, all_metas = (
                self.shapes + shapes,
                self.strides + strides,
                self.metas + metas,
            )
            for j, i in enumerate(idxs):
                f = firsts[j]
                if f == i:
                    firsts[j] = -1
                elif (
                    shapes[j] != all_shapes[f]
                    or strides[j] != all_strides[f]
                    or metas[j][:2] != all_metas[f][:2]
                ):
                    ident = (ptrs[j], shapes[j], strides[j], *metas[j][:2])
                    firsts[j] = self._same_data(f, ident, i)
        inputs += ts
        self.shapes += shapes
        self.strides += strides
        self.metas += metas
        return firsts, metas, shapes, strides

    def _same_data(self, at_ptr, ident, idx):
        """The first earlier input with this tensor_ident, else -1 (and idx is now the first)."""
        full = self.alias_full
        if not full or ident[0] not in self.alias_full_ptrs:
            self.alias_full_ptrs.add(ident[0])
            full.setdefault(tensor_ident(self.inputs[at_ptr]), at_ptr)
        first = full.setdefault(ident, idx)
        return -1 if first == idx else first

    def post_hooks(self, k):
        """Hook indices of the post-accumulate-grad hooks of the AccumulateGrad at NodeCall k."""
        if self._post is None:
            self._post = {}
            if self.leaf_hooks is not None:
                ks, counts, pos = self.leaf_hooks
                for k2, (npre, npost) in zip(ks, counts):
                    pos += npre
                    if npost:
                        self._post[k2] = list(range(pos, pos + npost))
                    pos += npost
        return self._post.get(k, ())

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

    @functools.cached_property
    def flat_sizes(self):
        """Every size of the call in NodeCall order (read once the walk is complete)."""
        return list(_chain(_chain(self.sizes)))


def _add_saved(g, v, key, sizes, idxs):
    if isinstance(v, torch.Tensor):
        idxs.append(g.add_input(v, key, sizes))
    elif isinstance(v, bool) or isinstance(v, _SCALAR_TYPES):
        key.append(v)
    elif isinstance(v, int):
        key.append("i")
        sizes.append((v,))
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
    g.node_retain.append({})

    # depth-first, preorder, children in next_functions order
    index = g.index
    nodes, names = g.nodes, g.names
    stack = [node for node, _ in reversed(edges)]
    while stack:
        node = stack.pop()
        i = id(node)
        if i in index:
            continue
        index[i] = len(nodes)
        nodes.append(node)
        names.append(node.name())
        for nxt, _ in reversed(node.next_functions):
            if nxt is not None and id(nxt) not in index:
                stack.append(nxt)
    key0.append(tuple((index[id(n)], nr) for n, nr in edges))
    n = len(nodes)
    g.keys = [tuple(key0), *([None] * (n - 1))]
    g.sizes = [tuple(sizes0), *([None] * (n - 1))]
    for per in (g.node_inputs, g.node_retain):
        per += [None] * (n - 1)

    leaves = []
    for k in range(1, n):
        if names[k] == _ACCUMULATE_GRAD:
            leaves.append(k)
        else:
            _collect_node(g, k, nodes[k])
    if leaves:
        _collect_leaves(g, leaves)
    if node_hooks.node_hooks_seen:  # Note [Compiled autograd: hooks on nodes]
        for k in range(1, n):
            pre, post = node_hooks.node_hooks(nodes[k])
            if pre or (post and names[k] != _ACCUMULATE_GRAD):
                raise Unsupported(f"hooks registered on the autograd node {names[k]}")
            if post:
                g.node_post[k] = [g.add_hook(h) for h in post]
                g.keys[k] = (*g.keys[k], ("node post hooks", len(post)))

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
        g.engine_inputs = [g.inputs[g.leaf_input[k]] for k in g.leaves]
    return g


_ACCUMULATE_GRAD = "torch::autograd::AccumulateGrad"


def _collect_leaves(g, ks):
    """The AccumulateGrad nodes (the hot case: one per parameter), after every other node: each
    tensor attribute read by one C-level map over all the variables (their metadata is the
    grad's), the hooks looked at one by one only where a variable has some."""
    variables = list(map(_VARIABLE, map(g.nodes.__getitem__, ks)))
    firsts, metas, shapes, strides = g.lift(variables)
    idxs = range(len(g.inputs) - len(variables), len(g.inputs))
    g.leaf_input.update(zip(ks, idxs))
    counts = [_NO_HOOKS] * len(ks)
    hooks = g.hooks
    g.leaf_hooks = (ks, counts, len(hooks))  # (where each leaf's hooks are: post_hooks)
    for j, pre, post in zip(range(len(ks)), map(_PRE, variables), map(_POST, variables)):
        if pre or post:
            n0 = len(hooks)
            if pre:
                if not _KILN_HOOK.issuperset(map(type, pre.values())):
                    H.wrap_dict(pre)
                hooks += pre.values()
            npre = len(hooks) - n0
            if post:
                hooks += post.values()
            counts[j] = (npre, len(hooks) - n0 - npre)
    keys, sizes = g.keys, g.sizes
    for k, key, size in zip(
        ks,
        zip(_repeat(_ACCUMULATE_GRAD), metas, firsts, counts),
        zip(shapes, strides, zip(map(_OFFSET, variables))),
    ):
        keys[k] = key
        sizes[k] = size


_NO_HOOKS = (0, 0)
_KILN_HOOK = frozenset((H.KilnHook,))


def _collect_node(g, k, node):
    name = g.names[k]
    key = [name]
    sizes = []
    idxs = []
    node_hooks, node_retain = {}, {}
    index = g.index
    key.append(tuple((-1, 0) if n is None else (index[id(n)], nr) for n, nr in node.next_functions))
    for md in node._input_metadata:
        key.append((md.dtype, md.device, md.is_nested_tensor))
        sizes.append(md.shape)
    if isinstance(node, torch.autograd.function.BackwardCFunction):
        cls = node._forward_cls
        if cls.__name__ == "BackwardHookFunction" or not hasattr(cls, "backward"):
            raise Unsupported(f"module backward hooks ({name}) are node hooks kiln cannot see")
        key.append((_class_serial(cls), tuple(node.needs_input_grad)))
        if is_kiln_compiled_function(cls):
            idxs = g.add_inputs(node.saved_tensors, key, sizes)  # (None raises Unsupported)
            sizes.append(node.kiln_sizes)  # a symbolic plan's saved sizes (ints)
        elif cls is hook_ops.Hooked:  # its token is an input (Note [Hooks: given at run time])
            idxs = g.add_inputs(node.saved_tensors, key, sizes)
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
    g.node_inputs[k] = idxs
    g.node_retain[k] = node_retain
    g.keys[k] = tuple(key)
    g.sizes[k] = tuple(sizes)


_SERIALS = {}


def _class_serial(cls):
    """A number for a custom Function class that is never reused (ids of dead classes are)."""
    serial = cls.__dict__.get("_kiln_ca_serial")
    if serial is None:
        serial = len(_SERIALS) + 1
        _SERIALS[serial] = cls.__qualname__
        cls._kiln_ca_serial = serial
    return serial
