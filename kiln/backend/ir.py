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
import math

import torch

# --- index expressions ---------------------------------------------------------------------------
# Note [Backend: index expressions]
# Sizes are concrete ints for now (contract 3), so an index is an affine form over named symbols:
# loop variables ("i0", "r1"), indirect indices ("ix3") and opaque atoms such as "(i0 / 7)". Every
# symbol has a known inclusive range in RANGES, which lets `//` and `%` simplify the arithmetic that
# reshapes produce: (8*i0 + i1) // 8 == i0 when 0 <= i1 < 8. All size arithmetic lives here.

RANGES: dict[str, tuple[int, int]] = {}  # symbol -> (lo, hi) inclusive
CPU = torch.device("cpu")


def set_range(sym, lo, hi):
    """Declare the inclusive range of a symbol (loop variable or indirect index)."""
    RANGES[sym] = (lo, hi)


class Ix:
    """An affine index: sum(coef * symbol) + const; symbols are C identifiers or atoms."""

    __slots__ = ("terms", "const")

    def __init__(self, terms=None, const=0):
        self.terms = {s: c for s, c in (terms or {}).items() if c != 0}
        self.const = const

    @staticmethod
    def var(name):
        return Ix({name: 1})

    @staticmethod
    def wrap(v):
        return v if isinstance(v, Ix) else Ix(None, int(v))

    def is_const(self):
        return not self.terms

    def __add__(self, o):
        o = Ix.wrap(o)
        t = dict(self.terms)
        for s, c in o.terms.items():
            t[s] = t.get(s, 0) + c
        return Ix(t, self.const + o.const)

    __radd__ = __add__

    def __neg__(self):
        return self * -1

    def __sub__(self, o):
        return self + (-Ix.wrap(o))

    def __rsub__(self, o):
        return Ix.wrap(o) - self

    def __mul__(self, o):
        o = Ix.wrap(o)
        if o.is_const():
            k = o.const
            return Ix({s: c * k for s, c in self.terms.items()}, self.const * k)
        if self.is_const():
            return o * self
        return _atom(
            f"(({self.render()}) * ({o.render()}))", _mul_bounds(self.bounds(), o.bounds())
        )

    __rmul__ = __mul__

    def bounds(self):
        lo = hi = self.const
        for s, c in self.terms.items():
            a, b = RANGES.get(s, (-(2**62), 2**62))
            lo += min(c * a, c * b)
            hi += max(c * a, c * b)
        return lo, hi

    def _split(self, k):
        q = Ix({s: c // k for s, c in self.terms.items() if c % k == 0}, self.const // k)
        r = Ix({s: c for s, c in self.terms.items() if c % k != 0}, self.const % k)
        return q, r

    def __floordiv__(self, k):
        assert isinstance(k, int) and k > 0, k
        if k == 1:
            return self
        q, r = self._split(k)
        lo, hi = r.bounds()
        if 0 <= lo and hi < k:
            return q
        lo, hi = self.bounds()
        fn = "/" if lo >= 0 else "kiln_floordiv_idx"
        code = f"(({self.render()}) / {k})" if fn == "/" else f"{fn}({self.render()}, {k})"
        return _atom(code, (lo // k, hi // k))

    def __mod__(self, k):
        assert isinstance(k, int) and k > 0, k
        if k == 1:
            return Ix()
        q, r = self._split(k)
        lo, hi = r.bounds()
        if 0 <= lo and hi < k:
            return r
        lo, hi = self.bounds()
        if lo >= 0:
            return _atom(f"(({self.render()}) % {k})", (0, min(k - 1, hi)))
        return _atom(f"kiln_mod_idx({self.render()}, {k})", (0, k - 1))

    def render(self):
        parts = []
        for s, c in sorted(self.terms.items()):
            parts.append(s if c == 1 else f"-{s}" if c == -1 else f"{c}*{s}")
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts).replace("+ -", "- ")

    def key(self):
        return (tuple(sorted(self.terms.items())), self.const)

    def __eq__(self, o):
        return isinstance(o, Ix) and self.key() == o.key()

    def __hash__(self):
        return hash(self.key())

    def __repr__(self):
        return self.render()

    def symbols(self):
        return set(self.terms)


def _atom(code, bounds):
    RANGES[code] = bounds
    return Ix({code: 1})


def _mul_bounds(a, b):
    prods = [x * y for x in a for y in b]
    return min(prods), max(prods)


def prod(xs):
    """Product of sizes (the one place sizes multiply)."""
    return math.prod(xs)


def contiguous_strides(size):
    """Row-major strides of a size."""
    strides, acc = [], 1
    for s in reversed(size):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


# --- the ops handler (define-by-run) -------------------------------------------------------------

_handlers = []


class _OpsProxy:
    """`ops.add(a, b)` dispatches to the innermost handler installed by `set_handler`."""

    def __getattr__(self, name):
        def op(*args, **kwargs):
            return getattr(_handlers[-1], name)(*args, **kwargs)

        op.__name__ = name
        return op


ops = _OpsProxy()


@contextlib.contextmanager
def set_handler(handler):
    """Install an ops handler for the duration of a with-block."""
    _handlers.append(handler)
    try:
        yield handler
    finally:
        _handlers.pop()


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

    def __init__(self, size, stride, dtype, device=CPU, offset=0):
        self.size = tuple(size)
        self.stride = tuple(stride)
        self.dtype = dtype
        self.device = device
        self.offset = offset

    def index(self, idx):
        """The storage index of element `idx` (a list of Ix)."""
        assert len(idx) == len(self.size), (idx, self.size)
        out = Ix(None, self.offset)
        for i, st, sz in zip(idx, self.stride, self.size):
            if sz != 1 and st != 0:
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
        v = self.val
        if isinstance(v, torch.Tensor) and tuple(v.shape) == tuple(self.get_size()):
            if is_dense(v.shape, v.stride()):
                return tuple(v.stride())
        return None

    def make_loader(self):
        return self.data.make_loader()

    def realized_layout(self):
        return self.data.realized_layout() if self.is_realized() else None

    def __repr__(self):
        return f"StorageBox({self.data!r})"


def is_dense(size, stride):
    """Whether (size, stride) covers exactly prod(size) elements without overlap."""
    pairs = sorted((st, sz) for sz, st in zip(size, stride) if sz != 1)
    expected = 1
    for st, sz in pairs:
        if sz == 0:
            return True
        if st != expected:
            return False
        expected *= sz
    return True


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
