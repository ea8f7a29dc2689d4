"""Symbolic sizes: sympy size symbols with hints, shape guards from facts (`SymNode` is in sym_node.py).

`ShapeEnv` makes dynamic dimensions into sympy symbols `s0, s1, ...` with concrete hints; `SymNode`
is the Python value of a symbolic size in traced code. The frontend's static view and its
automatic-dynamic policy are in `kiln.frontend.frame_shapes`.
"""

import sympy

from kiln import config, logs
from kiln.exc import DataDependentError
from kiln.symbolic import marked_dims, unbacked_facts
from kiln.symbolic.sym_node import (  # noqa: F401  (re-exported: callers import them from here)
    SymNode,
    contiguous_strides,
    exact_floats,
    from_torch,
    hint_of,
    is_symbolic,
    sym_max,
    sym_min,
    to_torch,
)

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
# `Mod(e, k) == 0` makes `Mod(e, k)` zero and `e // k` exact. Every size symbol is >= 2 (sizes 0 and 1
# are specialised to constants at creation, as torch users expect: a size-1 dimension broadcasts),
# so facts that follow from the ranges (`s0 > 1`, `s0 != 1`, `s0*s1 > 0`) are static: `evaluate`
# returns them with no guard, and only the range guard `source >= 2` stays in the guard expression.

# Note [Shapes: unbacked scalars]
# Under config.capture_scalar_outputs, `t.item()` stays in the graph (torch.compile: an unbacked
# SymInt/SymFloat from aten._local_scalar_dense). Its value is a symbol `u<n>` with no hint and no
# source: arithmetic and `max/min` on it stay symbolic, facts about it that follow statically
# (`Max(u0, 1024) >= 0`) are answered, and any other question (a branch, `int()`, a guard) cannot
# be answered on a hint nor guarded on the inputs: `hint()` raises DataDependentError (an
# Unsupported), a graph break.
# Unbacked symbols are not size symbols: `_static_value` does not assume them >= 2. kiln's AOT
# refuses graphs with `.item()` (aten._local_scalar_dense): the backend then runs them as traced.

# Note [Shapes: unspecialised ints]
# An int input made dynamic (an argument or closure cell whose value changed, or an int argument
# under dynamic=True) is not a size: it may be 0, 1 or negative, as torch.compile's unspecialised
# SymInt may. `create_int` makes it a symbol of `int_symbols`: no range guard, no 0/1
# specialisation, never merged with a tensor size; `_static_value` assumes nothing about its
# range, so every question about it (`n > 0`, `Eq(n, 1)` when it meets a broadcast, `n < size`
# in a slice rule) is answered on the hint and recorded as a guard. A user backend receives it
# as a SymInt placeholder. kiln's own AOT backend and codegen assume every symbol >= 2
# (sizes.py's signs, the view lowerings): `narrow_ints` turns each int symbol into a size first,
# with a guard `n >= 2`, or specialises it when its value is below 2. So kiln's backend compiles
# more often than a user backend (a graph for each of 0, 1, negative values), never wrongly.

# Note [Shapes: wiring]
# Frontend: one ShapeEnv per frame compilation; a tensor input's sizes are
# `env.sizes_of(example, source_name, frame_shapes.dynamic_dims(source_name, t, dynamic))`;
# the check function ANDs `env.guard_expr()` (TENSOR_MATCH then checks dtype/device/rank and the
# static dims only). Tracer: `kiln.symbolic.layouts.propagate` gives each node's symbolic sizes
# (and strides); ops without a rule specialise. Backends take the free symbols of the graph as
# extra size arguments, computed from the inputs by the wrapper.


# ---------------------------------------------------------------------------------------------
# Symbolic sizes


MIN_SYMBOL_VALUE = 2  # sizes 0 and 1 are specialised, so every size symbol is >= 2
UNBACKED_HINT = 8192  # what meta tensors take for a size read from tensor data (as torch does)


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
        self.guard_counts = {}  # Symbol -> recorded facts naming it (Note [Shapes: a limit ...])
        self.unbacked = set()  # symbols of values read from tensor data: no hint, never guarded
        self._static = {}  # fact -> static_value (cleared when a fact is learned)
        self.reason = None  # what is being traced (e.g. an ATen op), for guard_reasons and logs
        self.guard_reasons = []  # per recorded guard: self.reason when it was recorded
        self.axioms = set()  # facts on unbacked symbols asserted at run time (torch._check)
        self.int_symbols = set()  # unspecialised int inputs: any int, not >= 2 (Note below)
        self.marked = {}  # Symbol -> (min, max) of a dim the user marked dynamic (marked_dims)

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

    def create_int(self, hint, source):
        """A SymNode for an int input made dynamic (Note [Shapes: unspecialised ints])."""
        hint = int(hint)
        if source in self.source_to_var:
            return self.wrap(self.source_to_var[source])
        sym = sympy.Symbol(f"s{len(self.var_to_val)}", integer=True)
        self.var_to_val[sym] = hint
        self.var_to_source[sym] = source
        self.source_to_var[source] = sym
        self.int_symbols.add(sym)
        self._static = {}
        return SymNode(sym, self)

    def create_unbacked(self, kind):
        """A SymNode for a value read from tensor data (`.item()`): no hint, so any fact about it
        that does not follow statically is a graph break (Note [Shapes: unbacked scalars])."""
        name = f"u{len(self.unbacked)}"
        sym = sympy.Symbol(name, integer=True) if kind == "int" else sympy.Symbol(name, real=True)
        self.unbacked.add(sym)
        return SymNode(sym, self, kind)

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
        expr = sympy.sympify(expr)
        if self.unbacked and expr.free_symbols & self.unbacked:
            raise DataDependentError(
                f"data-dependent: {expr} needs a value read from tensor data (`.item()`)"
            )
        values = self.var_to_val
        value = expr.xreplace(
            {k: sympy.Integer(values[k]) for k in expr.free_symbols if k in values}
        )
        if isinstance(value, sympy.logic.boolalg.BooleanAtom):
            return bool(value)
        return int(value) if value.is_Integer else value

    def fallback_hint(self, expr):
        """A stand-in value of an expr over unbacked symbols, for meta tensors' sizes only
        (never for a decision: those go through `hint`, which refuses)."""
        expr = sympy.sympify(expr).xreplace({u: UNBACKED_HINT for u in self.unbacked})
        return self.hint(expr)

    def static_value(self, fact):
        """True/False when `fact` follows from the replacements and the ranges, else None."""
        try:
            return self._static[fact]
        except (KeyError, TypeError):
            pass
        value = self._static_value(fact)
        self._static[fact] = value
        return value

    def assume(self, fact):
        """Record a fact on unbacked symbols that a run-time assertion checks (Note [Shapes:
        checked facts on unbacked symbols])."""
        self.axioms.add(self.simplify(sympy.sympify(fact)))
        self._static = {}

    def _static_value(self, fact):
        fact = self.simplify(fact)
        if isinstance(fact, sympy.logic.boolalg.BooleanAtom):
            return bool(fact)
        if self.axioms and fact.free_symbols & self.unbacked:
            known = unbacked_facts.decide(self.axioms, fact)
            if known is not None:
                return known
        if not isinstance(fact, sympy.core.relational.Relational):
            return None
        size_symbols = fact.free_symbols - self.unbacked - self.int_symbols
        sign = _linear_sign(fact.lhs, fact.rhs, size_symbols)
        if sign is None:
            fact = fact.replace(sympy.Mod, _bounded_mod)  # 0 <= Mod(e, k) <= k - 1, integer k > 0
            if isinstance(fact, sympy.logic.boolalg.BooleanAtom):
                return bool(fact)
            shifted = {
                s: sympy.Dummy(nonnegative=True, integer=True) + MIN_SYMBOL_VALUE
                for s in size_symbols
            }
            diff = sympy.expand((fact.lhs - fact.rhs).xreplace(shifted))
            sign = _sum_sign(diff) or (
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
        self.guard_reasons.append(self.reason)
        self._learn(recorded)
        self._count_guards(fact)
        return value

    def _count_guards(self, fact):
        """Note [Shapes: a limit on guards per symbol]
        With config.symbol_guard_limit_before_specialize = n (torch's ShapeEnv setting of that
        name), a symbol that more than n recorded facts mention is specialised to its hint
        (`Eq(s, hint)`): one guard instead of many, at the price of a recompile per value."""
        limit = config.symbol_guard_limit_before_specialize
        if limit is None:
            return
        for sym in sorted(fact.free_symbols, key=str):
            if sym not in self.var_to_val or sym in self.replacements:
                continue
            self.guard_counts[sym] = self.guard_counts.get(sym, 0) + 1
            if self.guard_counts[sym] > limit:
                self.specialize(sym)

    def specialize(self, expr):
        """The hint of `expr` as an int, recording `Eq(expr, hint)`."""
        expr = self.simplify(expr)
        value = self.hint(expr)
        if not expr.is_Integer:
            if logs.enabled("recompiles"):
                why = self.reason or "an int() of the size"
                logs.log("recompiles", f"specialised size {expr} to {value} by {why}")
            self.evaluate(sympy.Eq(expr, value))
        return int(value)

    def narrow_ints(self):
        """Make every unspecialised int symbol a size symbol for a consumer that assumes every
        symbol >= 2 (kiln's AOT and codegen): a guard `n >= 2`, or its value when below 2."""
        for sym in sorted(self.int_symbols, key=lambda s: int(s.name[1:])):
            if sym in self.replacements:
                continue
            if self.var_to_val[sym] >= MIN_SYMBOL_VALUE:
                self.evaluate(sympy.Ge(sym, MIN_SYMBOL_VALUE))
            else:
                self.specialize(sym)
        self.int_symbols.clear()
        self._static = {}

    # -- what the traced program relied on (for the frontend's guards and for logs) -----------
    def mark(self):
        """A position in the recorded facts (see facts_since)."""
        return len(self.guards)

    def facts_since(self, mark):
        """(fact, reason) pairs recorded after `mark`, e.g. by a backend's AOT trace."""
        return list(zip(self.guards[mark:], self.guard_reasons[mark:]))

    def specialised(self):
        """{symbol: value} of the symbols pinned to a constant (0/1 sizes and specialisations)."""
        return {s: int(v) for s, v in self.replacements.items() if v.is_Integer}

    def _learn(self, fact):
        """Turn an equality fact into a replacement or a divisibility."""
        if not isinstance(fact, sympy.Eq):
            return
        self._static = {}
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
            if sym in self.int_symbols:
                continue  # any int (Note [Shapes: unspecialised ints])
            if value is None or not value.is_Number:  # a replaced symbol keeps its range
                facts.append(sympy.Ge(sym, MIN_SYMBOL_VALUE, evaluate=False))
        facts.extend(marked_dims.range_facts(self))
        seen = set(facts)  # (a set: thousands of facts compared pairwise took seconds)
        for g in self.guards:
            g = self.substitute(g)
            if g is sympy.true:
                continue
            if g not in seen:
                seen.add(g)
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


# Note [Shapes: signs of sums of sizes]
# _static_value asks sympy for the sign of `lhs - rhs` over nonnegative integer dummies (each
# size symbol shifted by its minimum). Most facts are a size against a constant or two sizes
# against each other: a constant plus dummies with coefficients +1/-1. Their sign is read
# off directly: with only +1 terms the values are every integer from the constant up, with only
# -1 terms every integer from the constant down, with both every integer. Sympy's assumption
# queries answer the same (checked on random sums) but take milliseconds each, which made
# `x in d` over a deque of hundreds of size-symbol ints take tens of seconds to trace.


def _linear_sign(lhs, rhs, size_symbols):
    """The signs of `lhs - rhs` (as _sum_sign) when both sides are sums of a constant and +-1
    times size symbols (each at least MIN_SYMBOL_VALUE), without building the difference."""
    coeffs = {}
    for side, factor in ((lhs, 1), (rhs, -1)):
        for term, coeff in sympy.sympify(side).as_coefficients_dict().items():
            coeffs[term] = coeffs.get(term, 0) + factor * coeff
    const = coeffs.pop(sympy.S.One, sympy.S.Zero)
    signs = set()
    for term, coeff in coeffs.items():
        if coeff == 0:
            continue
        if term not in size_symbols or coeff not in (1, -1):
            return None
        signs.add(int(coeff))
        const += coeff * MIN_SYMBOL_VALUE
    return _sign_of(const, signs)


def _sum_sign(diff):
    """(positive, nonnegative, zero, negative, nonpositive) of a constant plus +-1 times
    nonnegative integer dummies (None where undecided); None for any other expression."""
    const, signs = sympy.S.Zero, set()
    for term, coeff in diff.as_coefficients_dict().items():
        if term is sympy.S.One:
            const = coeff
        elif (
            isinstance(term, sympy.Dummy)
            and coeff in (1, -1)
            and term.is_nonnegative
            and term.is_integer
        ):
            signs.add(int(coeff))
        else:
            return None
    return _sign_of(const, signs)


def _sign_of(const, signs):
    """The signs of `const` plus terms ranging over the nonnegative integers times the
    coefficients in `signs` (+1 and/or -1); None when `const` is no integer."""
    if not sympy.sympify(const).is_Integer:
        return None
    c = int(const)
    if not signs:
        return (c > 0, c >= 0, c == 0, c < 0, c <= 0)
    if signs == {1}:  # c, c + 1, c + 2, ...
        up = (c > 0 or None, c >= 0 or None)
        return (*up, False if c > 0 else None, False if c >= 0 else None, False if c > 0 else None)
    if signs == {-1}:  # c, c - 1, c - 2, ...
        down = (c < 0 or None, c <= 0 or None)
        return (
            False if c <= 0 else None,
            False if c < 0 else None,
            False if c < 0 else None,
            *down,
        )
    return (None,) * 5


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
