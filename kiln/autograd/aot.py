"""AOT autograd driver: joint graph, partition, compile, and the autograd.Function runtime.

    backend = aot_autograd(fw_compiler=my_compiler)     # a torch-level backend (gm, inputs) -> fn
    fn = aot_function(f, fw_compiler=my_compiler)       # or wrap a function / module directly

At compile time the graph is traced at the ATen level (tracer.py) with the inputs as primals; when
an input requires grad (and grad mode is on) the autograd engine itself runs on the proxy tensors
(`torch.autograd.grad` inside the trace), which records the backward as well: the joint graph
(primals, tangents) -> (outputs, grads). It is functionalized (functionalize.py), partitioned
(partition.py) and each half goes to its compiler; `CompiledFunction` runs the pair.
"""

import dataclasses
import functools
import itertools
import os

import torch
import torch.fx
from torch.utils import _pytree as pytree

from kiln import config, faults, logs
from kiln.autograd import subclasses
from kiln.autograd.aot_runtime import (
    CompiledFunction,
    _finish,
    _make_function,
    _mutated_inputs_alias,
)
from kiln.autograd.aten_tracer import Tracer, format_graph, graph_call
from kiln.autograd.functionalize import _is_impure, functionalize
from kiln.autograd.lift_floats import lift, lifted_positions, outputs_match
from kiln.autograd.partition import (
    default_partition,
    min_cut_rematerialization_partition,
    saved_bytes,
)
from kiln.autograd.plan_keys import (
    _autocast_off,
    _dynamic_dims,
    _env_of,
    _env_state,
    _guard_fn,
    _guarded_key,
    _key,
    _layout_check,
    _restore_env,
    _symbolic_examples,
    guarded_key_positions,
    make_symbolic_examples,
)
from kiln.contracts import GraphMeta, output_layouts
from kiln.exc import Unsupported
from kiln.symbolic import autocast_state as amp
from kiln.symbolic import graph_constants
from kiln.symbolic.fake import ProxyTensor, is_symbolic, sym_sizes
from kiln.symbolic.shape_env import ShapeEnv, contiguous_strides, hint_of

__all__ = [
    "aot_autograd",
    "aot_eager",
    "aot_function",
    "nop",
    "CompiledFunction",
]


def nop(gm, example_inputs):
    """A compiler that runs the graph as it is."""
    return gm.forward


def _partitioner(partition_fn):
    if partition_fn is not None:
        return partition_fn
    if config.partitioner == "default":
        return default_partition
    return min_cut_rematerialization_partition


def _random_free(decompositions):
    """Without functional RNG, random ops keep eager's op (and so draw what eager draws)."""
    if not decompositions or not config.fallback_random:
        return decompositions
    return {
        k: v
        for k, v in decompositions.items()
        if not (
            isinstance(k, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in k.tags
        )
    }


@dataclasses.dataclass
class _Plan:
    """What the runtime needs to know about one compiled specialization."""

    num_inputs: int
    mutated_inputs: list  # indices into the inputs; new values come first from the graph
    mutated_constants: list  # (module, attribute) of get_attr constants written by the graph
    outputs: list  # per user output: ("graph", k) | ("alias", OutputAlias) | ("const", value)
    out_spec: object
    diff_outputs: list = dataclasses.field(default_factory=list)  # graph output idx with tangents
    grad_inputs: list = dataclasses.field(default_factory=list)  # input idx getting a grad
    lifted: list = dataclasses.field(default_factory=list)  # Note [AOT: closed-over tensors]
    forward: object = None  # compiled forward (training) or inference callable
    backward: object = None
    num_saved: int = 0
    tangent_vals: list = dataclasses.field(default_factory=list)
    grad_deps: list = dataclasses.field(default_factory=list)  # per grad: tangent positions
    function: type = None
    fw_graph: object = None  # the ATen forward / inference graph given to the compiler
    bw_graph: object = None  # the ATen backward graph (saved.., tangents..) -> grads
    num_saved_sizes: int = 0  # the last num_saved_sizes saved values are ints (sizes)
    guard: object = None  # symbolic plan of aot_function(dynamic_dims=): args -> whether it fits
    rebuild: object = (
        None  # (args, graph outputs) -> the user's outputs (Note [AOT: the call's epilogue])
    )
    no_grad_inputs: tuple = ()  # inputs requiring grad that get none: Note [AOT: no-grad inputs]

    def tangents_from(self, grads, shapes=None):
        """The backward graph's tangents from the node's grads (None -> zeros), and which were given.

        `shapes`: the real shapes of the differentiable outputs (a symbolic plan's tangent vals
        have symbolic shapes).
        """
        tangents = [grads[i] for i in self.diff_outputs]
        present = [g is not None for g in tangents]
        for j, g in enumerate(tangents):
            v = self.tangent_vals[j]
            if g is None:
                shape = shapes[j] if shapes is not None else v.shape
                tangents[j] = torch.zeros(shape, dtype=v.dtype, device=v.device)
            elif not g.is_contiguous():
                tangents[j] = g.contiguous()
        return tangents, present

    def input_grads(self, got, present, needs):
        """(input index, grad) for each backward output the engine should receive.

        A grad is dropped when its input needs none, or when every tangent it depends on was None
        (an output the loss did not use gives no gradient, as in eager); a grad that depends on no
        tangent at all (an explicit zero) is kept.
        """
        for g, i, deps in zip(got, self.grad_inputs, self.grad_deps):
            if g is None or not needs[i] or (deps and not any(present[j] for j in deps)):
                continue
            yield i, g


def _fake_inputs(gm):
    return [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]


def _log_graph(title, gm, dump_id=None):
    """aot_graphs channel; with KILN_DEBUG_DIR also <dir>/aot/graph_<id>/<title>.py."""
    if logs.enabled("aot_graphs"):
        logs.log("aot_graphs", "%s\n%s", title, format_graph(gm, title.split()[0]))
    if config.debug_dir and dump_id is not None:
        folder = os.path.join(config.debug_dir, "aot", f"graph_{dump_id}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, title.split()[0] + ".py"), "w") as f:
            f.write(format_graph(gm, title.split()[0]) + "\n")


_dump_ids = itertools.count()


# --- tracing --------------------------------------------------------------------------------------


class _AsNonLeaf(torch.autograd.Function):
    """The same proxy (same node) as a non-leaf, so in-place ops on it are legal as in eager."""

    @staticmethod
    def forward(ctx, x):
        return ProxyTensor(x._meta, x.device, x._node)

    @staticmethod
    def backward(ctx, g):
        return g


# Note [AOT: closed-over tensors]
# A tensor the traced code reaches without it being an input (a closure, a module attribute of
# aot_function's fn) is a constant of the graph, read by reference at run time. When it requires
# grad, eager would give it a gradient: the joint trace asks autograd for its gradient too, and at
# run time it is passed to CompiledFunction as an extra input, so autograd delivers the gradient
# to it (its .grad, or its own history). kiln.compile lifts parameters as inputs; this is for
# aot_function / aot_module users.


# Note [AOT: mutated inputs that require grad]
# A graph input that requires grad and is not a leaf (an activation from before a graph break) may
# be mutated in place, as in eager. Its primal is traced as _AsNonLeaf(leaf) so that autograd
# allows the mutation; the new value is an output of CompiledFunction (with a tangent), and the
# epilogue `x.copy_(new)` runs under autograd, so x's history ends in CompiledFunctionBackward as it
# would end in the in-place op's backward in eager. Leaves that require grad stay leaves: mutating
# them raises eager's own error while tracing.
def _trace(fn, inputs, decompositions, *, joint, examples=None):
    """Trace fn over inputs. Returns (tracer, primals (leaves), values fn saw, flat outputs, spec).

    `examples` (one per input, or None) are what the trace sees instead of the inputs: symbolic
    fakes and SymInts (Note [AOT: symbolic sizes]).
    """
    tracer = Tracer(decompositions)
    prefix = "primals" if joint else "arg"
    examples = examples or [None] * len(inputs)
    primals = [
        tracer.placeholder(
            f"{prefix}_{i + 1}",
            x if e is None else e,
            requires_grad=joint and isinstance(x, torch.Tensor) and x.requires_grad,
        )
        for i, (x, e) in enumerate(zip(inputs, examples))
    ]
    # Note [Autograd: leaves made in the frame]: a graph that makes a leaf traces under grad
    grad = torch.enable_grad() if joint or _makes_leaves(fn) else torch.no_grad()
    with grad, tracer.tracing(), amp.restore_after():
        seen = [
            _AsNonLeaf.apply(p) if joint and _non_leaf(x) else p for p, x in zip(primals, inputs)
        ]
        out = graph_call(fn)(*seen)
    flat, spec = pytree.tree_flatten(out)
    return tracer, primals, seen, flat, spec


def _makes_leaves(fn):
    """Whether graph fn makes autograd leaves (`t.requires_grad_()`) while grad mode is on."""
    if not isinstance(fn, torch.fx.GraphModule) or not torch.is_grad_enabled():
        return False
    return any(n.op == "call_method" and n.target == "requires_grad_" for n in fn.graph.nodes)


def _non_leaf(x):
    return isinstance(x, torch.Tensor) and x.requires_grad and x.grad_fn is not None


def _forward_metadata(tracer, flat):
    """Functionalize a copy of the trace so far, returning every output: which inputs it mutates,
    which outputs alias inputs or other outputs (those are regenerated at run time)."""
    args = [tracer.to_arg(o) if isinstance(o, torch.Tensor | torch.SymInt) else None for o in flat]
    graph, val_map = torch.fx.Graph(), {}
    graph.graph_copy(tracer.graph, val_map)
    graph.output(tuple(val_map[a] if isinstance(a, torch.fx.Node) else None for a in args))
    return functionalize(graph_constants.graph_module(tracer.root, graph))


_CONSTANT_TYPES = (
    int,
    float,
    bool,
    complex,
    str,
    type(None),
    torch.dtype,
    torch.device,
    torch.Size,
)


def _output_plan(res, flat):
    outputs, graph_idx = [], []
    for i, (o, alias) in enumerate(zip(flat, res.output_aliases)):
        if isinstance(o, torch.SymInt):  # a symbolic size: computed by the graph
            outputs.append(("graph", len(graph_idx)))
            graph_idx.append(i)
        elif not isinstance(o, torch.Tensor):
            if not isinstance(o, _CONSTANT_TYPES):
                raise Unsupported(f"aot: an output of type {type(o).__name__} (not a pytree)")
            outputs.append(("const", o))
        elif alias is None and subclasses.layout_of(o) is not None:
            # a wrapper subclass made inside the graph that its output's example does not show
            # (an allow_in_graph function's result): the trace holds it over its inner tracing
            # tensors, which would leak out as the output (Note [AOT: wrapper subclasses])
            raise Unsupported(f"aot: a {type(o).__name__} output made inside the graph")
        elif alias is not None:
            outputs.append(("alias", alias))
        else:
            outputs.append(("graph", len(graph_idx)))
            graph_idx.append(i)
    return outputs, graph_idx


def _constant_targets(gm, names):
    return [(gm, name) for name in names]


def compile_inference(fn, inputs, decompositions, compiler, examples=None, shape_env=None):
    """Trace without autograd, functionalize, compile: the plan for no-grad calls."""
    tracer, _, _, flat, spec = _trace(fn, inputs, decompositions, joint=False, examples=examples)
    if tracer.grad_constants and torch.is_grad_enabled():
        return None  # Note [AOT: closed-over tensors]: a training plan is needed
    if any(isinstance(o, torch.Tensor) and o.requires_grad for o in flat):
        raise Unsupported("aot: an output requires grad through a leaf the graph made")
    res = _forward_metadata(tracer, flat)
    return _inference_plan(res, flat, spec, inputs, compiler, shape_env)


def _inference_plan(res, flat, spec, inputs, compiler, shape_env):
    """The inference plan of a functionalized forward `res` (all values) and its outputs."""
    outputs, graph_idx = _output_plan(res, flat)
    gm = res.gm
    out = gm.graph.output_node()
    vals = list(out.args[0])
    nm = len(res.mutated_inputs) + len(res.mutated_constants)
    out.args = (tuple(vals[:nm] + [vals[nm + i] for i in graph_idx]),)
    gm.graph.eliminate_dead_code(is_impure_node=_is_impure)
    gm.recompile()
    if shape_env is not None:
        GraphMeta.update(gm, shape_env=shape_env)
    _log_graph("inference graph", gm, next(_dump_ids))
    _tell_mutations(gm, res.mutated_inputs, inputs, inference=True)
    compiled = compiler(gm, _fake_inputs(gm))
    return _Plan(
        num_inputs=len(inputs),
        mutated_inputs=res.mutated_inputs,
        mutated_constants=_constant_targets(gm, res.mutated_constants),
        outputs=outputs,
        out_spec=spec,
        forward=compiled,
        fw_graph=gm,
    )


@dataclasses.dataclass
class JointTrace:
    """A joint graph and how its inputs/outputs map to the user's (see trace_joint)."""

    joint: torch.fx.GraphModule  # (primals.., tangents..) -> (outputs graph_idx.., grads..)
    meta: object  # FunctionalizeResult of the forward: mutated inputs, output aliases
    outputs: list  # per user output: ("graph", k) | ("alias", OutputAlias) | ("const", v)
    graph_idx: list  # user outputs computed by the graph
    diff: list  # CompiledFunction outputs (mutated inputs, then graph outputs) with a tangent
    grad_inputs: list  # inputs that get a gradient, in the joint's grad output order
    out_spec: object
    lifted: list  # closed-over tensors requiring grad: extra CompiledFunction inputs
    flat: list = None  # the traced outputs (values the forward returned)
    no_grad_inputs: tuple = ()  # inputs requiring grad whose gradient is structurally None


def trace_joint(fn, inputs, decompositions=None, examples=None):
    """Trace fn's forward and, through the autograd engine on the proxies, its backward."""
    tracer, primals, seen, flat, spec = _trace(
        fn, inputs, decompositions, joint=True, examples=examples
    )
    meta = _forward_metadata(tracer, flat)
    outputs, graph_idx = _output_plan(meta, flat)
    mutated = meta.mutated_inputs
    outs = [flat[i] for i in graph_idx]
    candidates = [(j, seen[i]) for j, i in enumerate(mutated)]
    candidates += [(len(mutated) + k, o) for k, o in enumerate(outs)]
    diff, diff_vals = [], []
    for idx, v in candidates:
        if isinstance(v, ProxyTensor) and v.requires_grad:
            if idx < len(mutated) and (
                v.grad_fn is None or type(v.grad_fn).__name__ == "_AsNonLeafBackward"
            ):
                continue  # not rewritten by a differentiable op (a leaf written under no_grad)
            diff.append(idx)
            diff_vals.append(v)
    if not diff:  # nothing differentiable: the forward trace is all an inference plan needs
        return JointTrace(None, meta, outputs, graph_idx, [], [], spec, [], flat)
    grad_inputs = [
        i for i, p in enumerate(primals) if isinstance(p, torch.Tensor) and p.requires_grad
    ]
    tangents = []
    for j, o in enumerate(diff_vals):
        if is_symbolic(o):  # a contiguous tangent of o's symbolic sizes
            sizes = sym_sizes(o)
            m = torch.empty([hint_of(s) for s in sizes], dtype=o.dtype, device="meta")
            t = ProxyTensor(m, o.device, None, False, sizes, contiguous_strides(sizes), 0)
        else:
            t = torch.empty(o.shape, dtype=o.dtype, device=o.device)
        tangents.append(tracer.placeholder(f"tangents_{j + 1}", t))
    lifted = list(tracer.grad_constants)
    wrt = [primals[i] for i in grad_inputs] + lifted
    grads = [None] * len(wrt)
    if diff:  # the backward runs outside autocast, as after eager's `with autocast(): loss = ...`
        with torch.enable_grad(), tracer.tracing(), _autocast_off():
            got = torch.autograd.grad(diff_vals, wrt, tangents, allow_unused=True)
        grads = list(got)
    tracer.output(tuple(outs) + tuple(grads))
    no_grad = tuple(i for i, g in zip(grad_inputs, grads) if g is None)
    grad_inputs = grad_inputs + [len(primals) + j for j in range(len(lifted))]
    return JointTrace(
        tracer.graph_module(),
        meta,
        outputs,
        graph_idx,
        diff,
        grad_inputs,
        spec,
        lifted,
        flat,
        no_grad,
    )


def compile_training(
    fn,
    inputs,
    decompositions,
    fw_compiler,
    bw_compiler,
    partition_fn,
    examples=None,
    shape_env=None,
    inference_compiler=None,
):
    """Joint trace, functionalize, partition, compile both halves: the plan for grad calls.

    When nothing differentiable comes out (an optimizer step: parameters written under
    no_grad), the forward trace is compiled by `inference_compiler` as the inference plan, under
    no_grad, without tracing the function a second time (or None without one).
    """
    jt = trace_joint(fn, inputs, decompositions, examples)
    if not jt.diff:
        if inference_compiler is None:
            return None
        with torch.no_grad():
            return _inference_plan(
                jt.meta, jt.flat, jt.out_spec, inputs, inference_compiler, shape_env
            )
    res = functionalize(jt.joint)
    if res.mutated_inputs != jt.meta.mutated_inputs or res.mutated_constants:
        raise Unsupported("aot: the backward mutates its inputs or the graph mutates a constant")
    num_fwd = len(res.mutated_inputs) + len(jt.graph_idx)
    dump_id = next(_dump_ids)
    _log_graph("joint graph", res.gm, dump_id)
    fw_gm, bw_gm = partition_fn(res.gm, _fake_inputs(res.gm), num_fwd_outputs=num_fwd)
    if shape_env is not None:
        for g in (res.gm, fw_gm, bw_gm):
            GraphMeta.update(g, shape_env=shape_env)
    _log_graph("forward graph", fw_gm, dump_id)
    _log_graph("backward graph", bw_gm, dump_id)
    if logs.enabled("aot_graphs"):
        logs.log("aot_graphs", "saved for backward: %d bytes", saved_bytes(fw_gm))
    bw_inputs = [n for n in bw_gm.graph.nodes if n.op == "placeholder"]
    tangent_nodes = [n for n in bw_inputs if n.name.startswith("tangents")]
    num_saved = len(bw_inputs) - len(tangent_nodes)
    num_sizes = sum(1 for n in bw_inputs[:num_saved] if isinstance(n.meta.get("val"), torch.SymInt))
    grad_deps = []
    for o in bw_gm.graph.output_node().args[0]:
        anc = _ancestor_set(o)
        grad_deps.append([j for j, t in enumerate(tangent_nodes) if t in anc])
    _tell_mutations(fw_gm, res.mutated_inputs, inputs)
    num_tensors = num_saved - num_sizes
    GraphMeta.update(fw_gm, free_layout_outputs=frozenset(range(num_fwd, num_fwd + num_tensors)))
    fw = fw_compiler(fw_gm, _fake_inputs(fw_gm))
    _take_saved_layouts(bw_inputs[:num_tensors], output_layouts(fw).strides, num_fwd)
    bw = bw_compiler(bw_gm, _fake_inputs(bw_gm))
    plan = _Plan(
        num_inputs=len(inputs),
        mutated_inputs=res.mutated_inputs,
        mutated_constants=[],
        outputs=jt.outputs,
        out_spec=jt.out_spec,
        diff_outputs=jt.diff,
        grad_inputs=jt.grad_inputs,
        lifted=jt.lifted,
        forward=fw,
        backward=bw,
        num_saved=num_saved,
        num_saved_sizes=num_sizes,
        tangent_vals=[n.meta["val"] for n in tangent_nodes],
        grad_deps=grad_deps,
        fw_graph=fw_gm,
        bw_graph=bw_gm,
        no_grad_inputs=jt.no_grad_inputs,
    )
    plan.function = _make_function(plan)
    return plan


# Note [AOT: saved activations keep their layout]
# The forward compiler may lay out the activations it saves for the backward as it likes (the
# kiln backend keeps a convolution net's activations channels-last, Note [Backend: channels-last
# convolutions]): `GraphMeta.free_layout_outputs` lists those outputs, and a compiled forward
# that reports `OutputLayouts.strides` has its choice copied into the vals of the backward graph's
# inputs before the backward is compiled, so the backward reads them as they are instead of
# copying each back to the traced layout. Only static strides of the same dense size are taken;
# a forward that falls back to eager reports none, and the backward's input checks still copy
# a tensor whose strides differ at run time (never a wrong result, only a slower one).
def _take_saved_layouts(saved_nodes, strides, first):
    """Give the backward's saved-tensor inputs the strides the compiled forward produces."""
    if not strides:
        return
    for j, node in enumerate(saved_nodes):
        stride = strides[first + j] if first + j < len(strides) else None
        val = node.meta.get("val")
        if stride is None or not isinstance(val, ProxyTensor) or val._symbolic:
            continue
        stride = tuple(stride)
        if tuple(val.stride()) == stride or len(stride) != val.dim():
            continue
        meta = torch.empty_strided(val.shape, stride, dtype=val.dtype, device="meta")
        node.meta["val"] = ProxyTensor(meta, val.device)


def _tell_mutations(gm, mutated_inputs, inputs, inference=False):
    """GraphMeta.input_mutations: {output k: input i} where output k is input i's new value
    (the first outputs), for inputs that need no grad or all inputs of an inference plan (whose
    epilogue copies under no_grad: an optimizer's parameters): a compiler may write it in place
    (Note [Backend: mutated inputs written in place]); the epilogue then copies nothing."""
    mutations = {
        k: i
        for k, i in enumerate(mutated_inputs)
        if inference or not (isinstance(inputs[i], torch.Tensor) and inputs[i].requires_grad)
    }
    GraphMeta.update(gm, input_mutations=mutations)


def _ancestor_set(o):
    seen, stack = set(), [o] if isinstance(o, torch.fx.Node) else []
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(n.all_input_nodes)
    return seen


class AOTCompiled:
    """The callable a backend returns: one plan per (grad mode, input metadata, scalar values).

    With symbolic `examples` (or `dynamic_dims` for aot_function), one symbolic plan per grad
    mode and static metadata instead: see Note [AOT: symbolic sizes].
    """

    def __init__(
        self, fn, settings, example_inputs=None, examples=None, shape_env=None, dynamic_dims=None
    ):
        self.fn = fn
        self.settings = settings
        self.plans = {}
        self.last_plan = None
        self.examples = examples
        self.shape_env = shape_env
        self.dynamic_dims = dynamic_dims  # aot_function's: examples made at the first call
        self.own_env = dynamic_dims is not None
        self.frozen = False  # a frontend env whose guards were rendered: no new facts
        self.dynamic = _dynamic_dims(examples) if examples is not None else None
        self._failed = set()
        self.layout_ok = None
        # Note [AOT: inputs the frontend guards]: the frontend's guards check every tensor
        # input's dtype, shape, strides, device and requires_grad before this is called, so a
        # static graph's plan key needs only what they do not cover. For a symbolic graph they
        # check the static sizes and the layout of each tensor with symbolic sizes (contiguous,
        # or its dense strides): the layouts its fakes have, so the layout check and the plan
        # key of tensor metadata are skipped too (40 us a call for a 27-input decoder step)
        inputs_guarded = isinstance(fn, torch.fx.GraphModule) and GraphMeta.of(fn).inputs_guarded
        self.guarded = examples is None and inputs_guarded
        self.guarded_symbolic = examples is not None and inputs_guarded
        self.lifted = lifted_positions(fn)  # Note [AOT: floats lifted to tensors]
        self.key_positions = None  # Note [AOT: the guarded key's positions]
        if example_inputs is not None:
            self._first_plan(list(example_inputs))
        self.frozen = not self.own_env

    def _first_plan(self, args):
        """The plan for the example inputs: with lifted floats if that traces, else without."""
        if self.lifted:
            try:
                plan = self.plan_for(lift(args, self.lifted))
                if plan is None or outputs_match(self.fn, plan):
                    return
            except Exception as e:  # an op that takes only a Scalar got the tensor
                logs.log("recompiles", f"aot: float inputs specialised ({type(e).__name__}: {e})")
            self.lifted, self.plans, self.last_plan = (), {}, None
            self.key_positions = None
        self.plan_for(args)

    def symbolic_plan(self, args):
        """The symbolic plan for these args if one applies (compiled on first use), else None."""
        if self.dynamic_dims is not None and self.examples is None:
            self.shape_env = self.shape_env or ShapeEnv()
            self.examples = make_symbolic_examples(args, self.dynamic_dims, self.shape_env)
            self.dynamic = _dynamic_dims(self.examples)
        if self.examples is None or not self.dynamic:
            return None
        if self.guarded_symbolic:  # Note [AOT: inputs the frontend guards]
            if self.key_positions is None:
                self.key_positions = guarded_key_positions(args, self.dynamic)
            key = _guarded_key(args, self.dynamic, self.key_positions)
        else:
            if self.layout_ok is None:
                self.layout_ok = _layout_check(self.examples)
            if not self.layout_ok(args):
                return None
            key = _key(args, self.dynamic)
        plan = self.plans.get(key)
        if plan is None and key not in self._failed:
            env = self.shape_env
            state = _env_state(env)
            try:
                plan = self.compile(args, self.examples)
            except Unsupported as e:  # e.g. a size kiln cannot compute in a graph: static plans
                logs.log("recompiles", f"aot: no symbolic plan ({e}); compiling static sizes")
                _restore_env(env, state)
                self._failed.add(key)
                return None
            if self.frozen and _env_state(env) != state:  # would need unrendered guards
                logs.log("recompiles", "aot: a symbolic recompile needs new shape guards; static")
                _restore_env(env, state)
                plan = None
            if plan is None:
                self._failed.add(key)
                return None
            if self.own_env:
                plan.guard = _guard_fn(env)
            self.plans[key] = plan
        if plan is not None and plan.guard is not None and not plan.guard(args):
            return None
        return plan

    def plan_for(self, args):
        plan = self.symbolic_plan(args)
        if plan is not None:
            self.last_plan = plan
            return plan
        if self.guarded:
            if self.key_positions is None:
                self.key_positions = guarded_key_positions(args)
            key = _guarded_key(args, positions=self.key_positions)
        else:
            key = _key(args)
        plan = self.plans.get(key)
        if plan is None:
            if len(self.plans) >= config.cache_size_limit:
                if len(self.plans) == config.cache_size_limit:
                    logs.warn(
                        "kiln aot: %d specializations of one graph (input sizes, dtypes, "
                        "requires_grad, scalar values); running it eagerly from now on",
                        len(self.plans),
                    )
                    self.plans[None] = None
                return None
            plan = self.plans[key] = self.compile(args)
        self.last_plan = plan
        return plan

    def compile(self, args, examples=None):
        fw_compiler, bw_compiler, partition_fn, decomps, inference_compiler = self.settings
        faults.hit("aot")
        decomps = _random_free(decomps)
        env = self.shape_env if examples is not None else None
        needs_grad = torch.is_grad_enabled() and any(
            isinstance(a, torch.Tensor) and a.requires_grad for a in args
        )
        if not needs_grad:
            plan = compile_inference(self.fn, args, decomps, inference_compiler, examples, env)
            if plan is not None:
                return plan
        # nothing differentiable coming out, this is the inference plan (compile_training)
        return compile_training(
            self.fn,
            args,
            decomps,
            fw_compiler,
            bw_compiler,
            _partitioner(partition_fn),
            examples,
            env,
            inference_compiler,
        )

    def __call__(self, *args):
        """Run fn's compiled plan for these inputs; returns what fn returns (same structure)."""
        given = args
        args = lift(args, self.lifted) if self.lifted else list(args)
        plan = self.plan_for(args)
        if plan is None:
            return self.fn(*given)
        if plan.mutated_inputs and _mutated_inputs_alias(args, plan.mutated_inputs):
            logs.log("perf_hints", "aot: a mutated input aliases another input; running eagerly")
            return self.fn(*given)
        if torch._C._is_any_autocast_enabled():
            with _autocast_off():  # the graph holds its casts already
                outs = _run(plan, args)
        else:
            outs = _run(plan, args)
        rebuild = plan.rebuild
        if rebuild is None:
            rebuild = plan.rebuild = _rebuild_fn(plan)
        return rebuild(args, outs)


# Note [AOT: no-grad inputs]
# An input that requires grad but that no differentiable output depends on (`b @ e.detach()` with
# e requiring grad) gets a None gradient in the joint trace. Handed to the autograd.Function as it
# is, it would still be an edge of the compiled node: the engine then runs e's own history
# during the backward even though the node returns None for it, which raises when that history
# was already freed by an earlier `.backward()` (a GAN step: the generator's loss backward, then
# the discriminator's on `e.detach()`). Eager records no edge there, so such an input is passed
# detached: the node's edges are those of eager's graph.
def _run(plan, args):
    """The plan's forward on the call's args: through its autograd.Function when it has one."""
    if plan.function is not None:
        if plan.no_grad_inputs:
            args = list(args)
            for i in plan.no_grad_inputs:
                args[i] = args[i].detach()
        return plan.function.apply(*args, *plan.lifted)
    if torch._C.is_grad_enabled():  # (not torch.no_grad(): a Python context costs ~1 us a call)
        torch._C._set_grad_enabled(False)
        try:
            return plan.forward(*args)
        finally:
            torch._C._set_grad_enabled(True)
    return plan.forward(*args)


# Note [AOT: the call's epilogue]
# After the graph runs, `_finish` writes mutated inputs back and rebuilds aliases, and the user's
# output structure is unflattened. Most plans have none of that to do: no mutation, every output
# computed by the graph in order, returned as one tensor or a flat tuple/list. Their epilogue is
# chosen once per plan (`_rebuild_fn`) and costs a tuple() instead of ~3 us of pytree walking.
def _rebuild_fn(plan):
    """The plan's epilogue: (args, graph outputs) -> what the user's function returns."""
    spec = plan.out_spec
    in_order = [("graph", k) for k in range(len(plan.outputs))]
    plain = (
        not plan.mutated_inputs
        and not plan.mutated_constants
        and [tuple(o) for o in plan.outputs] == in_order
    )
    if plain and spec.is_leaf():
        return lambda args, outs: outs[0]
    leaves = plain and spec.type in (tuple, list) and all(c.is_leaf() for c in spec.children())
    if leaves and len(spec.children()) == len(plan.outputs):
        kind = spec.type
        return lambda args, outs: outs if type(outs) is kind else kind(outs)
    return lambda args, outs: pytree.tree_unflatten(_finish(plan, args, list(outs)), spec)


def aot_autograd(
    fw_compiler, bw_compiler=None, partition_fn=None, decompositions=None, inference_compiler=None
):
    """A torch-level backend: ATen joint graph, partition, and fw/bw compilers of ATen graphs."""
    settings = (
        fw_compiler,
        bw_compiler or fw_compiler,
        partition_fn,
        decompositions,
        inference_compiler or fw_compiler,
    )

    def backend(gm, example_inputs):
        if isinstance(gm, torch.fx.GraphModule):  # it reads gm's sizes, not the examples'
            GraphMeta.update(gm, size_generic=True)
            env = GraphMeta.of(gm).shape_env
            if env is not None and env.int_symbols:  # Note [Shapes: unspecialised ints]
                env.narrow_ints()
        if subclasses.has_subclass(example_inputs, gm):  # Note [AOT: wrapper subclasses]
            return subclasses.desugar(gm, example_inputs, compile_flat)
        examples = _symbolic_examples(gm)
        if examples is None:
            return AOTCompiled(gm, settings, example_inputs)
        env = GraphMeta.of(gm).shape_env or _env_of(examples)
        GraphMeta.update(gm, shape_env=env)
        return AOTCompiled(gm, settings, example_inputs, examples=examples, shape_env=env)

    def compile_flat(fn, flat_inputs):
        return AOTCompiled(fn, settings, flat_inputs)

    backend.settings = settings
    return backend


aot_eager = aot_autograd(fw_compiler=nop)


def aot_function(
    fn,
    fw_compiler,
    bw_compiler=None,
    partition_fn=None,
    decompositions=None,
    inference_compiler=None,
    dynamic_dims=None,
):
    """Compile a function of tensors (any pytree of args/outputs), like functorch.compile.

    `dynamic_dims` ({positional arg index: dims}; an int argument: any value) traces those sizes
    symbolically: one plan for every size that satisfies the guards (Note [AOT: symbolic sizes]).
    """
    settings = (
        fw_compiler,
        bw_compiler or fw_compiler,
        partition_fn,
        decompositions,
        inference_compiler or fw_compiler,
    )
    cache = {}

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        flat, in_spec = pytree.tree_flatten((args, kwargs))
        entry = cache.get(in_spec)
        if entry is None:

            def flat_fn(*xs):
                a, k = pytree.tree_unflatten(list(xs), in_spec)
                return fn(*a, **k)

            flat_dims = None
            if dynamic_dims:
                offsets = list(itertools.accumulate(len(pytree.tree_leaves(a)) for a in args))
                flat_dims = {
                    ([0] + offsets)[i]: (True if not isinstance(args[i], torch.Tensor) else dims)
                    for i, dims in dynamic_dims.items()
                }
            entry = cache[in_spec] = AOTCompiled(flat_fn, settings, dynamic_dims=flat_dims)
        return entry(*flat)

    wrapper.cache = cache
    return wrapper
