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
import functools
import itertools
import math

import sympy
import torch

# --- size expressions ----------------------------------------------------------------------------
# Note [Backend: symbolic sizes]
# A size, stride, offset or loop bound is a Python int or a sympy expression over the ShapeEnv's
# size symbols s0, s1, ... (contract 3; every symbol is >= 2 at run time). `to_expr` converts what
# the graph carries (torch.SymInt wrapping a SymNode, a SymNode, an int) and turns constant
# expressions back into ints, so a graph without symbols runs exactly the int code it always did
# (every symbolic branch below is behind a `type(x) is int` test). Facts about symbolic values are
# PROVED, never assumed from hints: `known_nonneg(e)` substitutes s = d + 2 (d >= 0) and asks sympy
# whether the cancelled rational function is nonnegative; anything not proved takes the general
# (still correct) path. Hints (`HINTS`) only steer heuristics such as the column-reduction choice.
# Kernels print a symbol s0 as the argument `ks0` (cexpr), the wrapper as the local `s0` (pexpr).

HINTS: dict = {}  # size Symbol -> hint (heuristics only, never correctness)
REPLACEMENTS: dict = {}  # size Symbol -> what the ShapeEnv proved it equals (guarded: s1 -> s0)


def to_expr(v):
    """An int, or a sympy expression for a symbolic size (torch.SymInt, SymNode or sympy)."""
    if type(v) is int:
        return v
    if isinstance(v, torch.SymInt):
        expr = getattr(v.node, "expr", None)
        if expr is None:
            raise TypeError(f"a SymInt without a sympy expression: {v.node!r}")
        return _replaced(expr)
    if isinstance(v, sympy.Basic):
        return _replaced(v)
    expr = getattr(v, "expr", None)  # kiln.frontend.shapes.SymNode
    if isinstance(expr, sympy.Basic):
        return _replaced(expr)
    if isinstance(v, bool):
        return int(v)
    return int(v)  # numpy and other integer types (raises for the rest)


def use_shape_env(env):
    """Take the hints and replacements of a graph's ShapeEnv (None: a static graph)."""
    HINTS.clear()
    REPLACEMENTS.clear()
    if env is not None:
        HINTS.update(env.var_to_val)
        REPLACEMENTS.update(env.replacements)


def _replaced(e):
    if REPLACEMENTS and not e.is_Integer:
        e = sympy.expand(e.xreplace(REPLACEMENTS)) if e.free_symbols & REPLACEMENTS.keys() else e
    return norm(e)


def norm(e):
    """A sympy integer as a Python int; other values unchanged."""
    if isinstance(e, sympy.Basic) and e.is_Integer:
        return int(e)
    return e


def is_sym(v):
    """Whether v is a symbolic (sympy) size."""
    return isinstance(v, sympy.Basic)


def sizes_of(t):
    """Sizes of a tensor-like as ints / sympy expressions."""
    return tuple(to_expr(s) for s in t.shape)


def strides_of(t):
    """Strides of a tensor-like as ints / sympy expressions."""
    return tuple(to_expr(s) for s in t.stride())


def free_symbols(*vals):
    """The size symbols in ints / sympy expressions / nested lists of them."""
    out = set()
    for v in vals:
        if isinstance(v, (list, tuple)):
            out |= free_symbols(*v)
        elif isinstance(v, sympy.Basic):
            out |= v.free_symbols
    return out


_SHIFTED = {}


def _shift(sym):
    d = _SHIFTED.get(sym)
    if d is None:
        d = _SHIFTED[sym] = sympy.Dummy(f"d_{sym}", integer=True, nonnegative=True) + 2
    return d


@functools.lru_cache(8192)
def _sign(e):
    """(provably > 0, provably >= 0) of a symbolic size expression, every symbol >= 2."""
    if e.has(sympy.floor, sympy.Mod, sympy.Max, sympy.Min, sympy.ceiling):
        return False, False
    d = sympy.cancel(e.xreplace({s: _shift(s) for s in e.free_symbols}))
    num, den = sympy.fraction(d)
    num, den = sympy.expand(num), sympy.expand(den)
    if den.is_positive is not True:
        if den.is_negative is True:
            num = -num
        else:
            return False, False
    return num.is_positive is True, num.is_nonnegative is True


def known_nonneg(e):
    """e >= 0 for every value of the size symbols (proved)."""
    if type(e) is int:
        return e >= 0
    return _sign(sympy.sympify(e))[1]


def known_lt(a, b):
    """a < b for every value of the size symbols (proved)."""
    if type(a) is int and type(b) is int:
        return a < b
    return _sign(sympy.sympify(b - a))[0]


def known_eq(a, b):
    """a == b as expressions (ints compare as ints)."""
    if type(a) is int and type(b) is int:
        return a == b
    return sympy.expand(sympy.sympify(a) - b) == 0


def exact_div(a, b):
    """a / b when it is an integer polynomial for every value of the symbols, else None."""
    if type(a) is int and type(b) is int:
        return a // b if b and a % b == 0 else None
    if type(a) is int:  # a constant is no multiple of a non-constant size
        return 0 if a == 0 else None
    if type(b) is int:  # an integer polynomial: every coefficient divisible
        terms = sympy.Add.make_args(a)
        coefs = [t.as_coeff_Mul()[0] for t in terms]
        if not all(c.is_Integer and int(c) % b == 0 for c in coefs):
            return None
        if a.has(sympy.floor, sympy.Mod, sympy.Max, sympy.Min):
            return None
        return norm(sympy.Add(*[t / b for t in terms]))
    return _exact_div_sym(a, b)


@functools.lru_cache(4096)
def _exact_div_sym(a, b):
    q = a / b  # monomials cancel on construction: s0*s1 / s1 is s0
    if sympy.fraction(q)[1] != 1:
        q = sympy.cancel(q)
    if q.is_Integer:
        return int(q)
    if not q.is_polynomial() or q.has(sympy.floor, sympy.Mod):
        return None
    syms = sorted(q.free_symbols, key=str)
    if not syms or not all(c.is_Integer for c in sympy.Poly(q, *syms).coeffs()):
        return None
    return q


def floordiv(a, b):
    """a // b for sizes (exact quotients stay polynomials)."""
    if type(a) is int and type(b) is int:
        return a // b
    q = exact_div(a, b)
    return q if q is not None else norm(sympy.floor(sympy.sympify(a) / b))


def size_hint(e, default=8192):
    """The value of a size on the hints (a default for unknown symbols): heuristics only."""
    if type(e) is int:
        return e
    try:
        v = sympy.sympify(e).xreplace({s: HINTS.get(s, default) for s in e.free_symbols})
        return int(v)
    except (TypeError, ValueError):
        return default


def cexpr(e):
    """C++ source of a size expression (symbol s0 is the kernel argument ks0)."""
    if type(e) is int:
        return str(e)
    return _print(sympy.sympify(e), "k", True)


def pexpr(e):
    """Python source of a size expression (symbol s0 is the wrapper's local s0)."""
    if type(e) is int:
        return str(e)
    return _print(sympy.sympify(e), "", False)


def _print(e, prefix, c):
    p = lambda x: _print(x, prefix, c)
    if isinstance(e, sympy.Symbol):
        return prefix + e.name
    if e.is_Integer:
        return str(int(e))
    if isinstance(e, sympy.Add):
        terms = sorted(e.args, key=lambda t: (t.is_Number, str(t)))
        out = p(terms[0])
        for t in terms[1:]:
            txt = p(t)
            out += f" - {txt[1:]}" if txt.startswith("-") else f" + {txt}"
        return f"({out})"
    if isinstance(e, sympy.Mul):
        num, den = sympy.fraction(e)
        if den != 1:  # exact quotient of a proved divisibility
            return f"({p(num)} / {p(den)})" if c else f"({p(num)} // {p(den)})"
        coef, rest = e.as_coeff_Mul()
        factors = sympy.Mul.make_args(rest)
        body = "*".join(p(f) for f in factors)
        if coef == -1:
            return f"-{body}"
        return body if coef == 1 else f"{int(coef)}*{body}"
    if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp > 0:
        return "*".join([p(e.base)] * int(e.exp))
    if isinstance(e, sympy.floor):
        num, den = sympy.fraction(sympy.together(e.args[0]))
        if not c:
            return f"({p(num)} // {p(den)})"
        if known_nonneg(num) and known_nonneg(den):
            return f"({p(num)} / {p(den)})"
        return f"kiln_floordiv_idx({p(num)}, {p(den)})"
    if isinstance(e, sympy.Mod):
        a, b = e.args
        if not c or known_nonneg(a):
            return f"({p(a)} % {p(b)})"
        return f"kiln_mod_idx({p(a)}, {p(b)})"
    if isinstance(e, (sympy.Max, sympy.Min)):
        name = ("std::max<int64_t>" if c else "max") if isinstance(e, sympy.Max) else None
        name = name or ("std::min<int64_t>" if c else "min")
        out = p(e.args[0])
        for a in e.args[1:]:
            out = f"{name}({out}, {p(a)})"
        return out
    raise ValueError(f"cannot print size expression {e!r}")


# --- index expressions ---------------------------------------------------------------------------
# Note [Backend: index expressions]
# An index is an affine form over named symbols: loop variables ("i0", "r1"), indirect indices
# ("ix3") and opaque atoms such as "(i0 / 7)"; coefficients and the constant are sizes (ints or,
# for symbolic graphs, sympy expressions over s0, s1: `ks1*i0 + i1`). Every symbol has a known
# inclusive range in RANGES (bounds may be symbolic: i1 in [0, s1 - 1]), which lets `//` and `%`
# simplify the arithmetic that reshapes produce: (8*i0 + i1) // 8 == i0 when 0 <= i1 < 8, and
# (s1*i0 + i1) // s1 == i0 when 0 <= i1 < s1 (proved with known_lt). A symbolic atom's bounds are
# rational over-approximations (hi / k >= floor(hi / k)), good enough for the next proof.

RANGES: dict = {}  # symbol -> (lo, hi) inclusive
CPU = torch.device("cpu")
_UNBOUNDED = (-(2**62), 2**62)


def set_range(sym, lo, hi):
    """Declare the inclusive range of a symbol (loop variable or indirect index)."""
    RANGES[sym] = (lo, hi)


class Ix:
    """An affine index: sum(coef * symbol) + const; symbols are C identifiers or atoms."""

    __slots__ = ("terms", "const")

    def __init__(self, terms=None, const=0):
        self.terms = {s: c for s, c in (terms or {}).items() if type(c) is not int or c != 0}
        self.const = const

    @staticmethod
    def var(name):
        return Ix({name: 1})

    @staticmethod
    def wrap(v):
        if isinstance(v, Ix):
            return v
        if type(v) is int:
            return Ix(None, v)
        return Ix(None, to_expr(v))

    def is_const(self):
        return not self.terms

    def __add__(self, o):
        o = Ix.wrap(o)
        t = dict(self.terms)
        for s, c in o.terms.items():
            v = t.get(s, 0) + c
            t[s] = v if type(v) is int else _n(v)
        v = self.const + o.const
        return Ix(t, v if type(v) is int else _n(v))

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
            if type(k) is int:
                return Ix({s: c * k for s, c in self.terms.items()}, self.const * k)
            return Ix({s: _n(c * k) for s, c in self.terms.items()}, _n(self.const * k))
        if self.is_const():
            return o * self
        return _atom(
            f"(({self.render()}) * ({o.render()}))", _mul_bounds(self.bounds(), o.bounds())
        )

    __rmul__ = __mul__

    def bounds(self):
        lo = hi = self.const
        for s, c in self.terms.items():
            a, b = RANGES.get(s, _UNBOUNDED)
            if type(c) is int and type(a) is int and type(b) is int:
                lo += min(c * a, c * b)
                hi += max(c * a, c * b)
            elif known_nonneg(c):
                lo, hi = lo + c * a, hi + c * b
            elif known_nonneg(-c):
                lo, hi = lo + c * b, hi + c * a
            else:
                return _UNBOUNDED
        return _n(lo), _n(hi)

    def _split(self, k):
        if (
            type(k) is int
            and type(self.const) is int
            and all(type(c) is int for c in self.terms.values())
        ):
            q = Ix({s: c // k for s, c in self.terms.items() if c % k == 0}, self.const // k)
            r = Ix({s: c for s, c in self.terms.items() if c % k != 0}, self.const % k)
            return q, r
        qt, rt = {}, {}
        for s, c in self.terms.items():
            d = exact_div(c, k)
            if d is None:
                rt[s] = c
            else:
                qt[s] = d
        d = exact_div(self.const, k)
        if d is None:
            return Ix(qt, 0), Ix(rt, self.const)
        return Ix(qt, d), Ix(rt, 0)

    def _common_factor(self, k):
        """(g, X, Y) with self == g*X + Y, 0 <= Y < g, 1 < g < k and g | k (int indices), or None.

        A reshape's view of a reshape indexes (128*i0 + i1) // 8192 with i1 < 128: that is
        i0 // 64, constant along the inner loop i1 (a plain vector load instead of a gather)."""
        if any(type(c) is not int for c in (k, self.const, *self.terms.values())):
            return self._common_factor_sym(k)
        for g in sorted({math.gcd(c, k) for c in self.terms.values()}, reverse=True):
            if g <= 1 or g >= k:
                continue
            big = Ix({s: c // g for s, c in self.terms.items() if c % g == 0}, self.const // g)
            small = Ix({s: c for s, c in self.terms.items() if c % g != 0}, self.const % g)
            lo, hi = small.bounds()
            if type(lo) is int and type(hi) is int and 0 <= lo and hi < g:
                return g, big, small
        return None

    def _common_factor_sym(self, k):
        """_common_factor for symbolic sizes: g is a term's coefficient that divides k, e.g.
        (32*o0 + o1) // (32*s1) with o1 < 32 is o0 // s1."""
        cands = {c for c in self.terms.values() if not (type(c) is int and c <= 1)}
        for g in sorted(cands, key=lambda c: -size_hint(c)):
            m = exact_div(k, g)
            if m is None or (type(m) is int and m == 1):
                continue
            big, small = {}, {}
            for sym, c in self.terms.items():
                d = exact_div(c, g)
                if d is None:
                    small[sym] = c
                else:
                    big[sym] = d
            dc = exact_div(self.const, g)
            big, small = (
                (Ix(big, dc), Ix(small)) if dc is not None else (Ix(big), Ix(small, self.const))
            )
            lo, hi = small.bounds()
            if known_nonneg(lo) and known_lt(hi, g):
                return g, big, small
        return None

    def __floordiv__(self, k):
        if type(k) is not int:
            k = to_expr(k)
        if type(k) is int:
            assert k > 0, k
            if k == 1:
                return self
        q, r = self._split(k)
        lo, hi = r.bounds()
        if (
            (0 <= lo and hi < k)
            if type(lo) is type(hi) is type(k) is int
            else (known_nonneg(lo) and known_lt(hi, k))
        ):
            return q
        f = self._common_factor(k)
        if f is not None:  # (g*X + Y) // (g*m) == X // m
            return f[1] // exact_div(k, f[0])
        lo, hi = self.bounds()
        nonneg = known_nonneg(lo)
        ks = _divisor_text(k)
        code = (
            f"(({self.render()}) / {ks})" if nonneg else f"kiln_floordiv_idx({self.render()}, {ks})"
        )
        if type(k) is int and type(lo) is int and type(hi) is int:
            return _atom(code, (lo // k, hi // k))
        blo = 0 if nonneg else _UNBOUNDED[0]
        if hi == _UNBOUNDED[1]:
            bhi = hi
        else:
            top = exact_div(_n(hi + 1), k)  # hi = n*k - 1 (a loop bound): the quotient is < n
            bhi = _n(top - 1) if top is not None else _n(hi / sympy.sympify(k))
        return _atom(code, (blo, bhi))

    def __mod__(self, k):
        if type(k) is not int:
            k = to_expr(k)
        if type(k) is int:
            assert k > 0, k
            if k == 1:
                return Ix()
        q, r = self._split(k)
        lo, hi = r.bounds()
        if (
            (0 <= lo and hi < k)
            if type(lo) is type(hi) is type(k) is int
            else (known_nonneg(lo) and known_lt(hi, k))
        ):
            return r
        f = self._common_factor(k)
        if f is not None:  # (g*X + Y) % (g*m) == g*(X % m) + Y
            g, big, small = f
            return (big % exact_div(k, g)) * g + small
        lo, hi = self.bounds()
        ks = _divisor_text(k)
        if type(k) is int and type(hi) is int and type(lo) is int and lo >= 0:
            return _atom(f"(({self.render()}) % {k})", (0, min(k - 1, hi)))
        if known_nonneg(lo):
            return _atom(f"(({self.render()}) % {ks})", (0, _n(k - 1)))
        return _atom(f"kiln_mod_idx({self.render()}, {ks})", (0, _n(k - 1)))

    def render(self):
        parts = []
        for s, c in sorted(self.terms.items()):
            if type(c) is not int:
                txt = cexpr(c)
                parts.append(f"-{txt[1:]}*{s}" if txt.startswith("-") else f"{txt}*{s}")
            else:
                parts.append(s if c == 1 else f"-{s}" if c == -1 else f"{c}*{s}")
        if type(self.const) is not int:
            parts.append(cexpr(self.const))
        elif self.const or not parts:
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


def _divisor_text(k):
    """C++ text of a divisor: an int, a symbol, or a parenthesised expression."""
    if type(k) is int:
        return str(k)
    return cexpr(k) if k.is_Symbol else f"({cexpr(k)})"


def _n(v):
    return v if type(v) is int else norm(sympy.expand(v))


def _atom(code, bounds):
    RANGES[code] = bounds
    return Ix({code: 1})


def _mul_bounds(a, b):
    if not all(type(x) is int for x in a + b):
        if known_nonneg(a[0]) and known_nonneg(b[0]):
            return 0, _n(a[1] * b[1])
        return _UNBOUNDED
    prods = [x * y for x in a for y in b]
    return min(prods), max(prods)


def prod(xs):
    """Product of sizes (the one place sizes multiply)."""
    out = math.prod(xs)
    return out if type(out) is int else _n(out)


def contiguous_strides(size):
    """Row-major strides of a size."""
    strides, acc = [], 1
    for s in reversed(size):
        strides.append(acc)
        if type(s) is int:
            acc *= max(s, 1)
        else:
            acc = _n(acc * (s if known_nonneg(s - 1) else sympy.Max(s, 1)))
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
        self.size = tuple(s if type(s) is int else to_expr(s) for s in size)
        self.stride = tuple(s if type(s) is int else to_expr(s) for s in stride)
        self.dtype = dtype
        self.device = device
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
        expected = _n(expected * sz)
    return True


def dense_stride_of(val, size):
    """The strides of meta value `val` when it has `size` and is dense, else None."""
    if not isinstance(val, torch.Tensor):
        return None
    vs = sizes_of(val)
    if len(vs) != len(size) or not all(known_eq(a, b) for a, b in zip(vs, size)):
        return None
    st = strides_of(val)
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
