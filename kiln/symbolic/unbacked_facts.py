"""Facts on values read from tensor data that `torch._check` asserted (Note [Shapes: checked
facts on unbacked symbols]).

Note [Shapes: checked facts on unbacked symbols]
`torch._check(u0 >= 0)` on an unbacked symbol (a `.item()` value) cannot be decided while
tracing. The frontend puts the check in the graph as a run-time assertion and records the fact
here (`ShapeEnv.assume`): later questions the fact answers (`if u0 >= 0:`, `u0 > -1`,
`u0 != -3`) are then static, with no guard (the assertion holds whenever the graph's result is
seen). Answered: the fact itself, its negation, and relations linear in one symbol from the
bounds the facts give it; anything else stays unknown.
"""

import sympy

_RELS = (sympy.Ge, sympy.Gt, sympy.Le, sympy.Lt, sympy.Eq, sympy.Ne)


def _linear(fact):
    """(symbol, a, c) with fact's `lhs - rhs` = a*symbol + c (a, c integers, a != 0), or None."""
    if not isinstance(fact, _RELS):
        return None
    diff = sympy.expand(fact.lhs - fact.rhs)
    syms = diff.free_symbols
    if len(syms) != 1:
        return None
    (sym,) = syms
    a, c = diff.coeff(sym), diff.subs(sym, 0)
    if not (a.is_Integer and c.is_Integer) or a == 0 or sympy.expand(a * sym + c - diff) != 0:
        return None
    return sym, int(a), int(c)


def _bounds(axioms, sym):
    """(lo, hi) of sym's integer values under the axioms (None: unbounded)."""
    lo = hi = None
    for fact in axioms:
        lin = _linear(fact)
        if lin is None or lin[0] != sym:
            continue
        _, a, c = lin
        # a*u + c REL 0 -> bounds on u (integers)
        kind = type(fact)
        if kind in (sympy.Le, sympy.Lt):
            a, c, kind = -a, -c, (sympy.Ge if kind is sympy.Le else sympy.Gt)
        if kind is sympy.Gt:
            c, kind = c - 1, sympy.Ge  # a*u + c > 0  <=>  a*u + c - 1 >= 0
        if kind is sympy.Ge:
            if a > 0:
                low = -(c // a)  # u >= ceil(-c / a)
                lo = low if lo is None else max(lo, low)
            else:
                high = c // -a  # u <= floor(c / -a)
                hi = high if hi is None else min(hi, high)
        elif kind is sympy.Eq and c % a == 0:
            v = -c // a
            lo = v if lo is None else max(lo, v)
            hi = v if hi is None else min(hi, v)
    return lo, hi


def decide(axioms, fact):
    """True/False when the asserted facts decide `fact`, else None."""
    if fact in axioms:
        return True
    negated = getattr(fact, "negated", None)
    if negated is not None and negated in axioms:
        return False
    lin = _linear(fact)
    if lin is None:
        return None
    sym, a, c = lin
    lo, hi = _bounds(axioms, sym)
    # the range of e = a*u + c
    ends = [None if b is None else a * b + c for b in (lo, hi)]
    emin, emax = (ends[0], ends[1]) if a > 0 else (ends[1], ends[0])
    kind = type(fact)
    if kind is sympy.Ge:
        return (
            True
            if emin is not None and emin >= 0
            else (False if emax is not None and emax < 0 else None)
        )
    if kind is sympy.Gt:
        return (
            True
            if emin is not None and emin > 0
            else (False if emax is not None and emax <= 0 else None)
        )
    if kind is sympy.Le:
        return (
            True
            if emax is not None and emax <= 0
            else (False if emin is not None and emin > 0 else None)
        )
    if kind is sympy.Lt:
        return (
            True
            if emax is not None and emax < 0
            else (False if emin is not None and emin >= 0 else None)
        )
    outside = (emin is not None and emin > 0) or (emax is not None and emax < 0)
    if kind is sympy.Eq:
        return False if outside else (True if emin == emax == 0 else None)
    return True if outside else (False if emin == emax == 0 else None)
