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

import torch
import torch.fx
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from kiln.exc import Unsupported

aten = torch.ops.aten

__all__ = ["ProxyTensor", "Tracer", "trace_aten", "fake_like", "is_fake", "format_graph"]


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
    def __new__(cls, meta, device, node=None, requires_grad=False):
        r = torch.Tensor._make_wrapper_subclass(
            cls,
            meta.size(),
            strides=meta.stride(),
            storage_offset=meta.storage_offset(),
            dtype=meta.dtype,
            layout=meta.layout,
            device=device,
            requires_grad=requires_grad,
        )
        r._meta = meta
        r._node = node
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


def fake_like(t, node=None, requires_grad=False):
    """A ProxyTensor with t's size, stride, dtype and device (never reads t's data)."""
    meta = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device="meta")
    return ProxyTensor(meta, t.device, node, requires_grad)


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
    """Names of the Device arguments of an op's schema (factory ops, _to_copy)."""
    try:
        return [a.name for a in func._schema.arguments if "Device" in str(a.type)]
    except AttributeError:
        return []


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
        tensors = [x for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
        out_device = None
        dev_names = _device_args(func)
        margs, mkwargs = args, dict(kwargs)
        if dev_names:
            for name in dev_names:
                if name in mkwargs and mkwargs[name] is not None:
                    out_device = torch.device(mkwargs[name])
                    mkwargs[name] = torch.device("meta")
            if "pin_memory" in mkwargs:
                mkwargs["pin_memory"] = False
        if out_device is None:  # no device argument: the inputs' (empty_like), else the default
            out_device = _common_device(tensors) if tensors else _default_device()
        margs, mkwargs = pytree.tree_map_only(torch.Tensor, self.meta_of, (margs, mkwargs))
        try:
            out = func(*margs, **mkwargs)
        except NotImplementedError as e:
            raise Unsupported(f"operator {func} has no meta kernel: {e}") from e
        return self.wrap_outputs(func, args, kwargs, out, out_device)

    def wrap_outputs(self, func, args, kwargs, out, device):
        # In-place and out= ops return (aliases of) their mutated arguments: hand back the same
        # wrapper objects, as eager returns the same Python tensors.
        mutated = _mutated_arg_values(func, args, kwargs)
        if mutated is not None:
            if isinstance(out, torch.Tensor):
                return mutated[0]
            if isinstance(out, (tuple, list)) and len(out) == len(mutated):
                return type(out)(mutated)
        return pytree.tree_map_only(torch.Tensor, lambda m: ProxyTensor(m, device), out)


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
    m = t._meta
    if (t.shape, t.stride(), t.storage_offset()) == (m.shape, m.stride(), m.storage_offset()):
        return
    with torch._C._DisableTorchDispatch(), torch._C._AutoDispatchBelowADInplaceOrView():
        t.as_strided_(m.size(), m.stride(), m.storage_offset())


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
        target = args[0] if args and _is_metadata_mutation(func) else None
        if isinstance(target, ProxyTensor) and target._node is not None:
            target._node.meta["val"] = fake_like(target, target._node)  # snapshot, see the note
        out = super().dispatch(func, args, kwargs)
        nargs, nkwargs = pytree.tree_map_only(
            torch.Tensor, self.to_arg, (tuple(args), dict(kwargs))
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
