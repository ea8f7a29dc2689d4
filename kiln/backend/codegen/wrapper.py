"""The generated Python wrapper: allocates buffers, calls kernels and ATen externs, frees early.

def make(lib, consts):
    kernel0 = rt.bind(lib, "kernel0", 2)
    def call(arg0):
        arg0 = rt.fix(arg0, (64, 64), (64, 1))
        buf1 = empty_strided((64, 64), (64, 1), dtype=torch.float32)
        if kernel0(arg0.data_ptr(), buf1.data_ptr()): rt.index_error()
        return (buf1,)
    return call

A graph with symbolic sizes (Note [Backend: symbolic sizes]) binds each size symbol once per call
from the first input that has it as a whole size (or is it: a size input), and passes the symbols
a kernel uses after its pointers (the kernel's `int64_t ks0` arguments):

    def call(arg0):
        s0 = arg0.size(0)
        buf1 = empty_strided((s0, 64), (64, 1), dtype=torch.float32)
        if kernel0(arg0.data_ptr(), buf1.data_ptr(), s0): rt.index_error()
"""

import contextlib
import ctypes
import hashlib
import math

import sympy
import torch
from torch.utils.weak import WeakIdKeyDictionary

from kiln import config
from kiln.backend import fastcall
from kiln.backend.codegen.common import SIZE_PARAM, IndentedBuffer
from kiln.backend.graph import GraphNotSupported, PyValue
from kiln.backend.ir import Buffer, InputBuffer, is_sym, pexpr
from kiln.backend.scheduler import ExternGroup, Group, extern_reads
from kiln.exc import kernel_index_error

aten = torch.ops.aten


def _key(buf):
    """Buffers with equal keys can share memory: the elements their storage spans, dtype and
    device (Note [Backend: graphs on two devices])."""
    lay = buf.layout
    span = 1
    for sz, st in zip(lay.size, lay.stride):
        if type(sz) is int and sz == 0:
            return (0, lay.dtype, str(lay.device))
        span = span + (sz - 1) * st
    if is_sym(span):
        span = sympy.expand(span)
    return (span, lay.dtype, str(lay.device))


# Note [Wrapper: ATen calls through torch's Python bindings]
# An OpOverload's C++ entry (`op._op`) parses its arguments against the schema on every call,
# 4-6 us a call on a CPU where torch's generated Python binding of the same op takes 1.5-3 us
# (its parser is compiled per signature). On a GPU the host time of every extern call is time
# the device waits, on a small model. The externs below are called through their bindings. A
# binding chooses its overload from the arguments; the wrapper passes exactly one overload's
# arguments (tensors where its schema has tensors; `out=` for .out, none otherwise) and no op
# here has another overload those arguments fit, so the binding runs the same overload. Bindings
# honour __torch_function__ where op._op does not. Neither reaches them: a graph with inputs of
# a subclass with its own __torch_function__ runs with subclass dispatch off (the frontend's
# `_torch_function_disabled`), and a graph called while a function mode is on runs with torch
# functions off (`CompiledGraph.__call__`, Note [Frames: under a user's torch function mode]).
BINDINGS = {  # overload -> (torch._C submodule, binding name)
    "aten.mm.out": ("_VariableFunctions", "mm"),
    "aten.bmm.out": ("_VariableFunctions", "bmm"),
    "aten.addmm.out": ("_VariableFunctions", "addmm"),
    "aten.baddbmm.out": ("_VariableFunctions", "baddbmm"),
    "aten.linear.out": ("_nn", "linear"),
    "aten.convolution.default": ("_VariableFunctions", "convolution"),
    "aten.cumsum.default": ("_VariableFunctions", "cumsum"),
    "aten._scaled_dot_product_flash_attention_for_cpu.default": (
        "_VariableFunctions",
        "_scaled_dot_product_flash_attention_for_cpu",
    ),
    "aten._scaled_dot_product_flash_attention.default": (
        "_VariableFunctions",
        "_scaled_dot_product_flash_attention",
    ),
    "aten._scaled_dot_product_efficient_attention.default": (
        "_VariableFunctions",
        "_scaled_dot_product_efficient_attention",
    ),
    "aten._scaled_dot_product_cudnn_attention.default": (
        "_VariableFunctions",
        "_scaled_dot_product_cudnn_attention",
    ),
}


class rt:
    """Run-time helpers the wrappers call."""

    @staticmethod
    def bind(lib, name, nargs, nsizes=0):
        """Kernel `name` of a library as a callable of ints: a kiln_fastcall.Kernel, else
        through ctypes (Note [C++: calling kernels])."""
        fn = getattr(lib, name)
        if not isinstance(fn, ctypes._CFuncPtr):  # (a Triton module's launcher)
            return fn
        fast = fastcall.module()
        if fast is not None and nargs + nsizes <= fastcall.MAX_ARGS:
            return fast.Kernel(ctypes.cast(fn, ctypes.c_void_p).value)
        fn.argtypes = [ctypes.c_void_p] * nargs + [ctypes.c_int64] * nsizes
        fn.restype = ctypes.c_int
        return fn

    @staticmethod
    def fix(t, size, stride):
        """t with the layout the kernels were compiled for (a copy only when it differs)."""
        if t.stride() == stride:
            return t
        if all(a == b or n <= 1 for a, b, n in zip(t.stride(), stride, size)):
            return t
        out = torch.empty_strided(size, stride, dtype=t.dtype, device=t.device)
        out.copy_(t)
        return out

    @staticmethod
    def view(t, size, stride, offset):
        return t.as_strided(size, stride, t.storage_offset() + offset)

    _channels_last = None  # tensor -> (version, data_ptr, channels-last copy), weakly keyed

    @staticmethod
    def channels_last(t):
        """A channels-last copy of t, kept while t is unchanged (a conv weight between calls)."""
        if rt._channels_last is None:
            rt._channels_last = WeakIdKeyDictionary()
        try:
            version = t._version
        except RuntimeError:  # an inference tensor has no version counter: never kept
            return t.detach().contiguous(memory_format=torch.channels_last)
        hit = rt._channels_last.get(t)
        if hit is not None and hit[0] == version and hit[1] == t.data_ptr():
            return hit[2]
        out = t.detach().contiguous(memory_format=torch.channels_last)
        rt._channels_last[t] = (version, t.data_ptr(), out)
        return out

    @staticmethod
    def index_error():
        raise kernel_index_error()

    @staticmethod
    def resolve(qualname):
        """The op's C++ entry point: what `OpOverload.__call__` calls, without its Python frame."""
        ns, name, overload = qualname.split(".")
        op = getattr(getattr(getattr(torch.ops, ns), name), overload)
        return getattr(op, "_op", op)

    @staticmethod
    def binding(qualname):
        """torch's Python binding that calls this overload (Note [Wrapper: ATen calls through
        torch's Python bindings])."""
        module, name = BINDINGS[qualname]
        return getattr(getattr(torch._C, module), name)

    # a profiler range (Note [Backend: kernel profiling]): the C++ fast path, torch's Python one
    # where it is missing
    record_function = getattr(torch._C._profiler, "_RecordFunctionFast", None) or (
        torch.profiler.record_function
    )

    @staticmethod
    def graph_tag(lib, body_hash):
        """`kiln:<6 hex>`: the graph's name in profiler ranges (its kernels' library and code)."""
        text = f"{getattr(lib, '_name', '')}|{body_hash}"
        return "kiln:" + hashlib.sha256(text.encode()).hexdigest()[:6]


class WrapperCodegen:
    """Builds the wrapper source for a scheduled graph."""

    def __init__(self, graph, groups, stores, free_after, signatures, inplace=None):
        self.inplace = inplace or {}
        self.graph = graph
        self.groups = groups
        self.stores = stores
        self.free_after = free_after
        self.signatures = signatures
        self.extras = []  # objects that are not Python literals (makes the graph memory-only)
        self.ops = {}
        self.own = set()  # buffers this wrapper allocates (storage offset 0)
        self.held = {}  # local -> the layout its tensor has, where not its buffer's (Note [Wrapper: reuse without views])
        self.used = set()  # names of the size symbols the wrapper's code uses
        self.profile = config.profile_kernels  # Note [Backend: kernel profiling]
        self.labels = {}  # label variable -> its text after the graph's tag
        self.views = {}  # view expression -> the local holding it (Note [Wrapper: cheap views])
        self.views_of = {}  # buffer name -> the locals holding views of it
        self.pending = []  # lines binding views, written before the extern call that uses them

    def sx(self, e):
        """Python source of a size (int or symbolic expression)."""
        if type(e) is int:
            return str(e)
        self.used |= {str(x) for x in e.free_symbols}
        return pexpr(e)

    def st(self, t):
        """Python source of a tuple of sizes."""
        if all(type(e) is int for e in t):
            return repr(tuple(t))
        return "(" + ", ".join(self.sx(e) for e in t) + ("," if len(t) == 1 else "") + ")"

    def literal(self, x):
        if x is None or isinstance(x, (bool, int, str)):
            return repr(x)
        if is_sym(x):
            return self.sx(x)
        if isinstance(x, float):
            return repr(x) if math.isfinite(x) else f"float({str(x)!r})"
        if isinstance(x, (torch.dtype, torch.memory_format, torch.layout)):
            return str(x)
        if isinstance(x, torch.device):
            return f"torch.device({str(x)!r})"
        if isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], Buffer):
            return self.tensor_arg(*x)
        if isinstance(x, list):
            return "[" + ", ".join(self.literal(v) for v in x) + "]"
        if isinstance(x, tuple):
            return "(" + "".join(self.literal(v) + ", " for v in x) + ")"
        if isinstance(x, PyValue):  # a value an earlier extern computes at run time
            return x.name
        self.extras.append(x)
        return f"extras[{len(self.extras) - 1}]"

    def tensor_arg(self, buf, layout):
        """An extern's tensor argument: the buffer, or a local bound to its view once per call."""
        expr = self.view_from(buf.name, buf.layout, layout.size, layout.stride, layout.offset)
        if expr == buf.name:
            return expr
        name = self.views.get(expr)
        if name is None:
            mine = self.views_of.setdefault(buf.name, [])
            name = self.views[expr] = f"{buf.name}_v{len(mine)}"
            mine.append(name)
            self.pending.append(f"{name} = {expr}")
        return name

    # Note [Wrapper: cheap views]
    # A view of a buffer costs a call per graph run: `rt.view` (as_strided at the tensor's storage
    # offset) about 2.5 µs, `as_strided` 2.2 µs, `view`/`t()` under 1 µs. At the buffer's own offset
    # a row-major reshape of a row-major buffer is `.view(size)` and a 2-d transpose `.t()` (a
    # weight fed to mm); the runtime tensor has the compiled strides (inputs are fixed to them
    # at entry, up to size-1 dimensions, which neither cares about). Otherwise a buffer of ours
    # (storage offset 0) is one as_strided call, anything else rt.view. An extern's argument view
    # is bound to a local once per call (`buf1_v0 = buf1.view((4, 128))`): the q, k and v
    # projections read the same view of one buffer; the local is deleted with its buffer.
    def view_of(self, name, src, size, stride, offset):
        """The cheapest Python expression for buffer `name` (layout `src`) seen as a view."""
        if offset == src.offset:
            if (tuple(size), tuple(stride)) == (tuple(src.size), tuple(src.stride)):
                return name
            if _row_major(src.size, src.stride) and _row_major(size, stride):
                if _numel(size) == _numel(src.size):  # (else a slice of it: as_strided)
                    return f"{name}.view({self.st(size)})"
            if _transposed(src, size, stride, offset):
                return f"{name}.t()"
        if name in self.own and src.offset == 0:
            return f"{name}.as_strided({self.st(size)}, {self.st(stride)}, {self.sx(offset)})"
        return (
            f"rt.view({name}, {self.st(size)}, {self.st(stride)}, {self.sx(offset - src.offset)})"
        )

    def op_ref(self, op):
        if op not in self.ops:
            name = f"op{len(self.ops)}"
            if isinstance(op, torch._ops.OpOverload) and str(op) in BINDINGS:
                self.ops[op] = (name, f"rt.binding({str(op)!r})")
            elif isinstance(op, torch._ops.OpOverload):
                self.ops[op] = (name, f"rt.resolve({str(op)!r})")
            elif isinstance(op, str) and op.startswith("rt."):  # a runtime helper of ours
                self.ops[op] = (name, op)
            else:
                self.ops[op] = (name, self.literal(op))
        return self.ops[op][0]

    def generate(self):
        g = self.graph
        body = IndentedBuffer(3 if self.profile else 2)
        bound = self.bind_symbols(body)
        for buf in g.inputs:
            if hasattr(buf, "expr"):  # a size input (bound above)
                continue
            if not hasattr(buf, "layout"):  # a specialized Python number
                v = self.literal(buf.value)
                body.writeline(
                    f"if type({buf.name}) is not {type(buf.value).__name__} or {buf.name} != {v}: "
                    f"return fallback({', '.join(b.name for b in g.inputs)})"
                )
                continue
            lay = buf.layout
            stride = self.st(lay.stride)
            body.writeline(
                f"if {buf.name}.stride() != {stride}: "
                f"{buf.name} = rt.fix({buf.name}, {self.st(lay.size)}, {stride})"
            )
        self._plan_reuse()
        for gi, grp in enumerate(self.groups):
            if isinstance(grp, Group):
                self.kernel_call(body, grp)
            elif isinstance(grp, ExternGroup):
                self.extern_call(body, grp.kernel)
            for name in sorted(self.free_after.get(gi, [])):
                if not isinstance(g.buffers.get(name), InputBuffer) and self.allocated(name):
                    self.free(body, gi, name)
        outs = []
        self.output_sources = [self.output_source(o) for o in g.outputs]
        for o in g.outputs:
            if o[0] == "buf":
                lay = g.buffers[o[1]].layout
                outs.append(self.view_from(o[1], lay, lay.size, lay.stride, lay.offset))
            elif o[0] == "view":
                _, name, size, stride, off = o
                outs.append(self.view_from(name, g.buffers[name].layout, size, stride, off))
            elif o[0] == "py":
                outs.append(o[1])
            else:
                outs.append(self.literal(o[1]))
        body.writeline("return (" + "".join(f"{x}, " for x in outs) + ")")
        head = IndentedBuffer()
        head.writeline("import torch")
        head.writeline("from kiln.backend.codegen.wrapper import rt")
        head.writeline("empty_strided = torch.empty_strided")
        head.writeline("")
        head.writeline("")
        head.writeline("def make(lib, consts, extras, fallback):")
        with head.indent():
            for name in g.constants:
                head.writeline(f"{name} = consts[{name!r}]")
            for k, params in self.signatures.items():
                nsizes = sum(1 for p in params if SIZE_PARAM.fullmatch(p))
                extra = f", {nsizes}" if nsizes else ""
                head.writeline(f"{k} = rt.bind(lib, {k!r}, {len(params) - nsizes}{extra})")
            for name, expr in self.ops.values():
                head.writeline(f"{name} = {expr}")
            if self.profile:
                self.profile_header(head, body)
            head.writeline("")
            args = ", ".join(b.name for b in g.inputs)
            head.writeline(f"def call({args}):")
            if self.profile:
                head.writeline("    with rf(label_graph):")
        head.lines += body.lines
        with head.indent():
            head.writeline("return call")
        for params in self.signatures.values():
            self.used |= {p[1:] for p in params if SIZE_PARAM.fullmatch(p)}
        missing = self.used - bound
        if missing:
            raise GraphNotSupported(
                f"size symbols {sorted(missing)} cannot be computed from the graph's inputs"
            )
        return head.getvalue()

    def output_source(self, o):
        """Where an output's memory comes from: "fresh" (allocated by this call), ("input", k)
        (graph input k or a view of it), ("written", k) (input k, written by this call: Note
        [Backend: mutated inputs written in place]) or None (unknown: an ATen call's result may
        alias)."""
        if o[0] not in ("buf", "view"):
            return None
        buf = self.graph.buffers[self.inplace.get(o[1], o[1])]
        if isinstance(buf, InputBuffer):
            if buf in self.graph.inputs:
                kind = "written" if o[1] in self.inplace else "input"
                return (kind, self.graph.inputs.index(buf))
            return None  # a constant
        if hasattr(buf, "data") or (hasattr(buf, "kernel") and buf.kernel.out_variant):
            return "fresh"
        return None

    def bind_symbols(self, body):
        """`s0 = arg0_1.size(0)` for each size symbol, once per call, from the first input that
        has it as a whole size (or is it, for a size input); returns the bound names."""
        bound = set()
        for buf in self.graph.inputs:
            if hasattr(buf, "expr"):
                if is_sym(buf.expr) and buf.expr.is_Symbol and str(buf.expr) not in bound:
                    bound.add(str(buf.expr))
                    body.writeline(f"{buf.expr} = {buf.name}")
                continue
            if not hasattr(buf, "layout"):
                continue
            for d, e in enumerate(buf.layout.size):
                if is_sym(e) and e.is_Symbol and str(e) not in bound:
                    bound.add(str(e))
                    body.writeline(f"{e} = {buf.name}.size({d})")
        # then symbols only seen in a linear size a*s + b (an input of size 2*s0 + 1)
        for buf in self.graph.inputs:
            if hasattr(buf, "layout"):
                sizes = [(f"{buf.name}.size({d})", e) for d, e in enumerate(buf.layout.size)]
            else:
                sizes = [(buf.name, buf.expr)] if hasattr(buf, "expr") else []
            for src, e in sizes:
                if not is_sym(e) or len(e.free_symbols) != 1:
                    continue
                (sym,) = e.free_symbols
                poly = e.as_poly(sym) if e.is_polynomial(sym) else None
                if str(sym) in bound or poly is None or poly.degree() != 1:
                    continue
                a, b = poly.all_coeffs()
                if not (a.is_Integer and b.is_Integer and a > 0):
                    continue
                bound.add(str(sym))
                body.writeline(f"{sym} = ({src} - {pexpr(b)}) // {int(a)}")
        return bound

    def allocated(self, name):
        b = self.graph.buffers.get(name)
        return b is not None and (name in self.stores or not hasattr(b, "data"))

    # Note [Backend: buffer reuse]
    # A buffer we allocated is handed to a later allocation that spans as many elements of the
    # same dtype (as_strided when the shape differs) instead of being freed (its memory is warm
    # in cache, the peak is lower), unless an ATen call that may return a view of it (not an .out
    # call) read it. Only kept when a later allocation can take it.
    def _allocs(self, grp):
        if isinstance(grp, Group):
            return [
                n.buf for n in grp.nodes if n.name in self.stores and n.name not in self.inplace
            ]
        if grp.kernel.out_variant:
            return [grp.kernel.outputs[0]]
        return []

    def _plan_reuse(self):
        self.pool = {}
        self.no_reuse = set()
        self.future = []
        self.no_reuse |= set(self.inplace.values())  # their memory lives on under another name
        for grp in self.groups:
            if isinstance(grp, ExternGroup) and not grp.kernel.out_variant:
                self.no_reuse |= extern_reads(grp.kernel)
            self.future.append([_key(b) for b in self._allocs(grp)])

    def free(self, body, gi, name):
        buf = self.graph.buffers[name]
        key = _key(buf)
        ours = hasattr(buf, "data") or (hasattr(buf, "kernel") and buf.kernel.out_variant)
        if ours and name not in self.no_reuse:
            later = sum(k == key for ks in self.future[gi + 1 :] for k in ks)
            if later > len(self.pool.get(key, [])):
                self.pool.setdefault(key, []).append(name)
                return
        body.writeline(f"del {self.dead(name)}")

    def dead(self, name):
        """The names to `del` with a buffer: it and the locals holding its views."""
        views = self.views_of.pop(name, ())
        if views:
            self.views = {e: v for e, v in self.views.items() if v not in views}
        return ", ".join([name, *views])

    # Note [Wrapper: reuse without views]
    # A reused buffer (Note [Backend: buffer reuse]) or a kernel's output written in place into
    # a buffer of another shape is the same memory under another name. Kernels take only its
    # pointer, so the local is bound to the old tensor as it is (`buf5 = buf2`) and the layout
    # that tensor really has is remembered (`held`); a view is made only where the shape is
    # read: an extern's argument (Note [Wrapper: cheap views]) or `out=`, and an output. A view
    # costs 1-4 µs per call: nanogpt's forward made 22 of them for reuses alone.
    def layout_of(self, name):
        """The layout of the tensor local `name` holds (Note [Wrapper: reuse without views])."""
        held = self.held.get(name)
        return held if held is not None else self.graph.buffers[name].layout

    def view_from(self, name, own, size, stride, offset):
        """Local `name` (its buffer's layout `own`) seen with a layout whose offset is in the
        buffer's frame, from the tensor the local really holds."""
        held = self.held.get(name)
        if held is None:
            return self.view_of(name, own, size, stride, offset)
        return self.view_of(name, held, size, stride, offset - own.offset + held.offset)

    def rebind(self, body, name, old, old_layout, layout, comment):
        """`name = old` for the same memory; the layout it holds remembered where it differs."""
        body.writeline(f"{name} = {old}{comment}")
        if (old_layout.size, old_layout.stride) != (layout.size, layout.stride):
            self.held[name] = old_layout

    def alloc(self, body, buf, shaped=False):
        """Allocate a buffer, or take a freed one's memory; `shaped`: with its own layout (an
        ATen call's out=), else maybe as the old tensor (Note [Wrapper: reuse without views])."""
        lay = buf.layout
        self.own.add(buf.name)  # memory of ours, at storage offset 0
        free = self.pool.get(_key(buf))
        if free:
            old = free.pop()
            ol = self.layout_of(old)
            if shaped and (ol.size, ol.stride) != (lay.size, lay.stride):
                view = self.view_of(old, ol, lay.size, lay.stride, ol.offset)
                body.writeline(f"{buf.name} = {view}; del {self.dead(old)}")
            else:
                self.rebind(body, buf.name, old, ol, lay, f"; del {self.dead(old)}")
            return
        body.writeline(
            f"{buf.name} = empty_strided({self.st(lay.size)}, {self.st(lay.stride)}, "
            f"dtype={lay.dtype}{_device_kw(lay, self.graph)})"
        )

    def kernel_call(self, body, grp):
        for n in grp.nodes:
            if n.name in self.inplace:
                continue
            if n.name in self.stores:
                self.alloc(body, n.buf)
        params = self.signatures[grp.name]
        ptrs = ", ".join(self.kernel_arg(p) for p in params)
        with self.profiled(body, grp.name, self.kernel_label(grp)):
            body.writeline(f"if {grp.name}({ptrs}): rt.index_error()")
        for n in grp.nodes:
            if n.name in self.inplace:
                a = self.inplace[n.name]
                if a in self.own:
                    self.own.add(n.name)
                la = self.layout_of(a)
                self.rebind(body, n.name, a, la, n.buf.layout, "  # written in place")

    def kernel_arg(self, p):
        """A kernel argument: a size (`ks0` is the wrapper's s0) or a buffer's pointer."""
        return p[1:] if SIZE_PARAM.fullmatch(p) else f"{p}.data_ptr()"

    def extern_call(self, body, k):
        linear = self.as_linear(k)
        op = self.op_ref(aten.linear.out if linear else k.op)
        args = linear or [self.literal(a) for a in k.args]
        kwargs = [f"{key}={self.literal(v)}" for key, v in k.kwargs.items()]
        for line in self.pending:
            body.writeline(line)
        self.pending.clear()
        outs = k.outputs
        extern = f"extern{sum(v.startswith('label_extern') for v in self.labels)}"
        if k.out_variant:
            self.alloc(body, outs[0], shaped=True)
            with self.profiled(body, extern, self.extern_label(k)):
                body.writeline(f"{op}({', '.join(args + kwargs + ['out=' + outs[0].name])})")
            return
        names = [o.name if o is not None else "_" for o in outs]
        call = f"{op}({', '.join(args + kwargs)})"
        with self.profiled(body, extern, self.extern_label(k)):
            if getattr(k, "multi", False):
                body.writeline(f"{''.join(n + ', ' for n in names)}= {call}")
            else:
                body.writeline(f"{names[0]} = {call}")
        for o in outs:
            if isinstance(o, Buffer):
                # Note [Wrapper: outputs an op leaves undefined]: on CUDA an attention op
                # returns None for the RNG state or debug mask its meta function makes a tensor
                # of (no dropout); the graph never reads them, so None passes unfixed
                lay = o.layout
                stride = self.st(lay.stride)
                body.writeline(
                    f"if {o.name} is not None and {o.name}.stride() != {stride}: "
                    f"{o.name} = rt.fix({o.name}, {self.st(lay.size)}, {stride})"
                )

    # Note [Wrapper: linear for a transposed weight]
    # A linear layer reaches the wrapper as mm(x, w viewed transposed) (addmm with a bias). As
    # `aten.linear.out(x, w[, bias])` the transpose happens in C++: linear's 2-d path is that same
    # mm (addmm with the bias) of x and w.t(), so the numbers are the same, and the call costs
    # one Python call instead of two (a decode step of a small decoder runs 15 of them).
    def as_linear(self, k):
        """The arguments of linear.out for an mm.out/addmm.out extern whose weight is a transposed
        buffer, else None."""
        if not k.out_variant or k.kwargs or k.op not in (aten.mm.out, aten.addmm.out):
            return None
        *rest, w = k.args
        if not (isinstance(w, tuple) and len(w) == 2 and isinstance(w[0], Buffer)):
            return None
        buf, lay = w
        if not _transposed(buf.layout, lay.size, lay.stride, lay.offset):
            return None
        # (the weight as the buffer it is: a local reusing another buffer's memory holds that
        # tensor's shape, Note [Wrapper: reuse without views])
        if k.op == aten.mm.out:
            return [self.literal(rest[0]), self.tensor_arg(buf, buf.layout)]
        bias, x = rest
        if not (isinstance(bias, tuple) and len(bias[1].size) == 1):
            return None  # linear's bias is 1-d
        return [self.literal(x), self.tensor_arg(buf, buf.layout), self.literal(bias)]

    # Note [Backend: kernel profiling]
    # Under `config.profile_kernels` every kernel and extern call runs inside a profiler range
    # named after what it computes, and the whole call inside one for the graph, so
    # torch.profiler shows one row per kiln kernel instead of one opaque CompiledFunction:
    #     kiln:3fa2c1 graph (5 kernels, 1 extern)
    #     kiln:3fa2c1 kernel2 reduction(amax,sum) [64 | 512] (3 nodes, 1 load, 1 store)
    #     kiln:3fa2c1 extern0 aten.mm.out -> [64, 64]
    # The tag (`rt.graph_tag`) hashes the kernels' library and the wrapper's body, so equal
    # kernel numbers of a forward and a backward graph stay apart. Ranges are torch's C++
    # `_RecordFunctionFast`: ~0.5 us per range in a wrapper with the profiler off, ~1.5 us on
    # (the Python `record_function` costs ~6 us); labels are built once in `make`. With the
    # setting off the wrapper is exactly the unprofiled one; the setting is in the graph key.
    @contextlib.contextmanager
    def profiled(self, body, what, text):
        """Lines written inside run in a profiler range `<tag> <what> <text>` (when profiling)."""
        if not self.profile:
            yield
            return
        var = f"label_{what}"
        self.labels[var] = f"{what} {text}"
        body.writeline(f"with rf({var}):")
        with body.indent():
            yield

    def profile_header(self, head, body):
        """`make`'s profiling lines: the range factory, the graph's tag, the labels."""
        kernels = sum(isinstance(grp, Group) for grp in self.groups)
        externs = sum(v.startswith("label_extern") for v in self.labels)
        body_hash = hashlib.sha256("\n".join(body.lines).encode()).hexdigest()[:16]
        head.writeline("rf = rt.record_function")
        head.writeline(f"tag = rt.graph_tag(lib, {body_hash!r})")
        graph = f"graph ({_plural(kernels, 'kernel')}, {_plural(externs, 'extern')})"
        for var, text in [("label_graph", graph), *self.labels.items()]:
            head.writeline(f"{var} = tag + {' ' + text!r}")

    def kernel_label(self, grp):
        """What a kernel computes: kind, loops (outer | inner), nodes, buffers read and written."""
        reds = sorted({n.reduction_type for n in grp.nodes if n.is_reduction})
        kind = f"reduction({','.join(map(str, reds))})" if reds else "pointwise"
        loops = ", ".join(map(str, grp.outer))
        if grp.inner:
            loops += " | " + ", ".join(map(str, grp.inner))
        mine = grp.names()
        loads = len({r for n in grp.nodes for r in n.reads} - mine)
        stores = sum(n.name in self.stores for n in grp.nodes)
        return (
            f"{kind} [{loops}] ({_plural(len(grp.nodes), 'node')}, {_plural(loads, 'load')}, "
            f"{_plural(stores, 'store')})"
        )

    def extern_label(self, k):
        """The ATen op of an extern call and its first output's sizes."""
        op = str(k.op) if isinstance(k.op, torch._ops.OpOverload) else _callable_name(k.op)
        first = next((o for o in _flat(k.outputs) if isinstance(o, Buffer)), None)
        if first is None:
            return op
        return f"{op} -> [{', '.join(map(str, first.layout.size))}]"


def _device_kw(layout, graph):
    """`, device=...` for a buffer off the CPU (allocated by torch's caching allocator), and for a
    CPU buffer of a CUDA graph (Note [Backend: graphs on two devices])."""
    dev = getattr(layout, "device", None)
    if dev is None or (dev.type == "cpu" and getattr(graph, "device", dev).type == "cpu"):
        return ""
    return f", device={str(dev)!r}"


def _plural(n, word):
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _callable_name(fn):
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


def _flat(xs):
    for x in xs:
        if isinstance(x, (list, tuple)):
            yield from _flat(x)
        else:
            yield x


def _transposed(src, size, stride, offset):
    """Whether a view is the 2-d transpose of a buffer of layout `src`, at its own offset."""
    return (
        offset == src.offset
        and len(size) == 2
        and len(src.size) == 2
        and (tuple(size), tuple(stride)) == (tuple(src.size[::-1]), tuple(src.stride[::-1]))
    )


def _numel(size):
    n = 1
    for x in size:
        n = n * x
    return sympy.expand(n) if is_sym(n) else n


def _row_major(size, stride):
    """Whether a layout is row-major (any stride on a dimension of size 1)."""
    acc = 1
    for n, st in zip(reversed(tuple(size)), reversed(tuple(stride))):
        if n != 1 and st != acc:
            return False
        acc = acc * n
    return True
