"""ATen-level tracing through __torch_dispatch__ on meta-backed proxy tensors (no real compute).

    def f(x):
        return torch.cos(torch.cos(x)) + 1

    gm = trace_aten(f, [torch.randn(5, 5)])
    print(gm.code)
    # def forward(self, arg0_1):
    #     cos = torch.ops.aten.cos.default(arg0_1)
    #     cos_1 = torch.ops.aten.cos.default(cos)
    #     add = torch.ops.aten.add.Tensor(cos_1, 1)
    #     return (add,)

Every node carries `node.meta["val"]`: a `ProxyTensor` (shape, stride, dtype and the REAL device,
no data), a tuple of them, or a Python scalar.
"""

import contextlib
import operator

import sympy
import torch
import torch.fx
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from kiln.autograd import layouts, shape_rules
from kiln.exc import Unsupported
from kiln.frontend.shapes import SymNode, exact_floats, from_torch, hint_of, to_torch

aten = torch.ops.aten

__all__ = [
    "ProxyTensor",
    "Tracer",
    "trace_aten",
    "fake_like",
    "is_fake",
    "format_graph",
    "sym_sizes",
    "sym_strides",
]


# Note [Tracer: proxy tensors]
# A ProxyTensor is a wrapper tensor subclass: the outer tensor reports the real size, stride, dtype
# and device (so autograd, type promotion and device checks behave as for the real input) while all
# the work happens on `_meta`, a tensor on the meta device with the same layout, and `_node` names
# the FX node that produced it. The TraceMode sees every ATen call (from user code, decompositions
# and the autograd engine's backward formulas alike), runs it on the meta tensors, records a node
# and wraps the outputs. Outside a trace a ProxyTensor is a plain "fake tensor": ops on it run on
# meta and return node-less ProxyTensors, so the code generator can reuse vals freely.


class ProxyTensor(torch.Tensor):
    """A data-less tensor: real device and metadata, a meta tensor inside, optionally an FX node."""

    _meta: torch.Tensor
    _node: torch.fx.Node | None

    @staticmethod
    def __new__(
        cls, meta, device, node=None, requires_grad=False, sizes=None, strides=None, offset=None
    ):
        symbolic = sizes is not None and _any_symbolic((sizes, strides, offset))
        if symbolic:
            sizes = [to_torch(s) for s in sizes]
            strides = [to_torch(s) for s in strides]
            offset = to_torch(meta.storage_offset() if offset is None else offset)
        r = torch.Tensor._make_wrapper_subclass(
            cls,
            sizes if symbolic else meta.size(),
            strides=strides if symbolic else meta.stride(),
            storage_offset=offset if symbolic else meta.storage_offset(),
            dtype=meta.dtype,
            layout=meta.layout,
            device=device,
            requires_grad=requires_grad,
        )
        r._meta = meta
        r._node = node
        r._symbolic = symbolic
        return r

    __torch_function__ = torch._C._disabled_torch_function_impl

    def __repr__(self, *, tensor_contents=None):
        name = f"{self._node.name}: " if self._node is not None else ""
        return f"ProxyTensor({name}{describe(self)}, device={self.device})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        # Only reached outside a trace (a TraceMode handles everything inside one): fake mode.
        return _FakeDispatch().dispatch(func, args, kwargs or {})


def is_fake(x):
    """Whether x is one of our data-less tensors."""
    return isinstance(x, ProxyTensor)


def _any_symbolic(tree):
    """Whether a nest of tuples/lists (Sizes included) holds a SymNode or SymInt."""
    if isinstance(tree, list | tuple):
        return any(_any_symbolic(x) for x in tree)
    return isinstance(tree, SymNode | torch.SymInt)


def is_symbolic(t):
    """Whether a tensor has symbolic sizes, strides or storage offset (only ProxyTensors can)."""
    return getattr(t, "_symbolic", False)


def sym_sizes(t):
    """t's sizes as a tuple of ints and SymNodes."""
    if not is_symbolic(t):
        return tuple(int(s) for s in t.shape)
    return tuple(from_torch(s) for s in t.shape)


def sym_strides(t):
    """t's strides as a tuple of ints and SymNodes."""
    if not is_symbolic(t):
        return tuple(int(s) for s in t.stride())
    return tuple(from_torch(s) for s in t.stride())


def sym_offset(t):
    """t's storage offset as an int or SymNode."""
    return from_torch(t.storage_offset()) if is_symbolic(t) else int(t.storage_offset())


def fake_like(t, node=None, requires_grad=False, sizes=None):
    """A ProxyTensor with t's size, stride, dtype and device (never reads t's data).

    `sizes` (ints and SymNodes, e.g. from `ShapeEnv.sizes_of`) makes it symbolic: strides are
    rebuilt from them in t's layout order (dense layouts), else the sizes are specialised. A
    symbolic ProxyTensor `t` keeps its symbolic sizes and strides.
    """
    if sizes is None and is_symbolic(t):
        sizes, strides, offset = sym_sizes(t), sym_strides(t), sym_offset(t)
        meta = torch.empty_strided(
            [hint_of(s) for s in sizes], [hint_of(s) for s in strides], dtype=t.dtype, device="meta"
        )
        return ProxyTensor(meta, t.device, node, requires_grad, sizes, strides, offset)
    meta = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device="meta")
    if sizes is None or not _any_symbolic(sizes):
        return ProxyTensor(meta, t.device, node, requires_grad)
    sizes = tuple(sizes)
    if tuple(hint_of(s) for s in sizes) != tuple(t.shape):
        raise ValueError(f"symbolic sizes {sizes} do not have the hints {tuple(t.shape)}")
    strides = layouts.dense_strides(sizes, tuple(t.stride()))
    if strides is None or t.storage_offset() != 0:  # not a dense layout: specialise
        for s in sizes:
            int(s)
        return ProxyTensor(meta, t.device, node, requires_grad)
    return ProxyTensor(meta, t.device, node, requires_grad, sizes, strides, 0)


_DTYPE_ABBR = {
    torch.float32: "f32",
    torch.float64: "f64",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int16: "i16",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.bool: "b8",
    torch.complex64: "c64",
    torch.complex128: "c128",
}


def describe(t):
    """Short text of a tensor's dtype and shape, e.g. 'f32[5, 5]'."""
    dt = _DTYPE_ABBR.get(t.dtype, str(t.dtype).replace("torch.", ""))
    return f"{dt}[{', '.join(str(s) for s in t.shape)}]"


def describe_val(v):
    """Text of a node.meta['val'] (tensor, tuple of tensors, scalar)."""
    if isinstance(v, torch.Tensor):
        return describe(v)
    if isinstance(v, (tuple, list)):
        return "(" + ", ".join(describe_val(x) for x in v) + ")"
    return repr(v)


_INFIX = {
    operator.add: "+",
    operator.sub: "-",
    operator.mul: "*",
    operator.floordiv: "//",
    operator.mod: "%",
}


def format_graph(gm, name="forward"):
    """Readable code of an ATen graph with a shape comment per node."""
    lines = [f"def {name}({', '.join(n.name for n in gm.graph.nodes if n.op == 'placeholder')}):"]
    for n in gm.graph.nodes:
        val = n.meta.get("val")
        comment = f"  # {describe_val(val)}" if val is not None else ""
        if n.op == "placeholder":
            lines.append(f"    # {n.name}: {describe_val(val)}")
        elif n.op == "output":
            lines.append(f"    return {n.args[0]}")
        elif n.op == "get_attr":
            lines.append(f"    {n.name} = self.{n.target}{comment}")
        elif n.target in _INFIX:  # size arithmetic: `mul = sym_size_int * sym_size_int_1`
            a, b = (repr(x) if not isinstance(x, torch.fx.Node) else x.name for x in n.args)
            lines.append(f"    {n.name} = {a} {_INFIX[n.target]} {b}{comment}")
        else:
            target = n.target
            tname = (
                f"aten.{target.__name__}"
                if isinstance(target, torch._ops.OpOverload) and target.namespace == "aten"
                else (str(target) if isinstance(target, torch._ops.OpOverload) else target.__name__)
            )
            args = ", ".join(
                [repr(a) for a in n.args] + [f"{k}={v!r}" for k, v in n.kwargs.items()]
            )
            lines.append(f"    {n.name} = {tname}({args}){comment}")
    return "\n".join(lines)


# --- the dispatch rules -------------------------------------------------------------------------


def _device_args(func):
    """(position, name) of the Device arguments of an op's schema (factory ops, to, _to_copy)."""
    try:
        args = func._schema.arguments
    except AttributeError:
        return []
    return [(i, a.name) for i, a in enumerate(args) if "Device" in str(a.type)]


def _default_device():
    get = getattr(torch, "get_default_device", None)  # torch >= 2.3
    return get() if get is not None else torch.device("cpu")


def _common_device(tensors):
    """The device an op on these tensors runs on: the first non-CPU-scalar one (as eager)."""
    devices = [t.device for t in tensors]
    for t in tensors:
        if not (t.device.type == "cpu" and t.dim() == 0):
            return t.device
    return devices[0] if devices else torch.device("cpu")


class _FakeDispatch:
    """Run an op on meta tensors and wrap the result with the real device; no recording."""

    recording = False

    def meta_of(self, t):
        if isinstance(t, ProxyTensor):
            return t._meta
        return self.meta_of_real(t)

    def meta_of_real(self, t):
        if t.device.type == "meta":
            return t
        out = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device="meta")
        return out

    def dispatch(self, func, args, kwargs):
        if func in _DATA_DEPENDENT:
            raise Unsupported(f"data-dependent operator {func} (e.g. .item()) on a traced tensor")
        symbolic = _has_symbolic(args, kwargs)
        if symbolic and func in _METADATA_QUERIES:
            return _METADATA_QUERIES[func](*args, **kwargs)
        tensors = [x for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
        out_device = None
        dev_names = _device_args(func)
        margs, mkwargs = list(args), dict(kwargs)
        if dev_names:
            for pos, name in dev_names:  # `to(x, device)` passes it by position
                if name in mkwargs and mkwargs[name] is not None:
                    out_device = torch.device(mkwargs[name])
                    mkwargs[name] = torch.device("meta")
                elif pos < len(margs) and margs[pos] is not None:
                    out_device = torch.device(margs[pos])
                    margs[pos] = torch.device("meta")
            if "pin_memory" in mkwargs:
                mkwargs["pin_memory"] = False
        if out_device is None:  # no device argument: the inputs' (empty_like), else the default
            out_device = _common_device(tensors) if tensors else _default_device()
        margs, mkwargs = pytree.tree_map_only(torch.Tensor, self.meta_of, (margs, mkwargs))
        if symbolic:  # the meta kernel runs at the hints
            margs, mkwargs = pytree.tree_map_only(_SYM_TYPES, _hint_value, (margs, mkwargs))
        try:
            out = func(*margs, **mkwargs)
        except NotImplementedError as e:
            raise Unsupported(f"operator {func} has no meta kernel: {e}") from e
        if func is _CONVOLUTION and out_device.type == "cpu" and not symbolic:
            out = _cpu_conv_layout(margs, out)
        layout = None
        if symbolic:
            env = _env_in((args, kwargs)) or _NO_ENV
            prev, env.reason = env.reason, f"aten op {func}"
            try:
                if _is_metadata_mutation(func) and is_symbolic(args[0]):
                    _resync_symbolic(func, args, kwargs, out)
                elif _mutated_arg_values(func, args, kwargs) is None:
                    layout = symbolic_layout(func, args, kwargs, out)
            finally:
                env.reason = prev
        return self.wrap_outputs(func, args, kwargs, out, out_device, layout)

    def wrap_outputs(self, func, args, kwargs, out, device, layout=None):
        # In-place and out= ops return (aliases of) their mutated arguments: hand back the same
        # wrapper objects, as eager returns the same Python tensors.
        mutated = _mutated_arg_values(func, args, kwargs)
        if mutated is not None:
            if isinstance(out, torch.Tensor):
                return mutated[0]
            if isinstance(out, (tuple, list)) and len(out) == len(mutated):
                return type(out)(mutated)
        if layout is not None:
            return _wrap_symbolic(out, device, *layout)
        return pytree.tree_map_only(torch.Tensor, lambda m: ProxyTensor(m, device), out)


_SYM_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)
_CONVOLUTION = torch.ops.aten.convolution.default


def _channels_last(t):
    return t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last)


def _cpu_conv_layout(margs, out):
    """CPU convolution's output layout: channels-last when the input or the weight is (the meta
    kernel answers contiguous, so compiled outputs had other strides than eager's)."""
    x, w = margs[0], margs[1]
    if not (_channels_last(x) and not x.is_contiguous()) and not (
        _channels_last(w) and not w.is_contiguous()
    ):
        return out
    return out.contiguous(memory_format=torch.channels_last)


def _queries():
    table = {
        "size.default": lambda t: list(t.shape),
        "size.int": lambda t, d: t.shape[d],
        "sym_size.int": lambda t, d: t.shape[d],
        "sym_size.default": lambda t: list(t.shape),
        "stride.default": lambda t: list(t.stride()),
        "stride.int": lambda t, d: t.stride(d),
        "sym_stride.int": lambda t, d: t.stride(d),
        "sym_stride.default": lambda t: list(t.stride()),
        "numel.default": lambda t: t.numel(),
        "sym_numel.default": lambda t: t.numel(),
        "storage_offset.default": lambda t: t.storage_offset(),
        "sym_storage_offset.default": lambda t: t.storage_offset(),
        "dim.default": lambda t: t.dim(),
    }
    out = {}
    for name, fn in table.items():
        packet, _, overload = name.partition(".")
        op = getattr(getattr(aten, packet, None), overload, None)
        if op is not None:
            out[op] = fn
    return out


# metadata queries on a symbolic tensor answer with its SymInts (no meta run, no node)
_METADATA_QUERIES = _queries()


def _hint_value(v):
    node = from_torch(v)
    return node.hint if isinstance(node, SymNode) else node


class _NoEnv:
    reason = None


_NO_ENV = _NoEnv()


def _env_in(tree):
    """The ShapeEnv of the first symbolic value in a tree of arguments."""
    for x in pytree.tree_leaves(tree):
        if is_symbolic(x):
            sizes = (*sym_sizes(x), *sym_strides(x), sym_offset(x))
            x = next((s for s in sizes if isinstance(s, SymNode)), None)
        node = from_torch(x) if isinstance(x, _SYM_TYPES) else x
        if isinstance(node, SymNode):
            return node.env
    return None


def _has_symbolic(args, kwargs):
    """Whether any argument is a SymInt/SymFloat/SymBool or a symbolic ProxyTensor."""
    return any(
        isinstance(x, _SYM_TYPES) or getattr(x, "_symbolic", False)
        for x in pytree.tree_leaves((args, kwargs))
    )


def _wrap_symbolic(out, device, sizes, strides, offsets):
    if isinstance(out, torch.Tensor):
        return ProxyTensor(out, device, None, False, sizes, strides, offsets)
    if isinstance(out, (tuple, list)):
        return type(out)(
            _wrap_symbolic(o, device, sz, st, of)
            for o, sz, st, of in zip(out, sizes, strides, offsets)
        )
    return out


# Note [Tracer: symbolic sizes]
# A ProxyTensor whose sizes are symbolic carries them as torch.SymInts over our SymNodes (see
# Note [Shapes: torch's SymNode protocol]); `_meta` is the same tensor at the hints. An op on such
# tensors (or with SymInt arguments: `view(x, [s0*s1, 16])`, `zeros([s0])`) runs on meta at the
# hints for dtype, rank and concrete layout; its symbolic sizes and strides come from
# `layouts.propagate` (the rule's sizes are checked against the meta result's; without a rule,
# or on disagreement, the inputs are specialised with guards and the concrete layout is used), and
# a view's storage offset from its input's (`_view_offsets`). Never a wrong size: anything that
# cannot be expressed specialises.


def symbolic_layout(func, args, kwargs, out):
    """(sizes, strides, storage offsets) of `func`'s meta result `out`, in out's structure."""
    sargs, skwargs = pytree.tree_map_only(_SYM_TYPES, from_torch, (tuple(args), dict(kwargs)))
    sizes, strides = layouts.propagate(func, sargs, skwargs, out, sym_sizes, sym_strides)
    offsets = _view_offsets(func, sargs, skwargs, out)
    if offsets is None:
        layouts._specialise(sargs)
        for t in pytree.tree_leaves((sargs, skwargs)):
            if is_symbolic(t):
                layouts._specialise((sym_sizes(t), sym_strides(t), sym_offset(t)))
        return layouts._concrete(out), layouts._concrete_strides(out), _offsets(out)
    return sizes, strides, offsets


def _offsets(out):
    if isinstance(out, torch.Tensor):
        return int(out.storage_offset())
    if isinstance(out, (tuple, list)):
        return tuple(_offsets(o) for o in out)
    return None


def _view_offsets(func, sargs, skwargs, out):
    """Symbolic storage offsets of a view op's outputs (None where they cannot be expressed)."""
    concrete = _offsets(out)
    if not is_view_op(func) or not isinstance(sargs[0], torch.Tensor):
        return concrete
    x = sargs[0]
    base, xs, xt = sym_offset(x), sym_sizes(x), sym_strides(x)
    name = func.__name__
    try:
        if name in ("slice.Tensor", "select.int", "narrow.default"):
            params = list(sargs[1:]) + list(skwargs.values())
            d = shape_rules._norm_dim(params[0] if params else 0, len(xs))
            start = params[1] if len(params) > 1 else None
            if name == "select.int":
                start = start + xs[d] if start < 0 else start
            else:
                start = shape_rules._clamp_index(start, xs[d], 0)
            res = base + start * xt[d]
        elif name in ("split.Tensor", "split_with_sizes.default", "unbind.int"):
            d = shape_rules._norm_dim(
                sargs[2] if len(sargs) > 2 else skwargs.get("dim", 0), len(xs)
            )
            res = _split_offsets(name, sargs, d, xs, xt, base, len(out))
        elif name == "diagonal.default":
            params = dict(zip(("offset", "dim1", "dim2"), sargs[1:]), **skwargs)
            off, dim1, dim2 = (
                params.get(k, v) for k, v in (("offset", 0), ("dim1", 0), ("dim2", 1))
            )
            d = shape_rules._norm_dim(dim2 if off >= 0 else dim1, len(xs))
            res = base + abs(off) * xt[d]
        elif name.startswith("as_strided"):
            off = sargs[3] if len(sargs) > 3 else skwargs.get("storage_offset")
            res = base if off is None else off
        elif isinstance(out, torch.Tensor):
            res = base
        else:
            return None
    except (IndexError, TypeError, ValueError):
        return None
    if not _same_hints(res, concrete):
        return None
    return res


def _split_offsets(name, sargs, d, xs, xt, base, count):
    if name == "unbind.int":
        return tuple(base + k * xt[d] for k in range(count))
    if name == "split.Tensor":
        return tuple(base + k * sargs[1] * xt[d] for k in range(count))
    out, acc = [], base
    for size in sargs[1]:
        out.append(acc)
        acc = acc + size * xt[d]
    return tuple(out)


def _same_hints(a, b):
    if isinstance(b, (tuple, list)):
        return isinstance(a, (tuple, list)) and len(a) == len(b) and all(map(_same_hints, a, b))
    return hint_of(a) == b


_DATA_DEPENDENT = {
    aten._local_scalar_dense.default,
    aten.nonzero.default,
    aten.masked_select.default,
    aten.unique_consecutive.default,
    aten._unique2.default,
    aten.equal.default,
    aten.is_nonzero.default,
}


def _mutated_arg_values(func, args, kwargs):
    """For an op whose returns alias written arguments (add_, out=), those arguments in order."""
    schema = getattr(func, "_schema", None)
    if schema is None or not schema.returns:
        return None
    written = {}
    for i, a in enumerate(schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            if a.kwarg_only or i >= len(args):
                written[a.name] = kwargs.get(a.name, a.default_value if i >= len(args) else None)
            else:
                written[a.name] = args[i]
    if not written:
        return None
    result = []
    for r in schema.returns:
        if r.alias_info is None or not r.alias_info.is_write:
            return None
        match = [
            a.name
            for a in schema.arguments
            if a.alias_info is not None and a.alias_info.before_set == r.alias_info.before_set
        ]
        if not match or match[0] not in written:
            return None
        result.append(written[match[0]])
    return result


def is_view_op(func):
    """Whether an op returns a view of its first argument (alias annotation, no write)."""
    schema = getattr(func, "_schema", None)
    if schema is None or not schema.returns or not schema.arguments:
        return False
    a0 = schema.arguments[0].alias_info
    r0 = schema.returns[0].alias_info
    return a0 is not None and not a0.is_write and r0 is not None and not r0.is_write


# Note [Tracer: metadata mutation]
# x.squeeze_(0) changes x's size in place. The meta tensor inside changes with the op; the wrapper
# is re-strided to match (as_strided_ below the dispatcher, so nothing is recorded) and from then on
# x names the squeeze_ node, whose val is x; the node that made x keeps a snapshot of the old
# metadata as its val.
METADATA_MUTATIONS = {  # in-place ops that change size/strides (by name)
    "t_",
    "transpose_",
    "squeeze_",
    "unsqueeze_",
    "resize_",
    "resize_as_",
    "set_",
    "as_strided_",
    "swapaxes_",
    "swapdims_",
    "_resize_output_",
    "detach_",
}


def _is_metadata_mutation(func):
    schema = getattr(func, "_schema", None)
    return schema is not None and schema.name.split("::")[-1] in METADATA_MUTATIONS


def _resync(t):
    if is_symbolic(t):
        return  # done by _resync_symbolic
    m = t._meta
    if (t.shape, t.stride(), t.storage_offset()) == (m.shape, m.stride(), m.storage_offset()):
        return
    with torch._C._DisableTorchDispatch(), torch._C._AutoDispatchBelowADInplaceOrView():
        t.as_strided_(m.size(), m.stride(), m.storage_offset())


def _resync_symbolic(func, args, kwargs, out):
    """Re-stride a symbolic tensor after a metadata mutation (its functional op's layout)."""
    t = args[0]
    name, _, overload = func.__name__.partition(".")
    functional = getattr(getattr(aten, name.rstrip("_"), None), overload or "default", None)
    meta_out = t._meta
    if functional is None:
        layouts._specialise((sym_sizes(t), sym_strides(t), sym_offset(t)))
        sizes, strides, offset = meta_out.shape, meta_out.stride(), meta_out.storage_offset()
    else:
        sizes, strides, offset = symbolic_layout(functional, args, kwargs, meta_out)
    with torch._C._DisableTorchDispatch(), torch._C._AutoDispatchBelowADInplaceOrView():
        t.as_strided_(
            [to_torch(x) for x in sizes], [to_torch(x) for x in strides], to_torch(offset)
        )


# Note [Tracer: boolean mask assignment]
# `x[mask] = v` dispatches index_put_ with a bool index, whose kernel (and meta kernel) computes
# mask.nonzero(): a data-dependent size. With a mask of x's full shape and a single value it is
# masked_fill, which has static shapes; other boolean index_puts stay data-dependent (Unsupported).
def _is_mask_put(args, kwargs):
    if len(args) < 3 or kwargs.get("accumulate", args[3] if len(args) > 3 else False):
        return False
    x, indices, v = args[0], args[1], args[2]
    if len(indices) != 1 or not isinstance(indices[0], torch.Tensor):
        return False
    m = indices[0]
    return (
        m.dtype == torch.bool
        and tuple(m.shape) == tuple(x.shape)
        and isinstance(v, torch.Tensor)
        and v.numel() == 1
        and v.dim() <= 1
    )


_MASK_REWRITES = {
    aten.index_put_.default: lambda x, m, v: x.masked_fill_(m, v.reshape(())),
    aten.index_put.default: lambda x, m, v: x.masked_fill(m, v.reshape(())),
}


def _node_name(func):
    return getattr(func, "__name__", "op").split(".")[0] or "op"


# Note [Tracer: size nodes]
# In a symbolic graph a size is a value computed by the graph: symbol s_k is
# `aten.sym_size.int(x, d)` of the first graph input x whose size d IS s_k (or an int placeholder
# whose val is s_k), and a compound size is built from `operator.add/sub/mul/floordiv/mod` nodes
# (torch.sym_max/sym_min for Max/Min). Each expression gets one node per graph (memoised), emitted
# where first needed; its `meta["val"]` is the torch.SymInt. Op arguments refer to these nodes, so
# a graph never bakes a hint: run on real tensors it computes the sizes from its inputs.


class SizeNodes:
    """The FX nodes computing size expressions in one graph (see the note above)."""

    def __init__(self, graph):
        self.graph = graph
        self.memo = {}  # simplified sympy expr -> node

    def arg(self, v):
        """A graph argument for a SymInt/SymNode/int (ints and constant sizes stay values)."""
        node = from_torch(v) if isinstance(v, _SYM_TYPES) else v
        if not isinstance(node, SymNode):
            return node
        if node.kind == "float":
            return self.float_node(node)
        if node.kind != "int":
            return node.guard_bool("", 0)  # a bool size fact: specialised (never a graph value)
        expr = node.env.simplify(node.expr)
        if expr.is_Integer:
            return int(expr)
        return self.node(expr, node.env)

    def float_node(self, node):
        """A float computed from sizes (`n / (n - 1)`): a node `operator.truediv(num, den)`.

        Note [Tracer: float sizes]: decompositions compute Python floats from sizes (batch norm's
        `1.0 / n` and unbiased factor `n / (n - 1)`). The float's exact value is a rational
        function of the sizes; the graph computes it as one true division of two int size nodes,
        so it is the correctly rounded value of that rational, as Python's own division of exact
        ints gives (a float coefficient that is not a small dyadic keeps the old specialisation).
        """
        env = node.env
        expr = exact_floats(env.simplify(node.expr))
        if not expr.free_symbols:
            return float(expr)
        key = ("float", expr)
        found = self.memo.get(key)
        if found is not None and found.graph is self.graph:
            return found
        num, den = sympy.fraction(sympy.together(expr))
        if not (num.is_integer and den.is_integer):
            return node.guard_float("", 0)  # not exactly computable from sizes: specialise
        out = self.graph.call_function(
            operator.truediv, (self._value(num, env), self._value(den, env))
        )
        out.meta["val"] = torch.SymFloat(SymNode(expr, env, "float"))
        self.memo[key] = out
        return out

    def node(self, expr, env):
        found = self.memo.get(expr)
        if found is not None and found.graph is self.graph:
            return found
        if expr.is_Symbol:
            node = self._symbol(expr, env)
        else:
            node = self._compound(expr, env)
        node.meta["val"] = torch.SymInt(SymNode(expr, env))
        self.memo[expr] = node
        return node

    def _value(self, e, env):
        e = sympy.sympify(e)
        return int(e) if e.is_Integer else self.node(e, env)

    def _symbol(self, sym, env):
        """sym_size of the first input with that size; else solved from a size `a*sym + b`."""
        solvable = None
        for ph, size, d in self._input_sizes(env):
            if size == sym:
                return ph if d is None else self.graph.call_function(aten.sym_size.int, (ph, d))
            if solvable is None and sym in size.free_symbols:
                a, b = sympy.expand(size).as_independent(sym, as_Add=True)[::-1]
                a = sympy.expand(a / sym)
                if a.is_Integer and a != 0 and b.is_Integer:
                    solvable = (ph, d, int(a), int(b))
        if solvable is not None:  # s = (size - b) // a
            ph, d, a, b = solvable
            node = ph if d is None else self.graph.call_function(aten.sym_size.int, (ph, d))
            if b:
                node = self.graph.call_function(operator.sub, (node, b))
            if a != 1:
                node = self.graph.call_function(operator.floordiv, (node, a))
            return node
        raise Unsupported(f"the size {sym} is not a size of any graph input")

    def _input_sizes(self, env):
        """(placeholder, simplified size expr, dim or None for an int input) in graph order."""
        for ph in self.graph.nodes:
            if ph.op != "placeholder":
                continue
            val = ph.meta.get("val")
            if isinstance(val, torch.SymInt):
                node = from_torch(val)
                if isinstance(node, SymNode):
                    yield ph, env.simplify(node.expr), None
            elif isinstance(val, torch.Tensor) and is_symbolic(val):
                for d, size in enumerate(sym_sizes(val)):
                    if isinstance(size, SymNode):
                        yield ph, env.simplify(size.expr), d

    def _compound(self, e, env):
        call = self.graph.call_function
        if isinstance(e, sympy.Add):
            pos = [a for a in e.args if not a.could_extract_minus_sign()]
            neg = [-a for a in e.args if a.could_extract_minus_sign()]
            pos.sort(key=lambda a: a.is_Number)  # symbols first: `s0 - 1`, not `-1 + s0`
            acc = self._value(pos[0], env) if pos else 0
            for a in pos[1:]:
                acc = call(operator.add, (acc, self._value(a, env)))
            for a in neg:
                acc = call(operator.sub, (acc, self._value(a, env)))
            return acc
        if isinstance(e, sympy.Mul):
            num, den = sympy.fraction(e)
            if den != 1:  # exact division (a recorded divisibility made it so)
                return call(operator.floordiv, (self._value(num, env), self._value(den, env)))
            factors = sorted(e.args, key=lambda a: not a.is_Number)
            acc = self._value(factors[0], env)
            for a in factors[1:]:
                acc = call(operator.mul, (acc, self._value(a, env)))
            return acc
        if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp > 1:
            base = self._value(e.base, env)
            acc = base
            for _ in range(int(e.exp) - 1):
                acc = call(operator.mul, (acc, base))
            return acc
        if isinstance(e, sympy.floor):
            num, den = sympy.fraction(sympy.together(e.args[0]))
            return call(operator.floordiv, (self._value(num, env), self._value(den, env)))
        if isinstance(e, sympy.Mod):
            return call(operator.mod, (self._value(e.args[0], env), self._value(e.args[1], env)))
        if isinstance(e, sympy.Max | sympy.Min):
            fn = torch.sym_max if isinstance(e, sympy.Max) else torch.sym_min
            acc = self._value(e.args[0], env)
            for a in e.args[1:]:
                acc = call(fn, (acc, self._value(a, env)))
            return acc
        raise Unsupported(f"a size expression kiln cannot compute in a graph: {e}")


def same_layout(a, b):
    """Whether two tensors have the same sizes, strides and offset (structurally: no guards)."""

    def key(t):
        vals = (*sym_sizes(t), "/", *sym_strides(t), "/", sym_offset(t))
        return tuple(v.env.simplify(v.expr) if isinstance(v, SymNode) else v for v in vals)

    return key(a) == key(b)


def same_sizes(a, b):
    """Whether two tensors have the same sizes (structurally: no guards)."""

    def key(t):
        return tuple(v.env.simplify(v.expr) if isinstance(v, SymNode) else v for v in sym_sizes(t))

    return key(a) == key(b)


class FakeMode(TorchDispatchMode):
    """Outside a trace: every ATen call (factories with SymInt sizes too) runs in fake mode."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return _FakeDispatch().dispatch(func, args, kwargs or {})


class TraceMode(TorchDispatchMode):
    """Records every ATen call on proxy tensors (and factory calls) into the tracer's graph."""

    def __init__(self, tracer):
        super().__init__()
        self.tracer = tracer

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return self.tracer.dispatch(func, args, kwargs or {})


class Tracer(_FakeDispatch):
    """Builds an FX graph of torch.ops.aten overloads from calls on its ProxyTensors."""

    recording = True

    def __init__(self, decompositions=None):
        self.graph = torch.fx.Graph()
        self.root = torch.nn.Module()
        self.decompositions = dict(decompositions or {})
        self.mode = TraceMode(self)
        self._constants = {}  # id(real tensor) -> get_attr node
        self._decomposing = set()
        self._last_constant = None
        self.grad_constants = []  # real tensors requiring grad met as constants
        self.sizes = SizeNodes(self.graph)

    # --- inputs and outputs ---
    def placeholder(self, name, example, requires_grad=False):
        """A graph input and the value the traced code sees for it (a ProxyTensor or a scalar)."""
        last = self._last_placeholder()
        if last is None:
            with self.graph.inserting_before(None):
                node = self.graph.placeholder(name)
        else:
            with self.graph.inserting_after(last):
                node = self.graph.placeholder(name)
        if isinstance(example, torch.Tensor):
            proxy = fake_like(example, node, requires_grad=requires_grad)
            node.meta["val"] = proxy
            return proxy
        node.meta["val"] = example
        return example

    def to_arg(self, x):
        """The graph argument for a traced value (node for tensors, constants as they are)."""
        if isinstance(x, ProxyTensor):
            if x._node is None:
                raise Unsupported("a fake tensor from outside this trace reached the graph")
            return x._node
        if isinstance(x, torch.Tensor):
            return self.constant(x)
        if isinstance(x, _SYM_TYPES):
            return self.sizes.arg(x)
        return x

    def output(self, value):
        """Set the graph output from fn's return value (flattened with pytree)."""
        leaves, spec = pytree.tree_flatten(value)
        self.graph.output(tuple(self.to_arg(x) for x in leaves))
        return spec

    def constant(self, t):
        """A real tensor met while tracing (closure, module attribute) becomes a get_attr node."""
        key = id(t)
        if key in self._constants:
            return self._constants[key][0]
        if t.requires_grad:
            self.grad_constants.append(t)
        name = f"_tensor_constant{len(self._constants)}"
        setattr(self.root, name, t.detach() if t.requires_grad else t)
        anchor = self._last_constant or self._last_placeholder()
        if anchor is None:
            with self.graph.inserting_before(None):
                node = self.graph.get_attr(name)
        else:
            with self.graph.inserting_after(anchor):
                node = self.graph.get_attr(name)
        self._last_constant = node
        node.meta["val"] = fake_like(t, node)
        self._constants[key] = (node, t)
        return node

    def _last_placeholder(self):
        last = None
        for n in self.graph.nodes:
            if n.op != "placeholder":
                break
            last = n
        return last

    def graph_module(self):
        gm = torch.fx.GraphModule(self.root, self.graph)
        return gm

    # --- the dispatch ---
    def dispatch(self, func, args, kwargs):
        if func in self.decompositions and func not in self._decomposing:
            self._decomposing.add(func)
            try:
                with self.mode:
                    return self.decompositions[func](*args, **kwargs)
            finally:
                self._decomposing.discard(func)
        if func is aten.lift_fresh.default:  # torch.tensor(data): a fresh tensor per call
            return self.dispatch(aten.clone.default, (self.constant_proxy(args[0]),), {})
        if func in _MASK_REWRITES and _is_mask_put(args, kwargs):
            with self.mode:  # x[mask] = v: no data-dependent shape needed
                return _MASK_REWRITES[func](args[0], args[1][0], args[2])
        if func in _METADATA_QUERIES and _has_symbolic(args, kwargs):
            return _METADATA_QUERIES[func](*args, **kwargs)  # sizes: values, not graph nodes
        target = args[0] if args and _is_metadata_mutation(func) else None
        if isinstance(target, ProxyTensor) and target._node is not None:
            target._node.meta["val"] = fake_like(target, target._node)  # snapshot, see the note
        out = super().dispatch(func, args, kwargs)
        nargs, nkwargs = pytree.tree_map_only(
            (torch.Tensor, *_SYM_TYPES), self.to_arg, (tuple(args), dict(kwargs))
        )
        node = self.graph.create_node("call_function", func, nargs, nkwargs, name=_node_name(func))
        self.bind(node, func, args, out)
        if isinstance(target, ProxyTensor):
            _resync(target)
            target._node = node
            node.meta["val"] = target
        return out

    def constant_proxy(self, t):
        node = self.constant(t)
        return node.meta["val"] if t.device.type != "meta" else t

    def bind(self, node, func, args, out):
        """Attach the outputs to the node (getitem nodes for tuple outputs) and record views."""
        view_parent = (
            args[0]._node if is_view_op(func) and isinstance(args[0], ProxyTensor) else None
        )
        if isinstance(out, ProxyTensor):
            if out._node is None:
                out._node = node
            node.meta["val"] = out
            if view_parent is not None:
                node.meta["view_of"] = view_parent
        elif isinstance(out, (tuple, list)):
            node.meta["val"] = type(out)(out)
            for i, o in enumerate(out):
                if isinstance(o, ProxyTensor) and o._node is None:
                    g = self.graph.call_function(operator.getitem, (node, i))
                    g.meta["val"] = o
                    o._node = g
                    if view_parent is not None:
                        g.meta["view_of"] = view_parent
        else:
            node.meta["val"] = out

    @contextlib.contextmanager
    def tracing(self):
        """Activate the trace mode (every ATen call inside is recorded); see Note [Tracer: is_compiling]."""
        prev = getattr(torch.compiler, "_is_compiling_flag", None)
        if prev is not None:
            torch.compiler._is_compiling_flag = True
        set_hooks_tracing = getattr(torch._C._autograd, "_saved_tensors_hooks_set_tracing", None)
        prev_hooks = set_hooks_tracing(True) if set_hooks_tracing else None
        try:
            with self.mode:
                yield
        finally:
            if prev is not None:
                torch.compiler._is_compiling_flag = prev
            if set_hooks_tracing:
                set_hooks_tracing(prev_hooks)


# Note [Tracer: is_compiling]
# Libraries ask `torch.compiler.is_compiling()` to skip code that reads tensor values (Hugging Face's
# mask construction checks for padding with `.all()`). Our trace has no values to read, so while it
# runs we answer True, as torch.compile's own tracing does; the flag is restored afterwards. The
# user's saved-tensor hooks (checkpointing, offloading) are likewise not applied to the proxies
# autograd saves while we trace: they apply at run time to what CompiledFunction saves.


def trace_aten(fn, example_inputs, *, decompositions=None, input_names=None):
    """Trace fn(*example_inputs) into an FX graph of ATen ops (inference: no autograd)."""
    tracer = Tracer(decompositions)
    names = input_names or [f"arg{i}_1" for i in range(len(example_inputs))]
    proxies = [tracer.placeholder(n, x) for n, x in zip(names, example_inputs)]
    with torch.no_grad(), tracer.tracing():
        out = fn(*proxies)
    spec = tracer.output(out)
    gm = tracer.graph_module()
    gm.meta["out_spec"] = spec
    return gm
