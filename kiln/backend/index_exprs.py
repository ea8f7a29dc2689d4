"""Index expressions of the loop IR (`Ix`, with their folding rules) and the state of one graph's
compilation (device, index ranges, ops handlers); the IR nodes are in ir.py."""

import contextlib
import math
import threading

import sympy
import torch

from kiln.symbolic.sizes import (
    cexpr,
    exact_div,
    known_lt,
    known_nonneg,
    norm,
    size_hint,
    size_scope,
    to_expr,
)

# --- index expressions ---------------------------------------------------------------------------
# Note [Backend: index expressions]
# An index is an affine form over named symbols: loop variables ("i0", "r1"), indirect indices
# ("ix3") and opaque atoms such as "(i0 / 7)"; coefficients and the constant are sizes (ints or,
# for symbolic graphs, sympy expressions over s0, s1: `ks1*i0 + i1`). Every symbol has a known
# inclusive range in `ranges()` (bounds may be symbolic: i1 in [0, s1 - 1]), which lets `//` and `%`
# simplify the arithmetic that reshapes produce: (8*i0 + i1) // 8 == i0 when 0 <= i1 < 8, and
# (s1*i0 + i1) // s1 == i0 when 0 <= i1 < s1 (proved with known_lt). A symbolic atom's bounds are
# rational over-approximations (hi / k >= floor(hi / k)), good enough for the next proof.
# A multiple of k leaves `// k` and `% k` whatever the ranges: (R + 384*r0) // 128 is
# 3*r0 + R // 128. Sums of atoms recombine (_fold_divmod): k*((X // k) % n) + X % k is X % (k*n)
# and k*(X // k) + X % k is X, so a permuted flat index read back flat is affine again.


CPU = torch.device("cpu")


class _CompileState(threading.local):
    """This thread's per-compile state: index-symbol ranges and the ops-handler stack
    (Note [Backend: per-compile size state]; `compile_scope` gives a compile fresh state)."""

    def __init__(self):
        self.ranges = {}  # symbol -> (lo, hi) inclusive
        self.handlers = []  # set_handler's stack; `ops.x(...)` goes to the innermost
        self.device = CPU  # the device of the graph being lowered: Layout's default


compile_state = _CompileState()


def current_device():
    """The device of the graph being lowered (CPU, or the CUDA device of a Triton graph)."""
    return compile_state.device


@contextlib.contextmanager
def device_scope(device):
    """Layouts made inside default to `device` (GraphLowering.run)."""
    saved, compile_state.device = compile_state.device, device
    try:
        yield
    finally:
        compile_state.device = saved


def ranges():
    """symbol -> (lo, hi) inclusive, of the current compile."""
    return compile_state.ranges


@contextlib.contextmanager
def compile_scope():
    """Fresh per-compile state (ranges, ops handlers, size hints and replacements) for one graph's
    compile; the previous state comes back on exit (Note [Backend: per-compile size state])."""
    saved = compile_state.ranges, compile_state.handlers
    compile_state.ranges, compile_state.handlers = {}, []
    try:
        with size_scope():
            yield
    finally:
        compile_state.ranges, compile_state.handlers = saved


_UNBOUNDED = (-(2**62), 2**62)


def set_range(sym, lo, hi):
    """Declare the inclusive range of a symbol (loop variable or indirect index)."""
    compile_state.ranges[sym] = (lo, hi)


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
            t[s] = v if type(v) is int else simplified(v)
        v = self.const + o.const
        if DIVMOD and len(t) >= 2 and _fold_divmod(t):
            v = v + t.pop("", 0)
        return Ix(t, v if type(v) is int else simplified(v))

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
            return Ix(
                {s: simplified(c * k) for s, c in self.terms.items()}, simplified(self.const * k)
            )
        if self.is_const():
            return o * self
        return _atom(
            f"(({self.render()}) * ({o.render()}))", _mul_bounds(self.bounds(), o.bounds())
        )

    __rmul__ = __mul__

    def bounds(self):
        lo = hi = self.const
        for s, c in self.terms.items():
            a, b = compile_state.ranges.get(s, _UNBOUNDED)
            if type(c) is int and type(a) is int and type(b) is int:
                lo += min(c * a, c * b)
                hi += max(c * a, c * b)
            elif known_nonneg(c):
                lo, hi = lo + c * a, hi + c * b
            elif known_nonneg(-c):
                lo, hi = lo + c * b, hi + c * a
            else:
                return _UNBOUNDED
        return simplified(lo), simplified(hi)

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
        if q.terms or q.const != 0:  # (k*Q + R) // k == Q + R // k for every integer Q
            return q + r // k
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
            return _atom(code, (lo // k, hi // k), ("/", self, k) if nonneg else None)
        blo = 0 if nonneg else _UNBOUNDED[0]
        if hi == _UNBOUNDED[1]:
            bhi = hi
        else:
            top = exact_div(
                simplified(hi + 1), k
            )  # hi = n*k - 1 (a loop bound): the quotient is < n
            bhi = simplified(top - 1) if top is not None else simplified(hi / sympy.sympify(k))
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
        if q.terms or q.const != 0:  # (k*Q + R) % k == R % k for every integer Q
            return r % k
        f = self._common_factor(k)
        if f is not None:  # (g*X + Y) % (g*m) == g*(X % m) + Y
            g, big, small = f
            return (big % exact_div(k, g)) * g + small
        lo, hi = self.bounds()
        ks = _divisor_text(k)
        if type(k) is int and type(hi) is int and type(lo) is int and lo >= 0:
            return _atom(f"(({self.render()}) % {k})", (0, min(k - 1, hi)), ("%", self, k))
        if known_nonneg(lo):
            return _atom(f"(({self.render()}) % {ks})", (0, simplified(k - 1)))
        return _atom(f"kiln_mod_idx({self.render()}, {ks})", (0, simplified(k - 1)))

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


def simplified(v):
    """An int as it is; an expression expanded and normalised."""
    return v if type(v) is int else norm(sympy.expand(v))


def _atom(code, bounds, divmod_of=None):
    compile_state.ranges[code] = bounds
    if divmod_of is not None:
        DIVMOD[code] = divmod_of
    return Ix({code: 1})


# atom code -> ("/" or "%", X, k) for the atoms X // k and X % k of a non-negative X
DIVMOD: dict = {}


def _fold_divmod(terms):
    """Recombine div/mod atoms in a term dict (in place) until nothing changes: a flat index split
    by a view and put back together by the next one (Note [Backend: index expressions])."""
    done = False
    while _fold_mod_mod(terms) | _fold_div_mod(terms):
        done = True
    return done


def _fold_mod_mod(terms):
    """c*k*((X // k) % n) + c*(X % k) -> c*(X % (k*n)), for a non-negative X (int c, k, n).

    X % (k*n) == X - k*n*(X // (k*n)) and X // (k*n) == (X // k) // n, so it is
    k*((X // k) - n*((X // k) // n)) + X % k == k*((X // k) % n) + X % k."""
    for code in list(terms):
        d = DIVMOD.get(code)
        if d is None or d[0] != "%" or code not in terms:
            continue
        inner, n = d[1], d[2]
        if inner.const != 0 or len(inner.terms) != 1 or next(iter(inner.terms.values())) != 1:
            continue
        div = DIVMOD.get(next(iter(inner.terms)))
        if div is None or div[0] != "/" or type(div[2]) is not int or type(n) is not int:
            continue
        x, k = div[1], div[2]
        low = next(
            (
                m
                for m in terms
                if DIVMOD.get(m, (None,))[0] == "%"
                and DIVMOD[m][2] == k
                and DIVMOD[m][1].key() == x.key()
            ),
            None,
        )
        c = terms.get(low)
        if low is None or type(c) is not int or terms[code] != c * k:
            continue
        del terms[code], terms[low]
        _merge(terms, x % (k * n), c)
        return True
    return False


def _merge(terms, ix, c):
    """terms += c * ix (the constant under the key "")."""
    for sym, v in ix.terms.items():
        v = terms.get(sym, 0) + c * v
        if type(v) is not int:
            v = simplified(v)
        if type(v) is int and v == 0:
            terms.pop(sym, None)
        else:
            terms[sym] = v
    v = terms.get("", 0) + c * ix.const
    terms[""] = v if type(v) is int else simplified(v)


def _fold_div_mod(terms):
    """k*(X // k) + X % k -> X in a term dict (in place)."""
    mods = {}
    for code in terms:
        d = DIVMOD.get(code)
        if d is not None and d[0] == "%":
            mods[(d[1].key(), d[2])] = code
    if not mods:
        return False
    done = False
    for code in list(terms):
        d = DIVMOD.get(code)
        if d is None or d[0] != "/" or code not in terms:
            continue
        m = mods.get((d[1].key(), d[2]))
        if m is None or m not in terms:
            continue
        c, x = terms[m], d[1]
        if type(c) is not int or type(d[2]) is not int or terms[code] != c * d[2]:
            continue
        if type(x.const) is not int or any(type(k) is not int for k in x.terms.values()):
            continue
        del terms[code], terms[m]
        _merge(terms, x, c)
        done = True
    return done


def _mul_bounds(a, b):
    if not all(type(x) is int for x in a + b):
        if known_nonneg(a[0]) and known_nonneg(b[0]):
            return 0, simplified(a[1] * b[1])
        return _UNBOUNDED
    prods = [x * y for x in a for y in b]
    return min(prods), max(prods)


def prod(xs):
    """Product of sizes (the one place sizes multiply)."""
    out = math.prod(xs)
    return out if type(out) is int else simplified(out)


def contiguous_strides(size):
    """Row-major strides of a size."""
    strides, acc = [], 1
    for s in reversed(size):
        strides.append(acc)
        if type(s) is int:
            acc *= max(s, 1)
        else:
            acc = simplified(acc * (s if known_nonneg(s - 1) else sympy.Max(s, 1)))
    return tuple(reversed(strides))
