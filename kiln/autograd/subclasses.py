"""Wrapper tensor subclasses through AOT autograd: the traced graph takes and returns their inner
tensors; a runtime wrapper flattens the inputs and rebuilds the outputs (Note [AOT: wrapper
subclasses])."""

import dataclasses

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from kiln import logs
from kiln.autograd.aten_tracer import graph_call
from kiln.contracts import GraphMeta
from kiln.exc import Unsupported
from kiln.symbolic.fake import ProxyTensor

# Note [AOT: wrapper subclasses]
# A graph with a traceable wrapper subclass input (Note [Tensors: wrapper subclass inputs]), or
# one whose outputs hold a subclass it made (Note [Tensors: wrappers made in the frame]), is
# compiled as a function of plain tensors: each subclass argument is replaced by its inner tensors
# (`__tensor_flatten__`, nested ones recursively), and the traced function rebuilds the subclass
# from the inner ProxyTensors (`__tensor_unflatten__` with the input's ctx, size and stride)
# before it runs the frontend's graph. The subclass's own __torch_dispatch__ thus runs inside the
# trace (our TraceMode answers NotImplemented for its type: Note [Tracer: wrapper subclasses over
# fakes]) and only the ops it makes on the inner tensors are recorded. Each subclass output is
# flattened the same way, and its layout (type, ctx, outer size and stride, as the trace made
# them) is kept: at run time the wrapper flattens the arguments, runs the compiled plain graph and
# rebuilds the subclass outputs; an output that is a subclass input itself is that input. The
# frontend's guards pin each input's type, flatten spec and inner metadata, so the layouts hold
# for every call of this graph. Not desugared (the graph runs as the frontend made it, on the
# real subclass inputs, like backend eager, with a perf_hints line): a graph with symbolic sizes,
# and the autograd cases Note [AOT: subclass gradients] names.


@dataclasses.dataclass(frozen=True)
class Layout:
    """How a wrapper subclass is made of its inner tensors (None for a plain tensor)."""

    cls: type
    names: tuple
    ctx: object
    size: tuple
    stride: tuple
    inner: tuple  # a Layout or None per name


def layout_of(t):
    """The Layout of a wrapper subclass value (nested ones recursively), None for anything else."""
    if not is_traceable_wrapper_subclass(t):
        return None
    names, ctx = t.__tensor_flatten__()
    names = tuple(names)
    inner = tuple(layout_of(getattr(t, n)) for n in names)
    return Layout(type(t), names, ctx, tuple(t.size()), tuple(t.stride()), inner)


def flatten(t, layout, out):
    """Append t's plain parts (t itself when layout is None) to out."""
    if layout is None:
        out.append(t)
        return
    for n, lay in zip(layout.names, layout.inner):
        flatten(getattr(t, n), lay, out)


def unflatten(layout, parts):
    """The value of `layout` rebuilt from the iterator of its plain parts."""
    if layout is None:
        return next(parts)
    inners = {n: unflatten(lay, parts) for n, lay in zip(layout.names, layout.inner)}
    return layout.cls.__tensor_unflatten__(inners, layout.ctx, layout.size, layout.stride)


def has_subclass(inputs, gm=None):
    """Whether a graph's example inputs, or the example values of its outputs (a subclass made
    inside the graph: Note [Tensors: wrappers made in the frame]), hold a wrapper subclass."""
    if any(is_traceable_wrapper_subclass(x) for x in inputs):
        return True
    if not isinstance(gm, torch.fx.GraphModule):
        return False
    out = next((n for n in gm.graph.nodes if n.op == "output"), None)
    flat = []
    torch.fx.node.map_arg(out.args if out is not None else (), flat.append)
    return any(is_traceable_wrapper_subclass(n.meta.get("example_value")) for n in flat)


def _grad_inputs(inputs, layouts):
    """Per input: whether autograd differentiates it at the subclass level (a subclass input
    that requires grad, under grad mode); None where a plain tensor input requires grad or an
    inner tensor requires grad on its own (not desugared: Note [AOT: subclass gradients])."""
    if not torch.is_grad_enabled():
        return [False] * len(inputs)
    wanted = []
    for x, lay in zip(inputs, layouts):
        if lay is None:
            if isinstance(x, torch.Tensor) and x.requires_grad:
                return None
            wanted.append(False)
            continue
        wanted.append(x.requires_grad)
        if not x.requires_grad and any(t.requires_grad for t in _flat(x, lay)):
            return None
    return wanted


def desugar(gm, example_inputs, compile_flat):
    """The callable for a graph with wrapper-subclass inputs: `compile_flat(fn, flat_inputs)` of
    the desugared function, or the graph itself where that is not built (see the note)."""
    layouts = [layout_of(x) for x in example_inputs]
    env = GraphMeta.of(gm).shape_env if isinstance(gm, torch.fx.GraphModule) else None
    grads = _grad_inputs(example_inputs, layouts)
    why = None
    if env is not None and env.var_to_val:
        why = "symbolic sizes"
    elif grads is None:
        why = "a plain input that requires grad"
    else:
        try:
            return Desugared(gm, layouts, grads, example_inputs, compile_flat)
        except Unsupported as e:
            why = str(e)
    logs.log("perf_hints", "aot: a graph with tensor-subclass inputs runs as traced (%s)", why)
    return gm.forward


class Desugared:
    """A graph of wrapper-subclass inputs compiled over their inner tensors."""

    def __init__(self, gm, layouts, grads, example_inputs, compile_flat):
        self.gm = gm
        self.in_layouts = layouts
        self.grads = grads  # per input: differentiated at the subclass level
        self.grad_layouts = {}  # input -> the Layout of its gradient, as the trace made it
        self.out_layouts = None  # per graph output: a Layout, None (plain) or ("input", i)
        flat = []
        for x, lay, g in zip(example_inputs, layouts, grads):
            if g:  # (the flat inputs of a differentiated subclass require grad at run time)
                flat.extend(t.detach().requires_grad_() for t in _flat(x, lay))
            else:
                flatten(x, lay, flat)
        self.compiled = compile_flat(self.flat_fn, flat)
        if len(self.grad_layouts) != sum(grads):
            raise Unsupported("aot: a subclass input got no gradient in the trace")

    def flat_fn(self, *flat):
        """The graph as a function of plain tensors: what AOT autograd traces."""
        parts = iter(flat)
        args = []
        for i, (lay, g) in enumerate(zip(self.in_layouts, self.grads)):
            if g and torch.is_grad_enabled():
                inners = [next(parts) for _ in range(_count(lay))]
                args.append(_UnflattenTraced.apply(self, i, lay, *inners))
            else:
                args.append(unflatten(lay, parts))
        outs = graph_call(self.gm)(*args)
        layouts, leaves = [], []
        for o in outs:
            src = next((i for i, a in enumerate(args) if a is o and self.in_layouts[i]), None)
            if src is not None:
                layouts.append(("input", src))
                continue
            lay = layout_of(o)
            layouts.append(lay)
            if lay is not None and o.requires_grad:
                leaves.extend(_FlattenTraced.apply(lay, o))
            else:
                flatten(o, lay, leaves)
        if self.out_layouts is not None and layouts != self.out_layouts:
            raise Unsupported("aot: the subclass outputs of a graph differ between two traces")
        self.out_layouts = layouts
        return tuple(leaves)

    def __call__(self, *args):
        grad = torch.is_grad_enabled()
        if grad and any(g and a.requires_grad for g, a in zip(self.grads, args)):
            made = iter(_SubclassGraph.apply(self, *args))
            return tuple(
                args[lay[1]] if type(lay) is tuple else next(made) for lay in self.out_layouts
            )
        return self.run(args, False)

    def run(self, args, grad):
        """The compiled graph on these args; with `grad`, connected to autograd by the
        Functions of Note [AOT: subclass gradients]."""
        flat = []
        for i, (a, lay) in enumerate(zip(args, self.in_layouts)):
            if lay is not None and grad and self.grads[i]:
                flat.extend(_FlattenAtRun.apply(self.grad_layouts[i], lay, a))
            else:
                flatten(a, lay, flat)
        parts = iter(self.compiled(*flat))
        outs = []
        for lay in self.out_layouts:
            if type(lay) is tuple:
                outs.append(args[lay[1]])
                continue
            if lay is None:
                outs.append(next(parts))
                continue
            inners = [next(parts) for _ in range(_count(lay))]
            if grad and any(t.requires_grad for t in inners):
                outs.append(_UnflattenAtRun.apply(lay, *inners))
            else:
                outs.append(unflatten(lay, iter(inners)))
        return tuple(outs)


def _detached(a, layout):
    """a detached: rebuilt from its detached inner tensors (not through the subclass's dispatch)."""
    if layout is None:
        return a.detach()
    return unflatten(layout, iter([t.detach() for t in _flat(a, layout)]))


def _leaf_copy(a, layout):
    """A new leaf that requires grad, made of a's (detached) inner tensors."""
    return _detached(a, layout).requires_grad_()


class _SubclassGraph(torch.autograd.Function):
    """A desugared graph under autograd (Note [AOT: subclass gradients: tangents]): its outputs
    other than returned inputs."""

    @staticmethod
    def forward(ctx, owner, *args):
        wrt = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.requires_grad]
        leaves = list(args)
        for i in wrt:
            leaves[i] = _leaf_copy(args[i], owner.in_layouts[i])
        with torch.enable_grad():
            outs = owner.run(leaves, True)
        kept = [(o, lay) for o, lay in zip(outs, owner.out_layouts) if type(lay) is not tuple]
        ctx.owner, ctx.args, ctx.leaves, ctx.wrt, ctx.kept = owner, args, leaves, wrt, kept
        ctx.set_materialize_grads(False)
        return tuple(_detached(o, lay) if o.requires_grad else o for o, lay in kept)

    @staticmethod
    def backward(ctx, *grads):
        owner, kept = ctx.owner, ctx.kept
        if all(g is None or _kind(layout_of(g)) == _kind(lay) for g, (_, lay) in zip(grads, kept)):
            leaves, outs = ctx.leaves, [o for o, _ in kept]
        else:  # a gradient made unlike the traced tangent: the graph again, as traced
            logs.log("perf_hints", "aot: a subclass gradient unlike the traced one; recomputing")
            leaves = list(ctx.args)
            for i in ctx.wrt:
                leaves[i] = _leaf_copy(ctx.args[i], owner.in_layouts[i])
            with torch.enable_grad():
                made = graph_call(owner.gm)(*leaves)
            outs = [o for o, lay in zip(made, owner.out_layouts) if type(lay) is not tuple]
        pairs = [(o, g) for o, g in zip(outs, grads) if g is not None and o.requires_grad]
        got = [None] * len(ctx.wrt)
        if pairs:
            got = torch.autograd.grad(
                [o for o, _ in pairs],
                [leaves[i] for i in ctx.wrt],
                [g for _, g in pairs],
                retain_graph=True,  # (a second backward, as eager's retain_graph allows)
                allow_unused=True,
            )
        result = [None] * len(ctx.args)
        for i, g in zip(ctx.wrt, got):
            result[i] = g
        return (None, *result)


def _flat(t, layout):
    out = []
    flatten(t, layout, out)
    return out


def _count(layout):
    return 1 if layout is None else sum(_count(lay) for lay in layout.inner)


def _kind(layout):
    """A Layout's structure without its sizes: the type, inner names and ctx, nested."""
    if layout is None:
        return None
    return (layout.cls, layout.names, layout.ctx, tuple(_kind(lay) for lay in layout.inner))


def _fresh(t):
    """A new proxy of the same traced node (an autograd.Function output of its own)."""
    return ProxyTensor(t._meta, t.device, t._node)


# Note [AOT: subclass gradients]
# autograd differentiates a wrapper subclass at the subclass level: its ops are recorded on the
# outer tensor, and the subclass's __torch_dispatch__ runs below autograd, so nothing connects
# the inner tensors of an output to those of an input. The desugared trace makes that
# connection with two autograd.Functions: `_UnflattenTraced` builds a subclass input (which
# requires grad) from its inner primals, and its backward flattens the subclass gradient that
# the subclass-level backward made (its Layout, as traced, is kept per input); `_FlattenTraced`
# hands out the inner tensors of a subclass output, and its backward rebuilds the subclass
# tangent from the inner tangents in the output's own Layout (as in torch, the tangent is taken
# to be made like the output). The joint trace thus differentiates plain tensors while the
# subclass's own backward ops are recorded through its dispatch. At run time the same pair
# (`_FlattenAtRun`, `_UnflattenAtRun`) connects the real subclass input and output to the
# compiled function's inner tensors, inside `_SubclassGraph`, whose backward runs that autograd
# graph when each gradient is made like the traced tangent (type, inner names, ctx), and else
# runs the frontend's graph again on the inputs and differentiates it (Note [AOT: subclass
# gradients: tangents]): the gradient a user passes (`out.backward(g)`) may be made any way,
# and no guess is made about it. Not desugared (the graph runs as traced): a plain tensor input
# that requires grad (its gradient may be a subclass, which a plain graph output cannot be), an
# inner tensor that requires grad on its own.


# Note [AOT: subclass gradients: tangents]
# The compiled backward was traced for tangents made like the outputs. A wrapper subclass's
# value may be spelled many ways (a scaled tensor: any scale), and kiln cannot convert one
# spelling into another without knowing the subclass's meaning; so a call whose gradient is
# made otherwise recomputes: the frontend graph runs again on the saved inputs under autograd
# (the subclass's own code, as eager) and is differentiated with the gradient as given. Slower,
# never wrong.


class _UnflattenTraced(torch.autograd.Function):
    @staticmethod
    def forward(ctx, owner, i, layout, *inners):
        ctx.owner, ctx.i, ctx.n = owner, i, len(inners)
        return unflatten(layout, iter([_fresh(t) for t in inners]))

    @staticmethod
    def backward(ctx, g):
        if g is None:
            return (None, None, None, *[None] * ctx.n)
        lay = layout_of(g)
        if lay is None or _count(lay) != ctx.n:
            raise Unsupported(f"aot: the gradient of a subclass input is a {type(g).__name__}")
        prev = ctx.owner.grad_layouts.get(ctx.i)
        if prev is not None and prev != lay:
            raise Unsupported("aot: the gradient of a subclass input differs between traces")
        ctx.owner.grad_layouts[ctx.i] = lay
        return (None, None, None, *_flat(g, lay))


class _FlattenTraced(torch.autograd.Function):
    @staticmethod
    def forward(ctx, layout, outer):
        ctx.layout = layout
        return tuple(_fresh(t) for t in _flat(outer, layout))

    @staticmethod
    def backward(ctx, *grads):
        return None, unflatten(ctx.layout, iter(grads))


class _FlattenAtRun(torch.autograd.Function):
    @staticmethod
    def forward(ctx, grad_layout, layout, outer):
        ctx.grad_layout = grad_layout
        ctx.set_materialize_grads(False)
        return tuple(t.detach() for t in _flat(outer, layout))

    @staticmethod
    def backward(ctx, *grads):
        if all(g is None for g in grads):
            return None, None, None
        return None, None, unflatten(ctx.grad_layout, iter(grads))


class _UnflattenAtRun(torch.autograd.Function):
    @staticmethod
    def forward(ctx, layout, *inners):
        ctx.layout, ctx.n = layout, len(inners)
        ctx.set_materialize_grads(False)
        return unflatten(layout, iter([t.detach() for t in inners]))

    @staticmethod
    def backward(ctx, g):
        if g is None:
            return (None, *[None] * ctx.n)
        lay = layout_of(g)
        if _kind(lay) != _kind(ctx.layout):
            raise RuntimeError(
                f"kiln: the gradient of a {ctx.layout.cls.__name__} output is made unlike the one "
                f"its compiled backward was traced for ({type(g).__name__}); run this part "
                "without kiln"
            )
        return (None, *_flat(g, lay))
