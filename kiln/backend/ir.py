"""Loop IR: index expressions, layouts, buffers, Pointwise / Reduction loops, views, extern kernels.

A tensor value during lowering is an IRNode. Its `make_loader()` returns `load(index)`, a function
of a list of index expressions that computes the element through the current `ops` handler
(define-by-run): the same inner_fn prints as loop IR, generates C++ or, later, Triton.

    x = InputBuffer("arg0_1", Layout((4, 8), (8, 1), torch.float32))
    y = Pointwise(torch.float32, (4, 8), lambda i: ops.exp(x.make_loader()(i)))
    print(y)
    # Pointwise((4, 8), float32)
    #   tmp0 = ops.load(arg0_1, 8*i0 + i1)
    #   tmp1 = ops.exp(tmp0)
"""

import contextlib
import itertools

import torch

from kiln.backend.index_exprs import (  # noqa: F401 (re-exported: lowerings import them from here)
    CPU,
    Ix,
    compile_scope,
    compile_state,
    contiguous_strides,
    current_device,
    device_scope,
    prod,
    set_range,
    simplified,
)
from kiln.symbolic.sizes import (  # noqa: F401 (re-exported: lowerings import them from here)
    cexpr,
    exact_div,
    floordiv,
    is_sym,
    known_eq,
    known_lt,
    known_nonneg,
    norm,
    pexpr,
    size_exprs,
    size_hint,
    size_scope,
    stride_exprs,
    to_expr,
    use_shape_env,
)

# --- the ops handler (define-by-run) -------------------------------------------------------------


class _OpsProxy:
    """`ops.add(a, b)` dispatches to the innermost handler installed by `set_handler`."""

    def __getattr__(self, name):
        def op(*args, **kwargs):
            return getattr(compile_state.handlers[-1], name)(*args, **kwargs)

        op.__name__ = name
        return op


ops = _OpsProxy()


@contextlib.contextmanager
def set_handler(handler):
    """Install an ops handler for the duration of a with-block."""
    compile_state.handlers.append(handler)
    try:
        yield handler
    finally:
        compile_state.handlers.pop()


class PrintHandler:
    """Records each op as a loop-IR text line; values are tmp names."""

    def __init__(self):
        self.lines = []
        self.loads = []  # (buffer name, Ix)

    def _emit(self, text):
        name = f"tmp{len(self.lines)}"
        self.lines.append(f"{name} = {text}")
        return name

    def load(self, name, index):
        self.loads.append((name, index))
        return self._emit(f"ops.load({name}, {index})")

    def indirect_indexing(self, value, size, wrap=True):
        sym = f"ix{len(self.lines)}"
        set_range(sym, 0, size - 1)
        self._emit(f"ops.indirect_indexing({value}, {size})")
        return Ix.var(sym)

    def __getattr__(self, name):
        def op(*args):
            return self._emit(f"ops.{name}({', '.join(map(_fmt, args))})")

        return op


class ReadsHandler(PrintHandler):
    """Like PrintHandler, but only the loads matter (dependency analysis); counts ops."""


def _fmt(a):
    if isinstance(a, torch.dtype):
        return str(a).replace("torch.", "")
    return str(a)


# --- layouts and nodes ---------------------------------------------------------------------------


class Layout:
    """Size, stride, dtype, device and storage offset of a buffer."""

    def __init__(self, size, stride, dtype, device=None, offset=0):
        self.size = tuple(s if type(s) is int else to_expr(s) for s in size)
        self.stride = tuple(s if type(s) is int else to_expr(s) for s in stride)
        self.dtype = dtype
        self.device = device if device is not None else compile_state.device
        self.offset = offset if type(offset) is int else to_expr(offset)

    def index(self, idx):
        """The storage index of element `idx` (a list of Ix)."""
        assert len(idx) == len(self.size), (idx, self.size)
        out = Ix(None, self.offset)
        for i, st, sz in zip(idx, self.stride, self.size):
            if (type(sz) is not int or sz != 1) and (type(st) is not int or st != 0):
                out = out + Ix.wrap(i) * st
        return out

    def __repr__(self):
        return (
            f"Layout({list(self.size)}, stride={list(self.stride)}, "
            f"{_fmt(self.dtype)}, offset={self.offset})"
        )


class IRNode:
    """Base of every IR value."""

    def get_size(self):
        raise NotImplementedError

    def get_dtype(self):
        raise NotImplementedError

    def make_loader(self):
        raise NotImplementedError

    def get_numel(self):
        return prod(self.get_size())

    def realized_layout(self):
        """(Buffer, Layout) when this value is a strided view of a realized buffer, else None."""
        return None


class Buffer(IRNode):
    """A named, allocated tensor."""

    def __init__(self, name, layout):
        self.name = name
        self.layout = layout

    def get_size(self):
        return self.layout.size

    def get_dtype(self):
        return self.layout.dtype

    def make_loader(self):
        name, layout = self.name, self.layout

        def load(idx):
            return ops.load(name, layout.index(idx))

        return load

    def realized_layout(self):
        return self, self.layout

    def __repr__(self):
        return f"{type(self).__name__}({self.name}, {self.layout})"


class InputBuffer(Buffer):
    """A graph input (placeholder) or a constant bound at load time."""


class ComputedBuffer(Buffer):
    """A buffer computed by a Pointwise or Reduction loop (a kernel node for the scheduler)."""

    def __init__(self, name, layout, data):
        super().__init__(name, layout)
        self.data = data

    def __repr__(self):
        return f"{self.name}: {self.layout}\n{self.data}"


class ExternBuffer(Buffer):
    """An output of an ExternKernel (ATen call at run time)."""

    def __init__(self, name, layout, kernel):
        super().__init__(name, layout)
        self.kernel = kernel


class Loops(IRNode):
    """Common part of Pointwise and Reduction."""

    def __init__(self, dtype, ranges, inner_fn):
        self.dtype = dtype
        self.ranges = tuple(ranges)
        self.inner_fn = inner_fn

    def get_size(self):
        return self.ranges

    def get_dtype(self):
        return self.dtype

    def _vars(self):
        names = [f"i{k}" for k in range(len(self.ranges))]
        for n, s in zip(names, self.ranges):
            set_range(n, 0, s - 1)
        return [Ix.var(n) for n in names]

    def trace(self, handler):
        """Run inner_fn once under a handler with loop variables i0.. (and r0..)."""
        with set_handler(handler):
            return handler, self._call(handler)

    def __str__(self):
        h, out = self.trace(PrintHandler())
        head = f"{type(self).__name__}({list(self.ranges)}, {_fmt(self.dtype)}{self._extra()})"
        return "\n".join([head] + [f"  {ln}" for ln in h.lines] + [f"  return {out}"])

    def _extra(self):
        return ""


class Pointwise(Loops):
    """out[i] = inner_fn(i) over `ranges`."""

    def make_loader(self):
        return self.inner_fn

    def _call(self, handler):
        return self.inner_fn(self._vars())


class Reduction(Loops):
    """out[i] = reduce(reduction_type, inner_fn(i, r) for r in reduction_ranges)."""

    def __init__(self, dtype, ranges, reduction_ranges, reduction_type, inner_fn, src_dtype):
        super().__init__(dtype, ranges, inner_fn)
        self.reduction_ranges = tuple(reduction_ranges)
        self.reduction_type = reduction_type
        self.src_dtype = src_dtype

    def _rvars(self):
        names = [f"r{k}" for k in range(len(self.reduction_ranges))]
        for n, s in zip(names, self.reduction_ranges):
            set_range(n, 0, s - 1)
        return [Ix.var(n) for n in names]

    def _call(self, handler):
        return self.inner_fn(self._vars(), self._rvars())

    def _extra(self):
        return f", {self.reduction_type} over {list(self.reduction_ranges)}"

    def make_loader(self):
        raise AssertionError("a Reduction is always realized before it is read")


class StorageBox(IRNode):
    """The mutable home of a value: unrealized Pointwise until `realize()` makes it a Buffer."""

    def __init__(self, data, graph, val=None):
        self.data = data
        self.graph = graph
        self.val = val  # meta value of the FX node that made it: eager's layout when realized
        self.users = 0

    def get_size(self):
        return self.data.get_size()

    def get_dtype(self):
        return self.data.get_dtype()

    def is_realized(self):
        return isinstance(self.data, Buffer)

    def realize(self, stride=None):
        if not self.is_realized():
            self.data = self.graph.realize_loops(self.data, self._stride(stride))
        return self.data

    def _stride(self, stride):
        if stride is not None:
            return stride
        return dense_stride_of(self.val, self.get_size())

    def make_loader(self):
        return self.data.make_loader()

    def realized_layout(self):
        return self.data.realized_layout() if self.is_realized() else None

    def __repr__(self):
        return f"StorageBox({self.data!r})"


def is_dense(size, stride):
    """Whether (size, stride) covers exactly prod(size) elements without overlap."""
    if not all(type(x) is int for x in tuple(size) + tuple(stride)):
        return _is_dense_sym(size, stride)
    pairs = sorted((st, sz) for sz, st in zip(size, stride) if sz != 1)
    expected = 1
    for st, sz in pairs:
        if sz == 0:
            return True
        if st != expected:
            return False
        expected *= sz
    return True


def _is_dense_sym(size, stride):
    """is_dense for symbolic layouts: strides ordered by their hints, each proved equal to the
    product of the sizes inside it (so dense for every value of the symbols)."""
    pairs = sorted(
        ((st, sz) for sz, st in zip(size, stride) if sz != 1), key=lambda p: size_hint(p[0])
    )
    expected = 1
    for st, sz in pairs:
        if not known_eq(st, expected):
            return False
        expected = simplified(expected * sz)
    return True


def dense_stride_of(val, size):
    """The strides of meta value `val` when it has `size` and is dense, else None."""
    if not isinstance(val, torch.Tensor):
        return None
    vs = size_exprs(val)
    if len(vs) != len(size) or not all(known_eq(a, b) for a, b in zip(vs, size)):
        return None
    st = stride_exprs(val)
    return st if is_dense(vs, st) else None


class View(IRNode):
    """A view as index arithmetic: element idx of the view is element reindex(idx) of the base."""

    def __init__(self, base, size, reindex, dtype=None, strided=None):
        self.base = base
        self.size = tuple(size)
        self.reindex = reindex
        self.dtype = dtype or base.get_dtype()
        self.strided = strided  # fn(Layout) -> Layout | None: the same view as a strided layout

    def get_size(self):
        return self.size

    def get_dtype(self):
        return self.dtype

    def make_loader(self):
        base, reindex = self.base, self.reindex

        def load(idx):  # late-bound: sees the base realized after this view was made
            return base.make_loader()(reindex(list(idx)))

        return load

    def realized_layout(self):
        rl = self.base.realized_layout()
        if rl is None or self.strided is None:
            return None
        buf, layout = rl
        new = self.strided(layout)
        return None if new is None else (buf, new)

    def __repr__(self):
        return f"View({list(self.size)}, of {self.base!r})"


class Constant(IRNode):
    """A Python scalar broadcast to a size (0-d by default)."""

    def __init__(self, value, dtype, size=()):
        self.value, self.dtype, self.size = value, dtype, tuple(size)

    def get_size(self):
        return self.size

    def get_dtype(self):
        return self.dtype

    def make_loader(self):
        value, dtype = self.value, self.dtype
        return lambda idx: ops.constant(value, dtype)


class ExternKernel:
    """A call into ATen at run time: `outs = op(*args, **kwargs)`; args hold Buffers/views."""

    def __init__(self, name, op, args, kwargs, outputs, out_variant=False):
        self.name = name
        self.op = op
        self.args = args
        self.kwargs = kwargs
        self.outputs = outputs  # list of ExternBuffer | None (non-tensor result), or nested
        self.out_variant = out_variant  # call op(*args, out=outputs[0]) into a preallocated buffer
        self.reads = set()

    def __repr__(self):
        outs = ", ".join(o.name if isinstance(o, Buffer) else repr(o) for o in self.outputs)
        return f"{outs} = extern {self.op}({self.args}, {self.kwargs})"


_counter = itertools.count()


def fresh_name(prefix="buf"):
    """A process-unique name (only used where names need not be stable)."""
    return f"{prefix}{next(_counter)}"
