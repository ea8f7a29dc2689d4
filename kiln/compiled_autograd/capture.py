"""Trace one backward call into ONE FX graph `CompiledAutograd.forward(inputs, sizes, scalars, hooks)`.

    GraphRoot, MulBackward0, AccumulateGrad x2   ->   def forward(self, inputs, sizes, scalars, hooks):
                                                         getitem = inputs[0]   # the root grad
                                                         getitem_1 = inputs[1] # saved `other`
                                                         mul = aten.mul.Tensor(getitem, getitem_1)
                                                         ...
                                                         accumulate_grad_(getitem_3, mul, True)
                                                         return []

Note [Compiled autograd: capture through the engine]
The real autograd engine runs the graph once with proxy grads (`kiln.autograd.aten_tracer`) under our
TraceMode: every ATen call made by a C++ node's backward formula, by the engine's grad
accumulation (InputBuffer) and by its output validation (sum_to, casts) is recorded, in the
engine's own order. It runs as `torch.autograd.grad` towards the leaves (keep_graph=True), so no
AccumulateGrad executes and nothing real is written; the accumulation ops are emitted after it.
Real tensors the formulas touch are the nodes' saved tensors: they become `inputs[i]` (matched
by storage, offset, size and stride; anything unmatched aborts the capture). Python callables the
engine would run are intercepted instead of run: KilnHooks record `call_hook` nodes; kiln's
CompiledFunctionBackward nodes have their `apply` replaced for the capture by an inliner of their
ahead-of-time backward graph (names prefixed `aot{i}_`); other custom autograd.Functions become
opaque `call_backward` nodes; retained grads are seen by a temporary node pre-hook. A profiler
watches for any other Python function the engine calls (a hook kiln does not know): the capture
is abandoned and the backward runs in the eager engine.
"""

import collections
import gc
import operator
import os
import sys
import weakref

import torch
import torch.fx
from torch.utils._python_dispatch import _pop_mode_temporarily

from kiln.autograd.aten_tracer import TraceMode, Tracer
from kiln.compiled_autograd import hooks as H
from kiln.compiled_autograd.collect import is_kiln_compiled_function, tensor_ident
from kiln.exc import Unsupported
from kiln.symbolic import hook_ops
from kiln.symbolic.fake import ProxyTensor, fake_like, is_symbolic

__all__ = ["capture"]

_ENGINE = torch.autograd.variable.Variable._execution_engine  # the real one, captured at import
_TORCH_DIR = os.path.dirname(torch.__file__)
# torch files whose functions the engine calls as hooks (not dispatcher helpers): never allowed
_TORCH_CALLBACK_FILES = ("utils/hooks.py", "utils/checkpoint.py", "distributed", "nn/modules")


def _is_finalizer(frame):
    """A weakref callback (its first argument is the dead weakref) or a `__del__` method."""
    code = frame.f_code
    if code.co_name == "__del__":
        return True
    if code.co_argcount >= 1:
        first = frame.f_locals.get(code.co_varnames[0])
        return isinstance(first, weakref.ReferenceType)
    return False


class _Opaque:
    """Target of an opaque custom-Function backward node: `call_backward(node, *grads)`."""

    def __init__(self, name, expected):
        self.__name__ = f"call_backward_{name}"
        self.expected = expected

    def __call__(self, node, *grads):
        return H.call_backward(node, self.expected, *grads)

    def __repr__(self):
        return self.__name__


class _CATracer(Tracer):
    """The ATen tracer with real saved tensors mapped to graph inputs and node origins noted."""

    def __init__(self, cap):
        super().__init__()
        self.cap = cap

    def constant(self, t):
        return self.cap.lift_real(t)

    def dispatch(self, func, args, kwargs):
        out = super().dispatch(func, args, kwargs)
        self.cap.note_origin()
        return out


class Capture:
    """State of one capture; see Note [Compiled autograd: capture through the engine]."""

    def __init__(self, g):
        self.g = g
        self.tracer = _CATracer(self)
        graph = self.graph = self.tracer.graph
        self.ph = {n: graph.placeholder(n) for n in ("inputs", "sizes", "scalars", "hooks")}
        self._top = self.ph["hooks"]  # graph inputs are read at the top, in order of first use
        self.input_nodes = {}  # input index -> getitem node
        self.hook_nodes = {}
        self.by_ident = {}
        for i, t in enumerate(g.inputs):
            self.by_ident.setdefault(tensor_ident(t), i)
        self.hook_index = {id(h): i for i, h in enumerate(g.hooks)}
        self.aot_ids = {}
        self.fresh_exclude = set()  # nodes whose values the graph does not own
        self.origin = "torch::autograd::GraphRoot (NodeCall 0)"

    # --- graph inputs ---
    def input(self, i, name=None):
        node = self.input_nodes.get(i)
        if node is None:
            with self.graph.inserting_after(self._top):
                node = self.graph.call_function(operator.getitem, (self.ph["inputs"], i))
            self._top = node
            if name is not None:
                node._rename(name)
            node.meta["val"] = fake_like(self.g.inputs[i], node)
            node.meta["kiln_origin"] = "inputs"
            self.input_nodes[i] = node
            self.fresh_exclude.add(node)
        return node.meta["val"]

    def hook(self, i):
        node = self.hook_nodes.get(i)
        if node is None:
            with self.graph.inserting_after(self._top):
                node = self.graph.call_function(operator.getitem, (self.ph["hooks"], i))
            self._top = node
            node.meta["kiln_origin"] = "hooks"
            self.hook_nodes[i] = node
        return node

    def lift_real(self, t):
        """A real tensor met in a backward formula: the saved tensor it is, as a graph input."""
        i = self.by_ident.get(tensor_ident(t))
        if i is None:
            if t.dim() == 0 and t.device.type == "cpu" and not t.requires_grad:
                return Tracer.constant(self.tracer, t)  # a wrapped scalar (its value is in the key)
            raise Unsupported(
                f"a backward formula used a tensor that is not a saved tensor ({self.origin})"
            )
        return self.input(i)._node

    def note_origin(self):
        node = torch._C._current_autograd_node()
        if node is not None:
            k = self.g.index.get(id(node))
            if k is not None:
                self.origin = f"{self.g.names[k]} (NodeCall {k})"
        for n in reversed(self.graph.nodes):
            if "kiln_origin" in n.meta or n.op == "placeholder":
                break
            n.meta["kiln_origin"] = self.origin

    def set_origin(self, k):
        self.origin = f"{self.g.names[k]} (NodeCall {k})"

    # --- hooks and custom functions ---
    def on_tensor_hook(self, hook, grad):
        i = self.hook_index.get(id(hook))
        if i is None or not isinstance(grad, ProxyTensor):
            raise Unsupported("a tensor hook on a node kiln did not walk")
        self.note_origin()
        node = self.graph.call_function(
            H.call_hook, (self.hook(i), grad._node), {"hook_type": "tensor_pre_hook"}
        )
        node.meta["kiln_origin"] = self.origin
        self.fresh_exclude.add(node)
        out = fake_like(grad, node)
        node.meta["val"] = out
        return out

    def retain_marker(self, k):
        def marker(grad_outputs):
            self.set_origin(k)
            for nr, i in self.g.node_retain[k].items():
                gr = grad_outputs[nr] if nr < len(grad_outputs) else None
                if isinstance(gr, ProxyTensor):
                    node = self.graph.call_function(H.retain_grad_, (self.input(i)._node, gr._node))
                    node.meta["kiln_origin"] = self.origin

        return marker

    def aot_apply(self, k, node):
        """Inline a kiln CompiledFunctionBackward: its backward graph, names prefixed aot{i}_."""
        cls = node._forward_cls
        plan = _plan_of(cls)
        bw_gm = _backward_graph(plan)
        if bw_gm is None:
            return None
        prefix = f"aot{self.aot_ids.setdefault(id(plan), len(self.aot_ids))}_"

        symbolic = _is_symbolic_graph(bw_gm)

        def apply(*grads):
            self.set_origin(k)
            needs = node.needs_input_grad
            phs = [n for n in bw_gm.graph.nodes if n.op == "placeholder"]
            env = {}
            for j, i in enumerate(self.g.node_inputs[k]):
                val = self.input(i, prefix + phs[j].name)
                env[phs[j]] = val if symbolic else self.input_nodes[i]
            # Note [Partitioner: saved sizes]: the last num_saved_sizes saved values are ints
            # (the node's `kiln_sizes`, also in its cache sizes: collect.py)
            first_size = plan.num_saved - plan.num_saved_sizes
            for j, v in enumerate(node.kiln_sizes):
                env[phs[first_size + j]] = v
            # (called by the engine inside the capture's TraceMode: these ops are recorded)
            tangents, present = plan.tangents_from(grads, node.kiln_shapes)
            for j, t in enumerate(tangents):
                env[phs[plan.num_saved + j]] = t if symbolic else t._node
            self.note_origin()
            if symbolic:
                outs = self.replay_graph(bw_gm, env, prefix)
            else:
                outs = self.copy_graph(bw_gm, env, prefix)
            result = [None] * len(needs)
            for i, gr in plan.input_grads(outs, present, needs):
                result[i] = gr
            return tuple(result)

        return apply

    def copy_graph(self, gm, env, prefix):
        """Append gm's nodes (placeholders bound by env) to the graph; its outputs as proxies."""
        graph = self.graph
        out = None
        for n in gm.graph.nodes:
            if n.op == "placeholder":
                continue
            if n.op == "output":
                out = n.args[0]
                break
            if n.op != "call_function":
                raise Unsupported(f"an ahead-of-time backward graph with a {n.op} node")
            args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), lambda a: env[a])
            new = graph.create_node("call_function", n.target, args, kwargs, name=prefix + n.name)
            new.meta["kiln_origin"] = self.origin
            val = n.meta.get("val")
            new.meta["val"] = _refake(val, new)
            env[n] = new
        return [env[o].meta["val"] if isinstance(o, torch.fx.Node) else o for o in out]

    def replay_graph(self, gm, env, prefix):
        """Run a symbolic backward graph's ops on this capture's proxies (placeholders bound by
        env to proxies and ints); see Note [Compiled autograd: symbolic ahead-of-time backwards]."""
        graph = self.graph
        args_of = {}  # gm node -> this graph's argument for it (a node, or an int)
        for ph, v in env.items():
            args_of[ph] = v._node if isinstance(v, ProxyTensor) else v
        for n in gm.graph.nodes:
            if n.op == "placeholder":
                continue
            if n.op == "output":
                return [env[o] if isinstance(o, torch.fx.Node) else o for o in n.args[0]]
            if n.op != "call_function":
                raise Unsupported(f"an ahead-of-time backward graph with a {n.op} node")
            args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), lambda a: env[a])
            t = n.target
            if isinstance(t, torch._ops.OpOverload) and t is not torch.ops.aten.sym_size.int:
                last = graph._root.prev
                with _pop_mode_temporarily():  # recorded as this op (no C++ decomposition)
                    env[n] = self.tracer.dispatch(t, args, kwargs)
                new = last.next
                while new is not graph._root and new.target is not t:
                    new = new.next
                if new is graph._root:
                    raise Unsupported(f"{t} in an ahead-of-time backward graph was not recorded")
                new._rename(prefix + n.name)
                # sizes as the graph computes them (from its inputs), not this call's ints
                new.args, new.kwargs = torch.fx.node.map_arg((n.args, n.kwargs), args_of.get)
                out = env[n]
                args_of[n] = out._node if isinstance(out, ProxyTensor) else new
                continue
            if t is operator.getitem and isinstance(args[0], (tuple, list)):
                env[n] = out = args[0][args[1]]
                args_of[n] = out._node if isinstance(out, ProxyTensor) else out
                continue
            if any(isinstance(a, torch.Tensor) and not isinstance(a, ProxyTensor) for a in args):
                raise Unsupported(f"an ahead-of-time backward graph calls {t} on real tensors")
            if any(isinstance(a, torch.Tensor) for a in kwargs.values()):
                raise Unsupported(f"an ahead-of-time backward graph calls {t} on tensors")
            # a size (sym_size.int, operator.*, sym_max): this call's int, and a node computing it
            env[n] = value = (
                args[0].shape[args[1]] if t is torch.ops.aten.sym_size.int else t(*args, **kwargs)
            )
            # (kept as a node even over ints: a saved size is an int argument that cache.py
            # generalises, and what is computed from it must stay computed)
            nargs, nkwargs = torch.fx.node.map_arg((n.args, n.kwargs), args_of.get)
            if n.all_input_nodes:
                if t is torch.ops.aten.sym_size.int:  # `x.size(d)`: a torch-level call
                    size = graph.call_method("size", nargs)
                    size._rename(prefix + n.name)
                else:
                    size = graph.create_node(
                        "call_function", t, nargs, nkwargs, name=prefix + n.name
                    )
                size.meta["val"] = value
                args_of[n] = size
            else:
                args_of[n] = value
        raise Unsupported("an ahead-of-time backward graph without an output")

    def hooked_apply(self, k):
        """The backward of `kiln::hooked` (hooks called at run time): one `run_hooks(grad, token)`
        node, the token an input (Note [Hooks: given at run time])."""

        def apply(grad):
            self.set_origin(k)
            (i,) = self.g.node_inputs[k]
            # (called by the engine inside the capture's TraceMode: the op is recorded)
            return hook_ops.RUN_HOOKS(grad, self.input(i)), None

        return apply

    def opaque_apply(self, k, node):
        """A custom autograd.Function backward kept as an opaque call (run for real later)."""
        needs = node.needs_input_grad
        expected = []
        for need, (nxt, nr) in zip(needs, node.next_functions):
            if not need or nxt is None:
                expected.append(None)
            else:
                md = nxt._input_metadata[nr]
                expected.append((torch.Size(md.shape), md.dtype, md.device))
        target = _Opaque(type(node).__name__, tuple(expected))

        def apply(*grads):
            self.set_origin(k)
            args = [self.hook(self.g.node_hook_slot[k])]
            for gr in grads:
                if isinstance(gr, ProxyTensor):
                    args.append(gr._node)
                elif gr is None:
                    args.append(None)
                else:
                    raise Unsupported("a custom Function got a non-proxy grad")
            call = self.graph.call_function(target, tuple(args))
            call.meta["kiln_origin"] = self.origin
            result = []
            for j, e in enumerate(expected):
                if e is None:
                    result.append(None)
                    continue
                gn = self.graph.call_function(operator.getitem, (call, j))
                gn.meta["kiln_origin"] = self.origin
                self.fresh_exclude.add(gn)
                v = ProxyTensor(
                    torch.empty(e[0], dtype=e[1], device="meta"), e[2], gn, requires_grad=False
                )
                gn.meta["val"] = v
                result.append(v)
            return tuple(result)

        return apply

    # --- the run ---
    def run(self):
        g = self.g
        grads = [self.input(i) for i in range(g.num_root_grads)]
        roots = []
        for node, nr in g.root_edges:
            roots.append(torch.autograd.graph.GradientEdge(node, nr))
        undo = []
        saved_grads = []
        try:
            for k in range(1, len(g.nodes)):
                node = g.nodes[k]
                if isinstance(node, torch.autograd.function.BackwardCFunction):
                    if is_kiln_compiled_function(node._forward_cls):
                        fn = self.aot_apply(k, node)
                        if fn is None:
                            raise Unsupported("a CompiledFunction whose backward graph is unknown")
                    elif node._forward_cls is hook_ops.Hooked:
                        fn = self.hooked_apply(k)
                    else:
                        fn = self.opaque_apply(k, node)
                    node.apply = fn
                    undo.append(lambda n=node: delattr(n, "apply"))
                if g.node_retain[k]:
                    for i in g.node_retain[k].values():
                        t = g.inputs[i]
                        saved_grads.append((t, t.grad))
                        t.grad = None
                    handle = node.register_prehook(self.retain_marker(k))
                    undo.append(handle.remove)
            got = self._engine(roots, grads)
        finally:
            for u in reversed(undo):
                u()
            for t, old in saved_grads:
                t.grad = old
        return self.finish(got)

    def _engine(self, roots, grads):
        g = self.g
        allowed = {
            H.KilnHook.__call__.__code__,
            TraceMode.__torch_dispatch__.__code__,
            ProxyTensor.__torch_dispatch__.__func__.__code__,
        }
        me = sys._getframe()
        unknown = []

        def profile(frame, event, arg):
            if event == "call" and frame.f_back is me and frame.f_code not in allowed:
                code = frame.f_code
                if code.co_name in ("apply", "marker") and code.co_filename == __file__:
                    return
                if code.co_filename.startswith(_TORCH_DIR) and not any(
                    d in code.co_filename for d in _TORCH_CALLBACK_FILES
                ):
                    return  # the dispatcher's own Python helpers
                if _is_finalizer(frame):
                    return  # an object died meanwhile: not something the engine called
                unknown.append(f"{code.co_name} ({code.co_filename}:{code.co_firstlineno})")

        old = sys.getprofile()
        gc_was_on = gc.isenabled()
        gc.disable()  # no cyclic collection (and its finalizers) in the middle of the capture
        with self.tracer.tracing():
            sys.setprofile(profile)
            try:
                got = _ENGINE.run_backward(
                    tuple(roots), tuple(grads), True, False, tuple(g.engine_inputs), True, False
                )
            finally:
                sys.setprofile(old)
                if gc_was_on:
                    gc.enable()
        if unknown:
            raise Unsupported(
                f"the engine called a Python function kiln does not know: {unknown[0]}"
            )
        return got

    def finish(self, got):
        g = self.g
        graph = self.graph
        outputs = []
        if g.accumulate:
            # Note [Compiled autograd: stealing grads] eager's AccumulateGrad steals a grad
            # that nobody else references; here: one the graph computed (not an input or a hook's
            # result) whose memory no other accumulation receives (two params sharing one grad,
            # or views of it, would alias: those are cloned).
            bases = collections.Counter(
                _base(gr._node) for gr in got if isinstance(gr, ProxyTensor)
            )
            for k, gr in zip(g.leaves, got):
                if gr is None:
                    continue
                if not isinstance(gr, ProxyTensor):
                    raise Unsupported("a leaf's grad is not traced")
                self.set_origin(k)
                var = self.input(g.leaf_input[k])._node
                base = _base(gr._node)
                fresh = (
                    gr._node not in self.fresh_exclude
                    and base not in self.fresh_exclude
                    and bases[base] == 1
                )
                n = graph.call_function(H.accumulate_grad_, (var, gr._node, fresh))
                n.meta["kiln_origin"] = self.origin
                for hi in g.post_hooks(k):
                    n = graph.call_function(
                        H.call_hook, (self.hook(hi), var), {"hook_type": "post_acc_grad_hook"}
                    )
                    n.meta["kiln_origin"] = self.origin
                for hi in g.node_post.get(k, ()):  # Note [Compiled autograd: hooks on nodes]
                    n = graph.call_function(
                        H.call_hook, (self.hook(hi), gr._node), {"hook_type": "node_post_hook"}
                    )
                    n.meta["kiln_origin"] = self.origin
        else:
            for gr in got:
                if gr is None:
                    outputs.append(None)
                elif isinstance(gr, ProxyTensor):
                    outputs.append(gr._node)
                else:
                    raise Unsupported("a captured grad is not traced")
        graph.output(outputs)
        _dead_code(graph)
        root = self.tracer.root
        gm = torch.fx.GraphModule(root, graph, class_name="CompiledAutograd")
        return gm


def _base(node):
    """The node whose memory a traced value views (itself if it is no view)."""
    while "view_of" in node.meta:
        node = node.meta["view_of"]
    return node


def _refake(val, node):
    if isinstance(val, torch.Tensor):
        return fake_like(val, node)
    if isinstance(val, (tuple, list)):
        return type(val)(_refake(v, None) for v in val)
    return val


# Note [Compiled autograd: symbolic ahead-of-time backwards]
# A CompiledFunction compiled with symbolic sizes has a backward graph whose vals have SymInt
# sizes and whose size placeholders (its `kiln_sizes`) are ints at run time. Copying its nodes
# would put those symbolic vals into this capture, whose sizes are concrete (the engine compares
# them with its own metadata, and the key holds the concrete sizes); instead its ops are run
# again on the capture's proxies, the sizes bound to this call's ints. The ints end up in op
# arguments like a built-in node's, and a change is generalised the same way (cache.py); the
# node's kiln_sizes are among its cache sizes, so they can explain the ints that vary.


def _is_symbolic_graph(gm):
    for n in gm.graph.nodes:
        if n.op != "placeholder":
            break
        v = n.meta.get("val")
        if isinstance(v, torch.SymInt) or (isinstance(v, torch.Tensor) and is_symbolic(v)):
            return True
    return False


def _plan_of(cls):
    plan = cls.__dict__.get("_kiln_plan")
    if plan is not None:
        return plan
    bw = cls.__dict__.get("backward")
    fn = getattr(bw, "__func__", bw)
    for cell in getattr(fn, "__closure__", None) or ():
        v = cell.cell_contents
        if type(v).__name__ == "_Plan":
            return v
    raise Unsupported("a CompiledFunction without its plan")


def _backward_graph(plan):
    gm = getattr(plan, "bw_graph", None)
    if gm is None:
        bw = plan.backward
        owner = getattr(bw, "__self__", None)
        if isinstance(owner, torch.fx.GraphModule):
            gm = owner
    return gm


_EFFECTFUL = {H.call_hook, H.accumulate_grad_, H.retain_grad_}


def _dead_code(graph):
    """Drop unused pure nodes (e.g. the clone a retains_grad hook made while capturing)."""
    for n in reversed(list(graph.nodes)):
        if n.op in ("placeholder", "output") or n.users:
            continue
        t = n.target
        if t in _EFFECTFUL or isinstance(t, _Opaque):
            continue
        if isinstance(t, torch._ops.OpOverload) and t._schema.is_mutable:
            continue
        graph.erase_node(n)


def capture(g):
    """The FX graph of one backward call (raises Unsupported where it cannot be captured)."""
    cap = Capture(g)
    H.KilnHook.capturing = cap
    try:
        return cap.run()
    finally:
        H.KilnHook.capturing = None
