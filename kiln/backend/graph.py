"""GraphLowering: interpret an ATen FX graph, lowering each node to loop IR or an extern call."""

import operator

import sympy
import torch

from kiln import config, logs
from kiln.backend import (  # noqa: F401 (they register lowerings)
    devices,
    lowering_matmul,
    lowering_random,
    lowering_reductions,
    lowering_views,
)
from kiln.backend import lowering as L
from kiln.backend.index_exprs import ranges
from kiln.backend.ir import (
    Buffer,
    ComputedBuffer,
    ExternBuffer,
    ExternKernel,
    InputBuffer,
    Layout,
    Pointwise,
    PrintHandler,
    Reduction,
    StorageBox,
    View,
    contiguous_strides,
    dense_stride_of,
    device_scope,
    floordiv,
    is_dense,
    is_sym,
    known_eq,
    norm,
    size_exprs,
    stride_exprs,
    to_expr,
    use_shape_env,
)
from kiln.contracts import GraphMeta


class GraphNotSupported(Exception):
    """The whole graph must run eagerly (the reason is the message)."""


class ScalarArg:
    """A Python number graph input: compiled for its example value, checked on every call."""

    def __init__(self, name, value):
        self.name = name
        self.value = value


class SymArg:
    """A size graph input (an int at run time) whose value is the expression `expr` (symbolic graphs)."""

    def __init__(self, name, expr):
        self.name = name
        self.expr = expr


class PyValue:
    """A non-tensor result of an extern call, known only at run time."""

    def __init__(self, name):
        self.name = name


# Note [Backend: when a pointwise value is realized]
# An unrealized Pointwise is inlined into every consumer (recomputed), which is what fuses chains
# and softmax-like patterns without writing intermediates. A value is realized (written to a buffer)
# when it is a graph output, an extern input, or read by several consumers while being expensive to
# recompute (more than REALIZE_OPS ops or REALIZE_READS loads), or when its expression grows past
# INLINE_LIMIT ops (which bounds code size), or when it computes a transcendental function (exp,
# tanh, ...) for several consumers: softmax's exp(x - max) is then computed once. A view op
# (permute, reshape, slice: lowering_views.VIEW_OPS) is not a consumer: the ops that read the view
# are, so `clone(x.permute(...))` computes x once, straight into the clone's layout, instead of
# realizing x and copying it. Loaders are late-bound, so consumers lowered before the realization
# read the buffer too.
REALIZE_OPS = 16
REALIZE_READS = 4
INLINE_LIMIT = 120
TRANSCENDENTAL = ("exp", "log", "tanh", "erf", "sin", "cos", "sigmoid", "pow", "expm1")
TRANSCENDENTAL += ("rand", "randn")  # Philox: ten rounds an element


class GraphLowering:
    """Holds the lowered program: inputs, operations (kernels and externs) in order, outputs."""

    def __init__(self, gm, example_inputs):
        self.gm = gm
        self.example_inputs = example_inputs
        self.inputs = []  # InputBuffer per placeholder
        self.constants = {}  # name -> tensor (get_attr), passed to the wrapper at load time
        self.operations = []  # ComputedBuffer | ExternKernel, in program order
        self.buffers = {}  # name -> Buffer
        self.outputs = []  # per graph output: ("buf", name) | ("view", name, size, stride, off)
        self.env = {}
        self._n = 0
        self.fallback_ops = []  # ops run as ATen calls (for reports/tests)
        self.channels_last = False  # conv activations laid out NHWC (see the Note)
        self.cl_ids = set()  # ids of values laid out (or to be realized) channels-last
        # [seed buffer, next index]: Note [Random: numbers from a seed per graph]
        self.random_seeds = None

    def _name(self, prefix="buf"):
        self._n += 1
        return f"{prefix}{self._n - 1}"

    # --- values ----------------------------------------------------------------------------------

    def new_box(self, loops, val):
        b = StorageBox(loops, self, val)
        if isinstance(loops, Pointwise) and _cost(loops)[0] > INLINE_LIMIT:
            b.realize()
        return b

    def realize_loops(self, loops, stride=None):
        size = loops.get_size()
        if isinstance(loops, Reduction) or stride is None:
            stride = contiguous_strides(size)
        buf = ComputedBuffer(self._name(), Layout(size, stride, loops.get_dtype()), loops)
        self.operations.append(buf)
        self.buffers[buf.name] = buf
        return buf

    def note_use(self, value):
        """A consumer reads value: realize a shared expensive Pointwise (see the Note)."""
        while isinstance(value, View):
            value = value.base
        if isinstance(value, StorageBox) and not value.is_realized():
            value.users += 1
            if value.users >= 2:
                ops_count, reads, transcendental = _cost(value.data)
                if ops_count > REALIZE_OPS or reads > REALIZE_READS or transcendental:
                    value.realize()

    def as_tensor_arg(self, value, val=None):
        """(Buffer, Layout) of a value realized in memory (a strided view where possible)."""
        rl = value.realized_layout()
        if rl is not None:
            return rl
        base = value
        if isinstance(base, StorageBox):
            base.realize()
            return base.realized_layout()
        rl = _realize_under_view(value)
        if rl is not None:
            return rl
        stride = dense_stride_of(val, value.get_size())
        box = StorageBox(Pointwise(value.get_dtype(), value.get_size(), value.make_loader()), self)
        box.realize(stride)
        return box.realized_layout()

    # --- the interpreter -------------------------------------------------------------------------

    def run(self):
        ranges().clear()
        use_shape_env(GraphMeta.of(self.gm).shape_env)
        self.channels_last = _wants_channels_last(self.gm)
        self.device = graph_device(self.example_inputs, self.gm)
        with device_scope(self.device):
            return self._run()

    def _run(self):
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                self.env[node] = self.placeholder(node, len(self.inputs))
            elif node.op == "get_attr":
                self.env[node] = self.get_attr(node)
            elif node.op == "call_function":
                self.env[node] = self.call_function(node)
            elif node.op == "output":
                self.output(node)
            else:
                raise GraphNotSupported(f"node kind {node.op}")
        return self

    def placeholder(self, node, k):
        if k >= len(self.example_inputs):
            raise GraphNotSupported("more placeholders than example inputs")
        x = self.example_inputs[k]
        sym = _size_value(node.meta.get("val"), x)
        if sym is not None:  # a size input: bound to its symbol, never specialised
            self.inputs.append(SymArg(f"arg{k}", sym))
            return sym
        if isinstance(x, torch.SymInt):  # a size the tracer made constant
            x = to_expr(x)
        if isinstance(x, (bool, int, float)):
            # specialized: the wrapper runs the graph eagerly when a call passes another value
            self.inputs.append(ScalarArg(f"arg{k}", x))
            return x
        if not isinstance(x, torch.Tensor):
            raise GraphNotSupported(f"non-tensor graph input {type(x).__name__}")
        _check_tensor(x)
        lay = Layout(size_exprs(x), stride_exprs(x), x.dtype, device=self._device_of(x))
        buf = InputBuffer(f"arg{k}", lay)
        self.inputs.append(buf)
        self.buffers[buf.name] = buf
        if self.channels_last and _is_channels_last(x):  # a saved activation of a forward
            self.cl_ids.add(id(buf))
        return buf

    def get_attr(self, node):
        t = getattr(self.gm, node.target)
        if not isinstance(t, torch.Tensor):
            raise GraphNotSupported(f"get_attr of {type(t).__name__}")
        dev = self._device_of(t)  # Note [Backend: graphs on two devices]
        if type(t) not in (torch.Tensor, torch.nn.Parameter) or (
            dev is None and t.device != self.device
        ):
            raise GraphNotSupported(f"constant {node.target} has no data on {self.device}")
        _check_tensor(t)
        name = f"const{len(self.constants)}"
        self.constants[name] = t
        buf = InputBuffer(name, Layout(t.shape, t.stride(), t.dtype, device=dev))
        self.buffers[name] = buf
        return buf

    def call_function(self, node):
        target = node.target
        args, kwargs = _map_args(node.args, self.env), _map_args(node.kwargs, self.env)
        if target is operator.getitem and not _is_size(node.meta.get("val")):
            return args[0][args[1]]
        val = node.meta.get("val")
        if target in SIZE_ARITH and all(_is_size_value(a) for a in args) and not kwargs:
            # size arithmetic on sizes: computed from its arguments (exact, whatever val says)
            return SIZE_ARITH[target](*args)
        if (target in SIZE_OPS and "val" in node.meta) or (
            _is_size(val) and not isinstance(target, torch._ops.OpOverload)
        ):
            # a size computation (sym_size, ...): its value is its val's expression
            return to_expr(val)
        if isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable:
            raise GraphNotSupported(f"mutating op {target}")
        val = node.meta.get("val")
        _check_val(val)
        has_py = any(isinstance(a, PyValue) for a in _flat(args) + _flat(kwargs))
        fn = L.LOWERINGS.get(target)
        loops = target in L.EXTERN_OUT and lowering_matmul.chosen(node.name)
        if loops:
            fn = lowering_matmul.LOOP_LOWERINGS[target]  # Note [Matmuls as loops]
        outer = lowering_matmul.outer_product(node) if target in L.EXTERN_OUT else None
        if outer is not None:  # Note [Matmuls: outer products]
            fn, loops = outer, True
        if self.device.type != "cpu":  # Note [Backend: graphs on two devices]
            off = devices.off_device(self, _flat(args) + _flat(kwargs), val)
            if off is not None:
                logs.log("perf_hints", "kiln: %s runs as an ATen call (%s)", target, off)
                return self.fallback(node, target, args, kwargs, val)
        if fn is not None and not has_py and (target not in L.EXTERN_OUT or loops):
            if target not in lowering_views.VIEW_OPS:  # a view's consumers are the uses
                for a in _flat(args) + _flat(kwargs):
                    if L.is_ir(a):
                        self.note_use(a)
            try:
                with L.lowering_node(self, val, target):
                    out = fn(*args, **kwargs)
                if _matches(out, val):
                    if self.channels_last:
                        self._follow_channels_last(out, args)
                    return out
                why = "result does not match the meta value"
            except L.NotLowered as e:
                why = str(e)
            except Exception as e:  # a lowering bug must not fail the graph: run the op in ATen
                why = f"lowering error {type(e).__name__}: {e}"
            # Buffers a failed lowering realized stay: other values may point at them now, and
            # the scheduler drops the ones nothing reads.
            logs.log("perf_hints", "kiln: %s runs as an ATen call (%s)", target, why)
        elif fn is None and target not in L.EXTERN_OUT and target not in L.EXTERN_ALWAYS:
            logs.log("perf_hints", "kiln: %s has no lowering: ATen call", target)
        return self.fallback(node, target, args, kwargs, val)

    def fallback(self, node, target, args, kwargs, val):
        """Run the op as an ATen call at run time (the extern fallback)."""

        def conv(a, v=None):
            if L.is_ir(a):
                return self.as_tensor_arg(a, v)
            return a

        cl_conv = self.channels_last and target in _CONV_TENSOR_ARGS
        if cl_conv:
            n = _CONV_TENSOR_ARGS[target]
            weight = n - 1  # the last tensor argument: the weight
            cl_args = [
                self._to_channels_last(a, weight=i == weight) for i, a in enumerate(args[:n])
            ]
            args = (*cl_args, *args[n:])
        arg_vals = [a.meta.get("val") if hasattr(a, "meta") else None for a in node.args]
        cargs = []
        for a, v in zip(args, arg_vals):
            if isinstance(a, (list, tuple)):
                cargs.append(type(a)(conv(x) for x in a))
            else:
                cargs.append(conv(a, v))
        ckwargs = {
            k: (type(v)(conv(x) for x in v) if isinstance(v, (list, tuple)) else conv(v))
            for k, v in kwargs.items()
        }
        name = self._name("extern")
        kernel = ExternKernel(name, target, cargs, ckwargs, [])
        if target not in L.EXTERN_OUT and target not in L.EXTERN_ALWAYS:
            self.fallback_ops.append(target)

        def out_buf(v):
            if isinstance(v, torch.Tensor):
                _check_tensor(v)
                cl = cl_conv and v.dim() == 4
                stride = _cl_stride(size_exprs(v)) if cl else stride_exprs(v)
                lay = Layout(size_exprs(v), stride, v.dtype, device=self._device_of(v))
                b = ExternBuffer(self._name(), lay, kernel)
                self.buffers[b.name] = b
                if cl:
                    self.cl_ids.add(id(b))
                return b
            if v is None:
                return None
            return PyValue(self._name("py"))

        if target in L.EXTERN_OUT and isinstance(val, torch.Tensor) and config.extern_out:
            kernel.op = L.EXTERN_OUT[target]
            kernel.out_variant = True
        kernel.multi = isinstance(val, (list, tuple))
        if kernel.multi:
            outs = [out_buf(v) for v in val]
            kernel.outputs = outs
            result = outs
        else:
            o = out_buf(val)
            kernel.outputs = [o]
            result = o
        self.operations.append(kernel)
        return result

    def output(self, node):
        free = GraphMeta.of(self.gm).free_layout_outputs
        for i, v in enumerate(_flat_out(node.args[0])):
            out = self._output_value(v)
            if self.channels_last and out[0] in ("buf", "view") and i not in free:
                out = self._eager_strides(out, v)
            self.outputs.append(out)

    def output_strides(self):
        """Per graph output: its strides when they are static ints, else None."""
        result = []
        for out in self.outputs:
            stride = None
            if out[0] == "buf":
                stride = self.buffers[out[1]].layout.stride
            elif out[0] == "view":
                stride = out[3]
            if stride is not None and all(
                type(x) is int or isinstance(x, sympy.Integer) for x in stride
            ):
                result.append(tuple(int(x) for x in stride))
            else:
                result.append(None)
        return result

    def _device_of(self, t):
        """A tensor's device where it is off the graph's main device (a CPU tensor in a CUDA
        graph), else None: the main device (Note [Backend: graphs on two devices])."""
        return t.device if devices.foreign(t.device, self.device) else None

    # --- channels-last convolutions (see the Note) -----------------------------------------------

    def _to_channels_last(self, value, weight=False):
        """value realized with channels-last strides (a copy kernel unless it is already; a
        weight that is a graph input: converted at run time once per version of it)."""
        size = tuple(value.get_size())
        st = _cl_stride(size)
        rl = value.realized_layout()
        if (
            rl is not None
            and _same_strides(size, rl[1].stride, st)
            and rl[1].size == rl[0].layout.size
        ):
            return value
        if weight and isinstance(value, InputBuffer):
            return self._cached_channels_last(value, st)
        if isinstance(value, StorageBox) and not value.is_realized():
            value.realize(st)
            return value
        box = StorageBox(Pointwise(value.get_dtype(), list(size), value.make_loader()), self)
        box.realize(st)
        return box

    def _cached_channels_last(self, value, stride):
        """`rt.channels_last(weight)`: a channels-last copy the runtime keeps while the weight
        is unchanged (Note [Backend: channels-last convolutions])."""
        kernel = ExternKernel(
            self._name("extern"), "rt.channels_last", [value.realized_layout()], {}, []
        )
        out = ExternBuffer(
            self._name(), Layout(value.layout.size, stride, value.layout.dtype), kernel
        )
        kernel.outputs = [out]
        self.buffers[out.name] = out
        self.operations.append(kernel)
        self.cl_ids.add(id(out))
        return out

    def _follow_channels_last(self, out, args):
        """A 4-d unrealized result of channels-last inputs is realized channels-last too."""
        if not isinstance(out, StorageBox) or out.is_realized() or len(out.get_size()) != 4:
            return
        if not any(id(a) in self.cl_ids for a in _flat(args)):
            return
        size = tuple(out.get_size())
        if not all(type(x) is int or isinstance(x, sympy.Integer) for x in size):
            return
        size = tuple(int(x) for x in size)
        out.val = torch.empty_strided(size, _cl_stride(size), dtype=out.get_dtype(), device="meta")
        self.cl_ids.add(id(out))

    def _eager_strides(self, out, node):
        """A graph output with eager's strides: a copy kernel where its layout differs."""
        val = node.meta.get("val")
        buf = self.buffers[out[1]]
        size, stride = (buf.layout.size, buf.layout.stride) if out[0] == "buf" else out[2:4]
        want = stride_exprs(val) if isinstance(val, torch.Tensor) else None
        if want is None or _same_strides(size, stride, want):
            return out
        if not is_dense(size_exprs(val), want):
            raise GraphNotSupported("channels-last layout for a non-dense graph output")
        value = self.env[node]
        box = StorageBox(Pointwise(value.get_dtype(), list(size), value.make_loader()), self)
        box.realize(tuple(want))
        return ("buf", box.data.name)

    def _output_value(self, node):
        if not isinstance(node, torch.fx.Node):
            return ("const", node)
        value = self.env[node]
        if isinstance(value, PyValue):
            return ("py", value.name)
        if not L.is_ir(value):
            return ("const", value)
        val = node.meta.get("val")
        if isinstance(value, StorageBox) and not value.is_realized():
            value.realize()
        if isinstance(value, StorageBox):
            value = value.data
        if isinstance(value, Buffer):
            return ("buf", value.name)
        buf, layout = self.as_tensor_arg(value, val)
        if layout is buf.layout or (
            layout.size == buf.layout.size
            and layout.stride == buf.layout.stride
            and layout.offset == buf.layout.offset
        ):
            return ("buf", buf.name)
        return ("view", buf.name, layout.size, layout.stride, layout.offset)


# Note [Backend: channels-last convolutions]
# 2D convolutions run faster on this CPU with NHWC ("channels-last") activations and weights, as
# inductor's layout optimization does. In a graph whose convolutions (forward or backward) are all
# static 4-d float32 and not transposed, each convolution's tensor arguments are realized
# channels-last (a copy kernel for graph inputs and contiguous values), its 4-d outputs are
# declared channels-last (ATen's mkldnn kernels answer so; the wrapper's stride check copies if
# ATen disagrees), and a 4-d pointwise result of channels-last values is realized channels-last too
# (its StorageBox's val says so, and the kernel's loop order follows the strides). Graph outputs
# get exactly eager's strides (a copy kernel where the chosen layout differs; a non-dense output
# that would differ runs eagerly), except the ones `GraphMeta.free_layout_outputs` lists: the
# activations a training forward saves for its backward. Those keep the chosen layout, the
# compiled graph reports it (`output_strides`), and the AOT layer gives the backward graph's
# inputs those strides before compiling it (Note [AOT: saved activations keep their layout]), so
# a ResNet's activations stay NHWC from the first convolution to the last weight gradient. A
# weight that is a graph input is converted by `rt.channels_last`, which keeps the copy until the
# weight changes (same tensor, same version counter, same memory): an inference graph converts
# its weights once, not on every call.


def _cl_stride(size):
    _, c, h, w = (int(x) for x in size)
    return (h * w * c, 1, w * c, c)


def _same_strides(size, a, b):
    return len(a) == len(b) and all(s == 1 or known_eq(x, y) for s, x, y in zip(size, a, b))


# convolution ops: how many leading tensor arguments run channels-last, and the `transposed` arg
_CONV_TENSOR_ARGS = {
    torch.ops.aten.convolution.default: 2,  # input, weight
    torch.ops.aten.convolution_backward.default: 3,  # grad_output, input, weight
}
_CONV_TRANSPOSED_ARG = {
    torch.ops.aten.convolution.default: 6,
    torch.ops.aten.convolution_backward.default: 7,
}


def _is_channels_last(t):
    return (
        t.dim() == 4
        and not t.is_contiguous()
        and t.is_contiguous(memory_format=torch.channels_last)
    )


def _wants_channels_last(gm):
    """Whether gm has 2D convolutions (forward or backward), all static, 4-d, float32."""
    if not config.conv_channels_last:
        return False
    found = False
    for n in gm.graph.nodes:
        if n.op != "call_function" or n.target not in _CONV_TENSOR_ARGS:
            continue
        count = _CONV_TENSOR_ARGS[n.target]
        vals = [a.meta.get("val") if isinstance(a, torch.fx.Node) else None for a in n.args[:count]]
        for t in vals:
            if not isinstance(t, torch.Tensor) or t.dim() != 4 or t.dtype != torch.float32:
                return False
            if not all(type(x) is int for x in t.shape):
                return False
        if n.args[_CONV_TRANSPOSED_ARG[n.target]]:
            return False
        found = True
    return found


# Note [Backend: views of unrealized values]
# A strided view (permute, reshape, expand, ...) of an unrealized value that an extern or the
# graph's outputs need in memory realizes the value itself and passes the view as strides, rather
# than writing a copy in the view's layout: `permute(_unsafe_view(clone(q)))` saved for the
# backward is then a view of the buffer the forward's bmm reads, not a second copy of q. Only
# when the view reaches every element of the value (a slice of a large value still copies the
# slice) and the chain of views is expressible as strides of the value's layout.
def _realize_under_view(value):
    """(Buffer, Layout) of view `value` after realizing the StorageBox under it, else None."""
    chain = []
    root = value
    while isinstance(root, View) and root.strided is not None:
        chain.append(root)
        root = root.base
    if not chain or not isinstance(root, StorageBox) or root.is_realized():
        return None
    if isinstance(root.data, (View, StorageBox)) or not hasattr(root.data, "get_size"):
        return None
    size = root.get_size()
    if not _numel_at_least(value.get_size(), size):
        return None
    stride = root._stride(None) or contiguous_strides(size)
    layout = Layout(size, stride, root.get_dtype())
    for v in reversed(chain):
        layout = v.strided(layout)
        if layout is None:
            return None
    root.realize(stride)
    return value.realized_layout()


def _numel_at_least(a, b):
    na, nb = 1, 1
    for s in a:
        na = na * s
    for s in b:
        nb = nb * s
    if type(na) is int and type(nb) is int:
        return na >= nb
    return known_eq(na, nb)


def _cost(loops):
    c = getattr(loops, "_kiln_cost", None)
    if c is None:
        h, _ = loops.trace(PrintHandler())
        trans = any(f"ops.{f}(" in ln for ln in h.lines for f in TRANSCENDENTAL)
        c = (len(h.lines), len({n for n, _ in h.loads}), trans)
        loops._kiln_cost = c
    return c


SIZE_OPS = {
    torch.ops.aten.sym_size.int,
    torch.ops.aten.sym_stride.int,
    torch.ops.aten.sym_numel.default,
    torch.ops.aten.sym_storage_offset.default,
}


def _is_size(v):
    return isinstance(v, torch.SymInt)


def _is_size_value(v):
    return (type(v) is int) or is_sym(v)


def _sym_floordiv(a, b):
    return floordiv(a, b) if (is_sym(a) or is_sym(b)) else a // b


def _sym_mod(a, b):
    if is_sym(a) or is_sym(b):
        return norm(sympy.Mod(a, b))
    return a % b


def _arith(fn):
    return lambda *a: norm(sympy.expand(fn(*a))) if any(is_sym(x) for x in a) else fn(*a)


SIZE_ARITH = {
    operator.add: _arith(operator.add),
    operator.sub: _arith(operator.sub),
    operator.mul: _arith(operator.mul),
    operator.neg: _arith(operator.neg),
    operator.floordiv: _sym_floordiv,
    operator.mod: _sym_mod,
}


def _size_value(val, example):
    """The expression of a symbolic size graph input (val or example a SymInt), else None."""
    for v in (val, example):
        if isinstance(v, torch.SymInt) or (
            not isinstance(v, (int, float, bool, torch.Tensor)) and hasattr(v, "expr")
        ):
            e = to_expr(v)
            return e if is_sym(e) else None
    return None


def graph_device(example_inputs, gm=None):
    """A graph's main device: CPU, or its CUDA device (Note [Backend: graphs on two devices])."""
    try:
        return devices.graph_device(example_inputs, gm)
    except ValueError as e:
        raise GraphNotSupported(str(e)) from e


def _check_tensor(x):
    if x.device.type not in ("cpu", "meta", "cuda") or x.layout != torch.strided:
        raise GraphNotSupported(f"tensor on {x.device} / {x.layout}")
    if x.dtype.is_complex or x.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        raise GraphNotSupported(f"dtype {x.dtype}")
    if x.is_quantized:
        raise GraphNotSupported("quantized tensor")


def _check_val(val):
    for v in _flat(val):
        if isinstance(v, torch.Tensor):
            _check_tensor(v)


def _matches(out, val):
    if isinstance(val, torch.Tensor):
        if not L.is_ir(out) or out.get_dtype() != val.dtype:
            return False
        a, b = tuple(out.get_size()), size_exprs(val)
        return len(a) == len(b) and all(known_eq(x, y) for x, y in zip(a, b))
    if isinstance(val, (list, tuple)):
        return (
            isinstance(out, (list, tuple))
            and len(out) == len(val)
            and all(_matches(o, v) for o, v in zip(out, val) if v is not None)
        )
    return False


def _map_args(a, env):
    if isinstance(a, torch.fx.Node):
        return env[a]
    if isinstance(a, (list, tuple)):
        return type(a)(_map_args(x, env) for x in a)
    if isinstance(a, dict):
        return {k: _map_args(v, env) for k, v in a.items()}
    return a


def _flat(a):
    if isinstance(a, (list, tuple)):
        return [y for x in a for y in _flat(x)]
    if isinstance(a, dict):
        return [y for x in a.values() for y in _flat(x)]
    return [a]


def _flat_out(a):
    if isinstance(a, (list, tuple)):
        return list(a)
    return [a]
