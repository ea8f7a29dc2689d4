"""Sizes of symbolic graphs: ints or sympy expressions over the size symbols s0, s1, ...

Conversions from what graphs carry (torch.SymInt, SymNode), proofs over every value of the symbols
(known_nonneg / known_lt / exact_div), hints for heuristics, and C++ / Python printing.
"""

import contextlib
import functools
import threading

import sympy
import torch

# Note [Backend: symbolic sizes]
# A size, stride, offset or loop bound is a Python int or a sympy expression over the ShapeEnv's
# size symbols s0, s1, ... (GraphMeta.shape_env; every symbol is >= 2 at run time). `to_expr` converts what
# the graph carries (torch.SymInt wrapping a SymNode, a SymNode, an int) and turns constant
# expressions back into ints, so a graph without symbols runs exactly the int code it always did
# (every symbolic branch below is behind a `type(x) is int` test). Facts about symbolic values are
# PROVED, never assumed from hints: `known_nonneg(e)` substitutes s = d + 2 (d >= 0) and asks sympy
# whether the cancelled rational function is nonnegative; anything not proved takes the general
# (still correct) path. Hints (`size_hint`) only steer heuristics such as the column-reduction choice.
# Kernels print a symbol s0 as the argument `ks0` (cexpr), the wrapper as the local `s0` (pexpr).


# Note [Backend: per-compile size state]
# The hints and replacements of the graph being compiled are per thread and per compile: a
# backend compiles inside `size_scope()` (kiln.backend.ir.compile_scope), which gives the thread
# fresh state and restores the previous state on exit, so two threads compile at once and a
# compile inside a compile (a fallback) leaves the outer one's state as it was.
class _SizeState(threading.local):
    """This thread's hints and replacements (Note [Backend: per-compile size state])."""

    def __init__(self):
        self.hints = {}  # size Symbol -> hint (heuristics only, never correctness)
        self.replacements = {}  # size Symbol -> what the ShapeEnv proved it equals (s1 -> s0)


_state = _SizeState()


@contextlib.contextmanager
def size_scope():
    """Fresh hints and replacements for one compile; the previous ones come back on exit."""
    saved = _state.hints, _state.replacements
    _state.hints, _state.replacements = {}, {}
    try:
        yield
    finally:
        _state.hints, _state.replacements = saved


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
    expr = getattr(v, "expr", None)  # kiln.symbolic.shape_env.SymNode
    if isinstance(expr, sympy.Basic):
        return _replaced(expr)
    if isinstance(v, bool):
        return int(v)
    return int(v)  # numpy and other integer types (raises for the rest)


def use_shape_env(env):
    """Take the hints and replacements of a graph's ShapeEnv (None: a static graph), for the
    rest of the current size_scope()."""
    _state.hints = dict(env.var_to_val) if env is not None else {}
    _state.replacements = dict(env.replacements) if env is not None else {}


def _replaced(e):
    replacements = _state.replacements
    if replacements and not e.is_Integer:
        e = sympy.expand(e.xreplace(replacements)) if e.free_symbols & replacements.keys() else e
    return norm(e)


def norm(e):
    """A sympy integer as a Python int; other values unchanged."""
    if isinstance(e, sympy.Basic) and e.is_Integer:
        return int(e)
    return e


def is_sym(v):
    """Whether v is a symbolic (sympy) size."""
    return isinstance(v, sympy.Basic)


def size_exprs(t):
    """Sizes of a tensor-like as ints / sympy expressions."""
    return tuple(to_expr(s) for s in t.shape)


def stride_exprs(t):
    """Strides of a tensor-like as ints / sympy expressions."""
    return tuple(to_expr(s) for s in t.stride())


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
        hints = _state.hints
        v = sympy.sympify(e).xreplace({s: hints.get(s, default) for s in e.free_symbols})
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
