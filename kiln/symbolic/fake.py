"""Our fake tensors: `ProxyTensor`, a data-less tensor (real device and metadata, a meta tensor
inside), possibly with symbolic sizes, and the dispatch that runs ATen ops on them (no compute).

The ATen tracer that records these ops into an FX graph is `kiln.autograd.aten_tracer`.
"""

import torch
import torch.fx
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass_type

from kiln.exc import DataDependentOp, Unsupported
from kiln.symbolic import layouts, shape_rules
from kiln.symbolic.shape_env import SymNode, from_torch, hint_of, to_torch

aten = torch.ops.aten

__all__ = [
    "ProxyTensor",
    "FakeMode",
    "fake_like",
    "is_fake",
    "is_symbolic",
    "sym_sizes",
    "sym_strides",
    "sym_offset",
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
        if meta.is_conj():  # the lazy conjugate/negation bits, as eager's tensor would carry
            torch._C._set_conj(r, True)
        if meta.is_neg():
            torch._C._set_neg(r, True)
        r._meta = meta
        r._node = node
        r._symbolic = symbolic
        return r

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        # See Note [Tracer: composite ops on symbolic sizes]
        kwargs = kwargs or {}
        with torch._C.DisableTorchFunctionSubclass():
            if func in _MATMUL_CALLS and (
                _symbolic_call(args) or (kwargs and _symbolic_call(kwargs.values()))
            ):
                if not torch._C._dispatch_tls_is_dispatch_key_included(_PYTHON_DISPATCHER):
                    with torch._C._EnablePythonDispatcher():
                        return func(*args, **kwargs)
            return func(*args, **kwargs)

    def __repr__(self, *, tensor_contents=None):
        name = f"{self._node.name}: " if self._node is not None else ""
        return f"ProxyTensor({name}{describe(self)}, device={self.device})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        # Only reached outside a trace (a TraceMode handles everything inside one): fake mode.
        if foreign_subclass(types):
            return NotImplemented
        return _FakeDispatch().dispatch(func, args, kwargs or {})


# Note [Tracer: wrapper subclasses over fakes]
# A traceable wrapper subclass (TwoTensor) built on our fakes runs its own __torch_dispatch__,
# which calls the op again on its inner tensors. Our dispatch (ProxyTensor's, FakeMode's,
# TraceMode's) does not know its type: it answers NotImplemented, so the dispatcher goes on to the
# subclass's __torch_dispatch__, whose calls on the inner fakes come back to us (as torch's fake and
# proxy modes do).
def foreign_subclass(types):
    """Whether `types` (of a __torch_dispatch__ call) holds a wrapper subclass that is not ours."""
    return any(
        not issubclass(t, ProxyTensor) and is_traceable_wrapper_subclass_type(t) for t in types
    )


# Note [Tracer: composite ops on symbolic sizes]
# A CompositeImplicitAutograd op decomposes in C++ before any __torch_dispatch__ sees it, and
# torch 2.11's matmul body reads concrete sizes: `sizes()` and `numel()` of its inputs, which on
# our symbolic tensors pins every symbol to its hint (or raises "Cannot call numel() on tensor
# with symbolic sizes"); torch 2.13's reads SymInts. torch ships a SymInt-aware Python body for
# matmul (`py_kernels[CompositeImplicitAutograd]`, from torch._decomp), which the dispatcher uses
# only while the Python dispatcher is on. So the torch calls that reach matmul (the table below:
# matmul itself, linear, attention, tensordot/inner) run with the Python dispatcher on
# when a symbolic ProxyTensor is among their arguments, on every torch version alike. Only these:
# with the dispatcher on, every op that has a Python body takes it, and some of those bodies
# (upsampling's) ask torch's own ShapeEnv questions our SymNodes do not answer. Calls on static
# fakes run as before. Shown by tests/autograd/test_symbolic_fake.py.

_MATMUL_CALLS = frozenset(
    f
    for f in (
        torch.matmul,
        torch.Tensor.matmul,
        torch.Tensor.__matmul__,
        torch.Tensor.__rmatmul__,
        getattr(torch.linalg, "matmul", None),
        torch.nn.functional.linear,
        torch.nn.functional.scaled_dot_product_attention,
        torch.tensordot,
        torch.inner,
        torch.Tensor.inner,
    )
    if f is not None
)
_PYTHON_DISPATCHER = torch._C.DispatchKey.PythonDispatcher


def _symbolic_call(args):
    """Whether a torch call's arguments (one list/tuple level deep) hold a symbolic tensor."""
    for x in args:
        if isinstance(x, list | tuple):
            if any(getattr(y, "_symbolic", False) for y in x):
                return True
        elif getattr(x, "_symbolic", False):
            return True
    return False


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
    if any(t.device.type == "meta" for t in tensors) and any(is_fake(t) for t in tensors):
        # a frontend meta example next to a fake (the inner fakes of a wrapper-subclass input):
        # the fakes carry the real devices
        tensors = [t for t in tensors if t.device.type != "meta"]
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
            raise DataDependentOp(
                f"data-dependent operator {func} (e.g. .item()) on a traced tensor"
            )
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
    return hint_of(node) if isinstance(node, SymNode) else node  # (unbacked: a stand-in)


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
            at = 1 if name == "unbind.int" else 2  # (unbind(x, dim); split(x, sizes, dim))
            d = shape_rules._norm_dim(
                sargs[at] if len(sargs) > at else skwargs.get("dim", 0), len(xs)
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

    @classmethod
    def is_infra_mode(cls):
        """kiln's own (Note [Frames: under a user's dispatch mode])."""
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if foreign_subclass(types):  # Note [Tracer: wrapper subclasses over fakes]
            return NotImplemented
        return _FakeDispatch().dispatch(func, args, kwargs or {})
