"""Sizes while tracing: static sizes, sympy size symbols, shape guards, automatic dynamic.

`size_of`/`sizes_of`/`strides_of`/`numel_of` give the frontend's static view (Python ints, pinned by
the TENSOR_MATCH guard). `ShapeEnv` makes dynamic dimensions into sympy symbols `s0, s1, ...` with
concrete hints; `SymNode` is the Python value of a symbolic size in traced code.
"""

import dataclasses
import operator

import sympy

from kiln import logs

# Note [Shapes: guards from facts]
# A dynamic size is a sympy symbol with a hint (the size of the tensor seen at compile time) and a
# source (`L['x'].size()[0]`). Traced code computes with `SymNode`s (sympy expressions); it only
# needs a concrete answer when Python control flow asks for one: `bool(...)` (an `if`, a
# comparison), `int(...)`/`__index__` (a size used where an int must be). At that moment the env
# evaluates the expression on the hints and RECORDS the answer as a fact (`s0 > 5`, `Eq(s0, s1)`,
# `Eq(Mod(s0, 8), 0)`, or `Eq(s0, 7)` for a specialisation). The compiled code is valid exactly for
# the inputs where every recorded fact holds, so the facts ARE the shape guards: `guard_expr()`
# renders them as one Python boolean expression over the sources, for the frontend's generated
# check function. Facts are also used while tracing: an equality that solves for a symbol becomes a
# replacement (`s1 -> s0`, so later expressions simplify and no duplicate guard is made), a true
# `Mod(e, k) == 0` makes `Mod(e, k)` zero and `e // k` exact. Every symbol is >= 2 (sizes 0 and 1
# are specialised to constants at creation, as torch users expect: a size-1 dimension broadcasts),
# so facts that follow from the ranges (`s0 > 1`, `s0 != 1`, `s0*s1 > 0`) are static: `evaluate`
# returns them with no guard, and only the range guard `source >= 2` stays in the guard expression.

# Note [Shapes: wiring]
# Frontend: one ShapeEnv per frame compilation; a tensor input's sizes are
# `env.sizes_of(example, source_name, frame_shapes.dynamic_dims(source_name, t, dynamic))`;
# the check function ANDs `env.guard_expr()` (TENSOR_MATCH then checks dtype/device/rank and the
# static dims only). Tracer: `kiln.autograd.shape_rules.propagate` gives each node's symbolic sizes
# (and strides); ops without a rule specialise. Backends take the free symbols of the graph as
# extra size arguments, computed from the inputs by the wrapper.


@dataclasses.dataclass(frozen=True)
class SymSize:
    """One size of one traced tensor: where it came from and its concrete value (hint)."""

    hint: int
    tensor_source: object = None
    dim: int = 0

    def specialize(self):
        """The concrete int; the tensor's TENSOR_MATCH guard already pins it."""
        return self.hint


def size_of(example, dim, source=None):
    """The traced value of `example.size(dim)` (an int while every size is static)."""
    return SymSize(int(example.shape[dim]), source, dim).specialize()


def sizes_of(example, source=None):
    """The traced value of `example.shape` as a tuple."""
    return tuple(size_of(example, d, source) for d in range(example.dim()))


def strides_of(example):
    """The traced value of `example.stride()` as a tuple."""
    return tuple(int(s) for s in example.stride())


def numel_of(example):
    """The traced value of `example.numel()`."""
    n = 1
    for s in sizes_of(example):
        n *= s
    return n


# ---------------------------------------------------------------------------------------------
# Symbolic sizes


MIN_SYMBOL_VALUE = 2  # sizes 0 and 1 are specialised, so every size symbol is >= 2


class ShapeEnv:
    """Size symbols with hints and sources, and the facts (guards) the traced program relied on."""

    def __init__(self, specialize_zero_one=True):
        self.specialize_zero_one = specialize_zero_one
        self.var_to_val = {}  # Symbol -> hint
        self.var_to_source = {}  # Symbol -> source text
        self.source_to_var = {}  # source text -> Symbol
        self.replacements = {}  # Symbol -> expr it equals (learned from facts)
        self.divisible = set()  # (expr, k) with Mod(expr, k) == 0 known
        self.guards = []  # recorded boolean facts, as sympy expressions (before simplification)

    # -- symbols -----------------------------------------------------------------------------
    def create_symbol(self, hint, source):
        """The sympy expr for a size with this hint from `source` (a constant for 0/1)."""
        hint = int(hint)
        if hint < 0:
            raise ValueError(f"negative size {hint} for {source}")
        if source in self.source_to_var:
            return self.simplify(self.source_to_var[source])
        sym = sympy.Symbol(f"s{len(self.var_to_val)}", integer=True, positive=True)
        self.var_to_val[sym] = hint
        self.var_to_source[sym] = source
        self.source_to_var[source] = sym
        if hint < MIN_SYMBOL_VALUE:
            if not self.specialize_zero_one:
                raise ValueError("unspecialised 0/1 sizes are not supported")
            self.replacements[sym] = sympy.Integer(hint)  # guard `source == hint`
            return sympy.Integer(hint)
        return sym

    def create_size(self, hint, source):
        """The traced value of a dynamic size: a SymNode, or an int for 0/1."""
        return self.wrap(self.create_symbol(hint, source))

    def sizes_of(self, example, source_name, dynamic_dims=None):
        """Traced sizes of `example`: SymNodes for `dynamic_dims` (all when None), ints elsewhere."""
        out = []
        for d, n in enumerate(example.shape):
            if dynamic_dims is None or d in dynamic_dims:
                out.append(self.create_size(int(n), f"{source_name}.size()[{d}]"))
            else:
                out.append(int(n))
        return tuple(out)

    def wrap(self, expr):
        """A SymNode for a symbolic expr, a Python int for a constant one."""
        expr = self.simplify(sympy.sympify(expr))
        if expr.is_Integer:
            return int(expr)
        if expr.is_Number:
            raise ValueError(f"non-integer size {expr}")
        return SymNode(expr, self)

    # -- simplification and evaluation -------------------------------------------------------
    def substitute(self, expr):
        """`expr` with the learned replacements applied."""
        expr = sympy.sympify(expr)
        return expr.xreplace(self.replacements) if self.replacements else expr

    def simplify(self, expr):
        """`expr` with the learned replacements and divisibilities applied."""
        expr = self.substitute(expr)
        if self.divisible and expr.has(sympy.Mod, sympy.floor):
            known = self.divisible

            def mod(a, b):
                return sympy.Integer(0) if (a, b) in known else sympy.Mod(a, b)

            def floor(a):
                num, den = sympy.fraction(sympy.together(a))
                return a if (num, den) in known else sympy.floor(a)

            expr = expr.replace(sympy.Mod, mod).replace(sympy.floor, floor)
        return expr

    def hint(self, expr):
        """The value of `expr` on the hints."""
        value = sympy.sympify(expr).xreplace(
            {k: sympy.Integer(v) for k, v in self.var_to_val.items()}
        )
        if isinstance(value, sympy.logic.boolalg.BooleanAtom):
            return bool(value)
        return int(value) if value.is_Integer else value

    def static_value(self, fact):
        """True/False when `fact` follows from the replacements and the ranges, else None."""
        fact = self.simplify(fact)
        if isinstance(fact, sympy.logic.boolalg.BooleanAtom):
            return bool(fact)
        if not isinstance(fact, sympy.core.relational.Relational):
            return None
        size_symbols = fact.free_symbols
        fact = fact.replace(sympy.Mod, _bounded_mod)  # 0 <= Mod(e, k) <= k - 1 for integer k > 0
        if isinstance(fact, sympy.logic.boolalg.BooleanAtom):
            return bool(fact)
        shifted = {
            s: sympy.Dummy(nonnegative=True, integer=True) + MIN_SYMBOL_VALUE for s in size_symbols
        }
        diff = sympy.expand((fact.lhs - fact.rhs).xreplace(shifted))
        sign = (
            diff.is_positive,
            diff.is_nonnegative,
            diff.is_zero,
            diff.is_negative,
            diff.is_nonpositive,
        )
        pos, nonneg, zero, neg, nonpos = sign
        table = {
            sympy.Eq: True if zero else (False if (pos or neg) else None),
            sympy.Ne: False if zero else (True if (pos or neg) else None),
            sympy.Gt: True if pos else (False if nonpos else None),
            sympy.Ge: True if nonneg else (False if neg else None),
            sympy.Lt: True if neg else (False if nonneg else None),
            sympy.Le: True if nonpos else (False if pos else None),
        }
        return table.get(type(fact))

    def evaluate(self, fact):
        """The truth of `fact` on the hints; records it as a guard unless it is static."""
        fact = sympy.sympify(fact)
        static = self.static_value(fact)
        if static is not None:
            return static
        value = bool(self.hint(fact))
        fact = self.simplify(fact)
        recorded = fact if value else sympy.Not(fact)
        self.guards.append(recorded)
        self._learn(recorded)
        return value

    def specialize(self, expr):
        """The hint of `expr` as an int, recording `Eq(expr, hint)`."""
        expr = self.simplify(expr)
        value = self.hint(expr)
        if not expr.is_Integer:
            self.evaluate(sympy.Eq(expr, value))
        return int(value)

    def _learn(self, fact):
        """Turn an equality fact into a replacement or a divisibility."""
        if not isinstance(fact, sympy.Eq):
            return
        lhs, rhs = fact.lhs, fact.rhs
        if rhs == 0 and isinstance(lhs, sympy.Mod) and lhs.args[1].is_Integer:
            self.divisible.add((lhs.args[0], lhs.args[1]))
            return
        diff = sympy.expand(lhs - rhs)
        for sym in sorted(diff.free_symbols, key=lambda s: -int(s.name[1:])):
            coeff = diff.coeff(sym)
            rest = sympy.expand(diff - coeff * sym)
            if coeff in (1, -1) and sym not in rest.free_symbols and not diff.has(sympy.Mod):
                value = sympy.expand(-rest / coeff)
                self.replacements = {
                    k: v.xreplace({sym: value}) for k, v in self.replacements.items()
                }
                self.replacements[sym] = value
                return

    # -- guards -------------------------------------------------------------------------------
    def guard_facts(self):
        """The facts the guard checks, simplified and deduplicated (sympy booleans)."""
        facts = []
        for sym in self.var_to_val:
            value = self.replacements.get(sym)
            if value is not None:
                facts.append(sympy.Eq(sym, value, evaluate=False))
            if value is None or not value.is_Number:  # a replaced symbol keeps its range
                facts.append(sympy.Ge(sym, MIN_SYMBOL_VALUE, evaluate=False))
        for g in self.guards:
            g = self.substitute(g)
            if g is sympy.true:
                continue
            if g not in facts:
                facts.append(g)
        return facts

    def guard_texts(self):
        """The guards as readable text over the sources, one per fact."""
        return [self.render(f) for f in self.guard_facts()]

    def guard_expr(self):
        """All shape guards as one Python boolean expression over the sources ("True" if none)."""
        texts = self.guard_texts()
        return " and ".join(f"({t})" for t in texts) if texts else "True"

    def render(self, expr):
        """`expr` as Python source over the sources of its symbols."""
        return _render(sympy.sympify(expr), self.var_to_source)

    def format_symbols(self):
        """One line per symbol: name, hint, source, replacement."""
        lines = []
        for sym, hint in self.var_to_val.items():
            repl = self.replacements.get(sym)
            extra = f" = {repl}" if repl is not None else ""
            lines.append(f"{sym} (hint {hint}) from {self.var_to_source[sym]}{extra}")
        return "\n".join(lines)


def _bounded_mod(a, b):
    """Mod(a, b) as a fresh nonnegative value at most b - 1 (for static range reasoning only)."""
    if b.is_Integer and b > 0:
        return sympy.Integer(int(b) - 1) - sympy.Dummy(nonnegative=True, integer=True)
    return sympy.Mod(a, b)


_REL_OPS = {
    sympy.Eq: "==",
    sympy.Ne: "!=",
    sympy.Gt: ">",
    sympy.Ge: ">=",
    sympy.Lt: "<",
    sympy.Le: "<=",
}


def _render(expr, sources):
    """Python source text for a sympy size expression or fact (fully parenthesised)."""
    r = lambda e: _render(e, sources)
    if isinstance(expr, sympy.Symbol):
        return sources[expr]
    if expr is sympy.true or expr is sympy.false:
        return str(bool(expr))
    if expr.is_Integer:
        return str(int(expr))
    if expr.is_Rational:
        raise ValueError(f"cannot render non-integer {expr}")
    if type(expr) in _REL_OPS:
        return f"{r(expr.lhs)} {_REL_OPS[type(expr)]} {r(expr.rhs)}"
    if isinstance(expr, sympy.Not):
        return f"not ({r(expr.args[0])})"
    if isinstance(expr, sympy.And):
        return " and ".join(f"({r(a)})" for a in expr.args)
    if isinstance(expr, sympy.Or):
        return " or ".join(f"({r(a)})" for a in expr.args)
    if isinstance(expr, sympy.Add):
        return "(" + " + ".join(r(a) for a in expr.args) + ")"
    if isinstance(expr, sympy.Mul):
        num, den = sympy.fraction(expr)
        if den != 1:  # exact division (a recorded divisibility made it so)
            return f"({r(num)} // {r(den)})"
        return "(" + " * ".join(r(a) for a in expr.args) + ")"
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and expr.exp > 0:
        return f"({r(expr.base)} ** {int(expr.exp)})"
    if isinstance(expr, sympy.floor):
        num, den = sympy.fraction(sympy.together(expr.args[0]))
        return f"({r(num)} // {r(den)})"
    if isinstance(expr, sympy.Mod):
        return f"({r(expr.args[0])} % {r(expr.args[1])})"
    if isinstance(expr, sympy.Max | sympy.Min):
        name = "max" if isinstance(expr, sympy.Max) else "min"
        return f"{name}(" + ", ".join(r(a) for a in expr.args) + ")"
    raise ValueError(f"cannot render {expr!r}")


def _expr(value):
    """The sympy expr of an int or a SymNode."""
    if isinstance(value, SymNode):
        return value.expr
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"not a size: {value!r}")
    return sympy.Integer(value)


def _binary(fn, pyfn):
    """A SymNode operator computing `fn` on exprs (`pyfn` on a specialised value with a float)."""

    def op(self, other):
        if isinstance(other, float):  # a float result is no size: specialise
            return pyfn(int(self), other)
        if not isinstance(other, SymNode | int) or isinstance(other, bool):
            return NotImplemented
        return self.env.wrap(fn(self.expr, _expr(other)))

    def rop(self, other):
        if isinstance(other, float):
            return pyfn(other, int(self))
        if not isinstance(other, SymNode | int) or isinstance(other, bool):
            return NotImplemented
        return self.env.wrap(fn(_expr(other), self.expr))

    return op, rop


def _compare(rel):
    """A SymNode comparison: evaluated on the hints and recorded as a guard."""

    def op(self, other):
        if not isinstance(other, SymNode | int) or isinstance(other, bool):
            return NotImplemented
        return self.env.evaluate(rel(self.expr, _expr(other)))

    return op


class SymNode:
    """A symbolic size in traced code: a sympy expr over size symbols, bound to its ShapeEnv."""

    __slots__ = ("expr", "env")

    def __init__(self, expr, env):
        self.expr = expr
        self.env = env

    __add__, __radd__ = _binary(operator.add, operator.add)
    __sub__, __rsub__ = _binary(operator.sub, operator.sub)
    __mul__, __rmul__ = _binary(operator.mul, operator.mul)
    __floordiv__, __rfloordiv__ = _binary(lambda a, b: sympy.floor(a / b), operator.floordiv)
    __mod__, __rmod__ = _binary(sympy.Mod, operator.mod)
    __eq__ = _compare(sympy.Eq)
    __ne__ = _compare(sympy.Ne)
    __lt__ = _compare(sympy.Lt)
    __le__ = _compare(sympy.Le)
    __gt__ = _compare(sympy.Gt)
    __ge__ = _compare(sympy.Ge)
    __hash__ = None  # like torch.SymInt: unhashable (hashing would silently specialise)

    def __neg__(self):
        return self.env.wrap(-self.expr)

    def __pos__(self):
        return self

    def __truediv__(self, other):
        """True division leaves sizes: specialise (a float result of a size is rare)."""
        return int(self) / (int(other) if isinstance(other, SymNode) else other)

    def __rtruediv__(self, other):
        return other / int(self)

    def __bool__(self):
        return self.env.evaluate(sympy.Ne(self.expr, 0))

    def __pow__(self, other):
        if isinstance(other, int) and not isinstance(other, bool) and other >= 0:
            return self.env.wrap(self.expr**other)
        return int(self) ** (int(other) if isinstance(other, SymNode) else other)

    def __int__(self):
        return self.env.specialize(self.expr)

    def __float__(self):
        return float(int(self))

    __index__ = __int__

    @property
    def hint(self):
        """The value on the hints (no guard)."""
        return self.env.hint(self.expr)

    def __repr__(self):
        return str(self.expr)


def sym_max(a, b):
    """max of two sizes without a guard."""
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    env = (a if isinstance(a, SymNode) else b).env
    return env.wrap(sympy.Max(_expr(a), _expr(b)))


def sym_min(a, b):
    """min of two sizes without a guard."""
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    env = (a if isinstance(a, SymNode) else b).env
    return env.wrap(sympy.Min(_expr(a), _expr(b)))


def is_symbolic(value):
    """Whether `value` is a symbolic size."""
    return isinstance(value, SymNode)


def hint_of(value):
    """The concrete value of an int or SymNode (no guard)."""
    return value.hint if isinstance(value, SymNode) else value


def contiguous_strides(sizes):
    """Row-major strides for `sizes` (ints or SymNodes), as torch computes them."""
    strides = []
    acc = 1
    for s in reversed(sizes):
        strides.append(acc)
        acc = acc * (s if isinstance(s, SymNode) else max(s, 1))
    return tuple(reversed(strides))


# ---------------------------------------------------------------------------------------------
# Which dimensions are dynamic


def mark_dynamic(t, dim):
    """Mark dimension(s) of tensor `t` dynamic for the next compilation."""
    dims = [dim] if isinstance(dim, int) else list(dim)
    marked = set(getattr(t, "_kiln_dynamic_dims", ()))
    marked.update(d % t.dim() for d in dims)
    t._kiln_dynamic_dims = marked


def mark_static(t, dim):
    """Mark dimension(s) of tensor `t` static (never made dynamic)."""
    dims = [dim] if isinstance(dim, int) else list(dim)
    marked = set(getattr(t, "_kiln_static_dims", ()))
    marked.update(d % t.dim() for d in dims)
    t._kiln_static_dims = marked


def changed_dims(old_shapes, new_shapes):
    """The automatic-dynamic policy: `{source: {dim}}` of dims whose size changed (not to/from 0/1).

    A source whose rank changed, or that is new, gets no dims (it recompiles static).
    """
    out = {}
    for source, new in new_shapes.items():
        old = old_shapes.get(source)
        if old is None or len(old) != len(new):
            continue
        dims = {
            d
            for d, (a, b) in enumerate(zip(old, new))
            if a != b and a is not None and a >= MIN_SYMBOL_VALUE and b >= MIN_SYMBOL_VALUE
        }
        if dims:
            out[source] = dims
    return out


class FrameShapes:
    """Per-frame automatic-dynamic state: last sizes seen and the dims already made dynamic."""

    def __init__(self):
        self.sizes = {}  # source -> tuple of last sizes
        self.dynamic = {}  # source -> set of dims made dynamic

    def update(self, new_shapes):
        """Record one call's shapes; returns `{source: {dim}}` newly made dynamic (for logs)."""
        newly = {}
        for source, dims in changed_dims(self.sizes, new_shapes).items():
            fresh = dims - self.dynamic.get(source, set())
            if fresh:
                newly[source] = fresh
                self.dynamic.setdefault(source, set()).update(fresh)
                for d in sorted(fresh):
                    old, new = self.sizes[source][d], new_shapes[source][d]
                    logs.log("recompiles", f"{source} dim {d} became dynamic: size {old} -> {new}")
        self.sizes.update({s: tuple(v) for s, v in new_shapes.items()})
        return newly

    def dynamic_dims(self, source, t, dynamic=None):
        """The dims of tensor `t` (at `source`) to trace symbolically under `dynamic=` (torch's)."""
        static = getattr(t, "_kiln_static_dims", set())
        if dynamic is False:
            return set()
        if dynamic is True:
            dims = set(range(t.dim()))
        else:
            dims = set(self.dynamic.get(source, ())) | set(getattr(t, "_kiln_dynamic_dims", ()))
        return {d for d in dims if d not in static}
