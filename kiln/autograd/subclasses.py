"""Wrapper tensor subclasses through AOT autograd: the traced graph takes and returns their inner
tensors; a runtime wrapper flattens the inputs and rebuilds the outputs (Note [AOT: wrapper
subclasses])."""

import dataclasses

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from kiln import logs
from kiln.contracts import GraphMeta
from kiln.exc import Unsupported

# Note [AOT: wrapper subclasses]
# A graph with a traceable wrapper subclass input (Note [Tensors: wrapper subclass inputs]) is
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
# real subclass inputs, like backend eager, with a perf_hints line): a graph that needs autograd
# (grad enabled and a tensor input that requires grad), and a graph with symbolic sizes.


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


def has_subclass(inputs):
    """Whether a graph's example inputs hold a wrapper subclass."""
    return any(is_traceable_wrapper_subclass(x) for x in inputs)


def _needs_autograd(inputs, layouts):
    if not torch.is_grad_enabled():
        return False
    flat = []
    for x, lay in zip(inputs, layouts):
        flatten(x, lay, flat)
    outer = [x for x in inputs if isinstance(x, torch.Tensor)]
    return any(isinstance(t, torch.Tensor) and t.requires_grad for t in [*flat, *outer])


def desugar(gm, example_inputs, compile_flat):
    """The callable for a graph with wrapper-subclass inputs: `compile_flat(fn, flat_inputs)` of
    the desugared function, or the graph itself where that is not built (see the note)."""
    layouts = [layout_of(x) for x in example_inputs]
    env = GraphMeta.of(gm).shape_env if isinstance(gm, torch.fx.GraphModule) else None
    why = None
    if env is not None and env.var_to_val:
        why = "symbolic sizes"
    elif _needs_autograd(example_inputs, layouts):
        why = "autograd (an input requires grad)"
    if why is not None:
        logs.log(
            "perf_hints", "aot: a graph with tensor-subclass inputs and %s runs as traced", why
        )
        return gm.forward
    return Desugared(gm, layouts, example_inputs, compile_flat)


class Desugared:
    """A graph of wrapper-subclass inputs compiled over their inner tensors."""

    def __init__(self, gm, layouts, example_inputs, compile_flat):
        self.gm = gm
        self.in_layouts = layouts
        self.out_layouts = None  # per graph output: a Layout, None (plain) or ("input", i)
        flat = []
        for x, lay in zip(example_inputs, layouts):
            flatten(x, lay, flat)
        self.compiled = compile_flat(self.flat_fn, flat)

    def flat_fn(self, *flat):
        """The graph as a function of plain tensors: what AOT autograd traces."""
        parts = iter(flat)
        args = [unflatten(lay, parts) for lay in self.in_layouts]
        outs = self.gm(*args)
        layouts, leaves = [], []
        for o in outs:
            src = next((i for i, a in enumerate(args) if a is o and self.in_layouts[i]), None)
            if src is not None:
                layouts.append(("input", src))
                continue
            lay = layout_of(o)
            layouts.append(lay)
            flatten(o, lay, leaves)
        if self.out_layouts is not None and layouts != self.out_layouts:
            raise Unsupported("aot: the subclass outputs of a graph differ between two traces")
        self.out_layouts = layouts
        return tuple(leaves)

    def __call__(self, *args):
        flat = []
        for a, lay in zip(args, self.in_layouts):
            flatten(a, lay, flat)
        parts = iter(self.compiled(*flat))
        return tuple(
            args[lay[1]] if type(lay) is tuple else unflatten(lay, parts)
            for lay in self.out_layouts
        )
