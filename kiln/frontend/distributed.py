"""DistributedDataParallel with compiled models: DDP's forward around the compiled module, and
graphs split at DDP's gradient-bucket boundaries so that backward overlaps the all-reduce.

Note [DDP: DDP's forward stays Python]
`DistributedDataParallel.forward` is bookkeeping for the C++ reducer, not tensor work:
`_pre_forward` logs runtime stats, calls `reducer.prepare_for_forward()`, asks
`reducer._rebuild_buckets()` (a bool that decides a branch) and may broadcast buffers;
`_post_forward` tells the reducer which outputs to search for unused parameters
(`prepare_for_backward`) and may route the outputs through `_DDPSink`. Each call has to happen
every step, in this order, before and after the module's forward: traced, they would all be
effects replayed around one graph, which is what running them in Python already is. So
`kiln.compile(DDP(m))` (entry.OptimizedModule) calls the real DDP module with its `module`
swapped for the compiled inner module for the duration of the call: DDP's hooks, its `no_sync()`
flag, `find_unused_parameters`, `broadcast_buffers` and static-graph paths run exactly as
eager's, and the forward of `m` is one graph with no break. `DDP(kiln.compile(m))` needs nothing:
DDP calls the compiled module. (torch.compile does the same: Dynamo skips DDP's file, so only
the inner module's frame is captured.)

Note [DDP: graphs split at bucket boundaries]
Eager DDP overlaps communication with backward: the reducer's hook on each parameter's
AccumulateGrad marks its gradient ready, and a bucket's all-reduce starts as soon as all its
gradients are ready, while autograd computes the gradients of earlier layers. A compiled graph's
backward is ONE autograd node: every gradient becomes ready at its end, and all buckets are
reduced after the compute, with no overlap. Two ways out: (a) split the forward graph so that each
piece's parameters fill about one bucket, each piece with its own backward node (torch.compile's
DDPOptimizer); (b) capture the whole backward with compiled autograd and keep the reducer's hooks
as calls inside the compiled backward. We take (a): the reducer's hooks are C++ functions with
state (bucket views, the "rebuilt buckets" order, unused-parameter maps) that compiled autograd
could only call opaquely, and every call would still be a graph break in a compiled backward,
while (a) keeps the reducer untouched, works with every backend, and costs only one graph per
bucket. While `DistributedDataParallel._active_ddp_module` is set (DDP sets it around its inner
module's forward), the backend the frontend is about to call is wrapped (hooks "backend"):
the graph's compute nodes are walked from the output back, parameters (the placeholders marked
`is_parameter` that require grad) added to the current bucket in the order their last user is
met; a bucket that reaches DDP's cap (the first one: DDP's first-bucket cap) closes and the nodes
before it go to the next piece. The pieces are compiled by the original backend one by one at the
first call, with the real values that flow between them as examples (no fake propagation needed).
Graphs with symbolic sizes, or with effect nodes (grad mode, autocast: nodes with no value), are
not split. The pieces match DDP's first bucketing by size; from the second step DDP rebuilds its
buckets in the order gradients became ready, and the gradients of one piece become ready
together, in an order autograd picks: a rebuilt bucket may straddle two pieces (torch.compile's
DDPOptimizer has the same limit). The test checks the overlap itself: a bucket is all-reduced
before autograd reaches the model's input.
"""

import functools
import operator
import sys

import torch
import torch.fx
from torch.fx.passes.split_module import split_module

from kiln import config, hooks, logs
from kiln.contracts import GraphMeta

try:
    from torch.nn.parallel import DistributedDataParallel as DDP
except ImportError:  # a torch built without distributed
    DDP = None


def is_ddp(mod):
    """Whether mod is a DistributedDataParallel module."""
    return DDP is not None and isinstance(mod, DDP)


class DDPCall:
    """`ddp(*args)` with `ddp.module` replaced by its compiled form for the call
    (Note [DDP: DDP's forward stays Python])."""

    def __init__(self, ddp, compile_module):
        self.ddp = ddp
        self.compile_module = compile_module
        self.inner = None

    def __call__(self, *args, **kwargs):
        modules = self.ddp._modules
        orig = modules["module"]
        if self.inner is None or self.inner._orig_mod is not orig:
            self.inner = self.compile_module(orig)
        modules["module"] = self.inner
        try:
            return self.ddp(*args, **kwargs)
        finally:
            modules["module"] = orig


def is_fsdp(mod):
    """Whether mod was given to `torch.distributed.fsdp.fully_shard` (its class is FSDP's);
    torch.distributed.fsdp is not imported here (it is heavy): unimported, no module is one."""
    fsdp = sys.modules.get("torch.distributed.fsdp")
    cls = getattr(fsdp, "FSDPModule", None)
    return cls is not None and isinstance(mod, cls)


class HookedModuleCall:
    """`mod(*args)` with mod's forward compiled: the module's hooks run in Python around it.

    Note [FSDP: hooks stay Python]: `fully_shard` puts the all-gather of the parameters in a
    forward pre-hook and the reshard in a forward hook (and registers the gradients'
    reduce-scatter from there); between them the module's parameters are ordinary unsharded
    tensors (the same objects every step: FSDP resizes their storage). As with DDP's forward,
    the communication runs as eager runs it, and only the forward body is a graph.

    Whole-model compile of an FSDP model: each `fully_shard` block inside the root gets its
    own compiled forward the same way (`blocks`), installed for the duration of the root's call:
    the root's forward breaks at each block call (its hooks communicate), and the block's
    forward is then a graph even where the root's frame runs on eagerly (a break inside a
    `for block in self.layers` loop). Installed only while the root runs: outside it the blocks
    are the user's own modules, with no instance `forward`.
    """

    def __init__(self, mod, forward, blocks=()):
        self.mod = mod
        self.forward = forward
        self.blocks = list(blocks)  # [(fully_shard submodule, its compiled forward)]

    def __call__(self, *args, **kwargs):
        installed = [(self.mod, self.forward), *self.blocks]
        olds = [m.__dict__.get("forward", _MISSING) for m, _ in installed]
        for m, f in installed:
            m.__dict__["forward"] = f
        try:
            return self.mod(*args, **kwargs)
        finally:
            for (m, _), old in zip(installed, olds):
                if old is _MISSING:
                    del m.__dict__["forward"]
                else:
                    m.__dict__["forward"] = old


def fsdp_blocks(mod):
    """The `fully_shard` modules under mod (not mod itself), outermost first."""
    return [m for m in mod.modules() if m is not mod and is_fsdp(m)]


_MISSING = object()


def active_ddp():
    """The DDP module whose inner forward runs now, else None."""
    return None if DDP is None else DDP._active_ddp_module


def _split_backend(backend, name):
    """hooks "backend": the backend split at bucket boundaries while a DDP forward runs."""
    ddp = active_ddp()
    if ddp is None or not config.ddp_split_graphs or getattr(backend, "_kiln_ddp", False):
        return backend
    config_ = getattr(ddp, "_bucket_config", None)
    cap = getattr(ddp, "bucket_bytes_cap", None) or 25 * 1024 * 1024
    first = config_.first_bucket_bytes_cap if config_ is not None else cap
    split = functools.partial(split_for_ddp, backend, cap, first)
    split._kiln_ddp = True
    return split


hooks.register("backend", _split_backend)


def bucket_pieces(gm, cap, first_cap):
    """{node: piece index} for gm's compute nodes, pieces in forward order, or None when gm
    fits one bucket or must not be split (Note [DDP: graphs split at bucket boundaries])."""
    if GraphMeta.of(gm).shape_env is not None:
        return None
    nodes = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    if any(n.op == "call_function" and n.meta.get("example_value", 0) is None for n in nodes):
        return None  # an effect node (grad mode, autocast): its region must stay in one graph
    counted = set()
    bucket, size, limit = 0, 0, first_cap
    rev = {}
    for node in reversed(nodes):
        rev[node] = bucket
        for arg in node.all_input_nodes:
            value = arg.meta.get("example_value")
            if (
                arg.op == "placeholder"
                and arg.meta.get("is_parameter")
                and isinstance(value, torch.Tensor)
                and value.requires_grad
                and arg not in counted
            ):
                counted.add(arg)
                size += value.numel() * value.element_size()
        if size >= limit:
            bucket, size, limit = bucket + 1, 0, cap
    used = sorted(set(rev.values()))
    if len(used) < 2:
        return None
    last = max(used)
    return {n: last - b for n, b in rev.items()}


def split_for_ddp(backend, cap, first_cap, gm, example_inputs):
    """gm compiled as pieces of about one DDP bucket each, or whole when it fits one."""
    pieces = bucket_pieces(gm, cap, first_cap)
    if pieces is None:
        return backend(gm, example_inputs)
    top = split_module(gm, None, lambda n: pieces[n], keep_original_order=True)
    _tuple_outputs(top)
    count = sum(1 for n in top.graph.nodes if n.op == "call_module")
    logs.counters["stats"]["ddp_pieces"] += count
    logs.log("graph_code", "DDP: graph split into %d pieces at bucket boundaries", count)
    return SplitGraph(top, backend)


class SplitGraph:
    """Runs the pieces of a split graph in order; each piece is compiled by the backend at its
    first call, with the values that reach it."""

    def __init__(self, top, backend):
        self.top = top
        self.backend = backend
        self.compiled = {}
        self.steps = _plan(top.graph)

    def __call__(self, *args):
        env = {}
        args = list(args)
        for kind, node, target, ins in self.steps:
            if kind == "placeholder":
                env[node] = args.pop(0)
            elif kind == "call":
                values = [env[a] for a in ins]
                fn = self.compiled.get(target)
                if fn is None:
                    piece = getattr(self.top, target)
                    fn = self.compiled[target] = self.backend(piece, values)
                env[node] = fn(*values)
            elif kind == "getitem":
                env[node] = env[ins[0]][target]
            else:
                return tuple(env[a] for a in ins)
        return None


def _tuple_outputs(top):
    """Every piece returns a tuple (as the frontend's graphs do); single results are unpacked."""
    for node in list(top.graph.nodes):
        if node.op != "call_module":
            continue
        piece = getattr(top, node.target)
        (out,) = [n for n in piece.graph.nodes if n.op == "output"]
        if isinstance(out.args[0], (tuple, list)):
            continue
        out.args = ((out.args[0],),)
        piece.recompile()
        with top.graph.inserting_after(node):
            item = top.graph.call_function(operator.getitem, (node, 0))
        node.replace_all_uses_with(item, delete_user_cb=functools.partial(operator.is_not, item))
    top.recompile()


def _plan(graph):
    """(kind, node, target, input nodes) per node of the top graph that split_module made."""
    steps = []
    for node in graph.nodes:
        if node.op == "placeholder":
            steps.append(("placeholder", node, None, ()))
        elif node.op == "call_module":
            steps.append(("call", node, node.target, tuple(node.args)))
        elif node.op == "call_function" and node.target is operator.getitem:
            steps.append(("getitem", node, node.args[1], (node.args[0],)))
        elif node.op == "output":
            (out,) = node.args
            steps.append(("output", node, None, tuple(out)))
        else:
            raise AssertionError(f"unexpected node in a split graph: {node.format_node()}")
    return steps
