"""Dimensions the user marked dynamic (kiln.mark_dynamic): their ranges, and the check that the
traced code did not specialise them (ConstraintViolation).

Note [Shapes: marked dims are a promise]
`kiln.mark_dynamic(t, d)` says: the compiled code must serve every size of dim d. A trace that
pins the size to one value (`if x.shape[0] == 3`, or `> 3` and `< 3` both false) made code for
one size only, so the compile raises ConstraintViolation naming the dim and the fact, as torch
raises ConstraintViolationError, instead of quietly compiling a specialised entry. With a range,
`mark_dynamic(t, d, min=, max=)`, the promise is stronger: the code must serve every size in the
range, so the size seen must lie in it, and every fact recorded about the dim alone must hold
for the whole range (`x.shape[0] != 3` does not for [2, 5]). The range is also a guard: a size
outside it does not run the entry. Facts over several symbols (`Eq(s0, s1)`) are allowed.
"""

import math

import sympy

from kiln.exc import ConstraintViolation

_FLIP = {sympy.Ge: sympy.Le, sympy.Gt: sympy.Lt, sympy.Le: sympy.Ge, sympy.Lt: sympy.Gt}


def mark(env, size, source, lo, hi):
    """Record that the traced size `size` (a SymNode) of `source` was marked dynamic by the user,
    with the range [lo, hi] (None: unbounded); a size outside the range raises at once."""
    sym = size.expr
    hint = env.var_to_val[sym]
    if (lo is not None and hint < lo) or (hi is not None and hint > hi):
        raise ConstraintViolation(
            f"{source}: marked dynamic in the range [{lo}, {hi}] (kiln.mark_dynamic), "
            f"but its size is {hint}, not in that range"
        )
    env.marked[sym] = (lo, hi)
    env._static = {}


def range_facts(env):
    """The guards of the marked ranges: `s >= lo`, `s <= hi` (beyond every size symbol's >= 2)."""
    out = []
    for sym, (lo, hi) in env.marked.items():
        if lo is not None and lo > 2:
            out.append(sympy.Ge(sym, lo, evaluate=False))
        if hi is not None:
            out.append(sympy.Le(sym, hi, evaluate=False))
    return out


def check(env):
    """Raise ConstraintViolation when the recorded facts specialise a marked dim, or (for a
    range) a fact about it does not hold for the whole range (Note [Shapes: marked dims are a
    promise])."""
    for sym, (lo, hi) in env.marked.items():
        source = env.var_to_source[sym]
        value = env.simplify(sym)
        if value.is_Integer:
            _violation(source, f"the traced code specialised it to {int(value)}", env, sym)
        facts = [(f, r) for f, r in zip(env.guards, env.guard_reasons) if f.free_symbols == {sym}]
        if lo is None and hi is None:
            low, high = _bounds(sym, [f for f, _ in facts], 2, math.inf)
            if low == high:
                _violation(source, f"the traced code specialised it to {low}", env, sym)
            continue
        low, high = max(lo or 2, 2), math.inf if hi is None else hi
        for fact, reason in facts:
            if not _holds_on(sym, fact, low, high):
                where = f" (by {reason})" if reason else ""
                _violation(
                    source,
                    f"the traced code relies on {env.render(fact)}{where}, which not every size "
                    f"in the range [{lo}, {hi}] satisfies",
                    env,
                    sym,
                )


def _violation(source, what, env, sym):
    raise ConstraintViolation(
        f"{source} was marked dynamic (kiln.mark_dynamic), but {what}: the compiled code would "
        f"not serve the other sizes. Remove the mark, or the code that depends on this size"
    )


def _linear(sym, fact):
    """(relation, c) when `fact` is `sym REL c` after solving a linear fact, else None."""
    if type(fact) not in (*_FLIP, sympy.Eq, sympy.Ne):
        return None
    diff = sympy.expand(fact.lhs - fact.rhs)
    a = diff.coeff(sym)
    b = sympy.expand(diff - a * sym)
    if not a.is_Number or a == 0 or b.free_symbols:
        return None
    rel = type(fact)
    if a < 0 and rel in _FLIP:
        rel = _FLIP[rel]
    return rel, -b / a


def _bounds(sym, facts, low, high):
    """The interval [low, high] of integers that the linear facts leave for `sym`."""
    for fact in facts:
        solved = _linear(sym, fact)
        if solved is None:
            continue
        rel, c = solved
        if rel is sympy.Eq and c.is_Integer:
            low, high = max(low, int(c)), min(high, int(c))
        elif rel is sympy.Ge:
            low = max(low, math.ceil(c))
        elif rel is sympy.Gt:
            low = max(low, math.floor(c) + 1)
        elif rel is sympy.Le:
            high = min(high, math.floor(c))
        elif rel is sympy.Lt:
            high = min(high, math.ceil(c) - 1)
    return low, high


def _holds_on(sym, fact, low, high):
    """Whether `fact` (over `sym` only) holds for every integer in [low, high]; a fact that is not
    linear holds only when checked on each value of a range of at most 4096 sizes."""
    solved = _linear(sym, fact)
    if solved is None:
        if high - low > 4096:
            return False
        return all(bool(fact.subs(sym, v)) for v in range(low, int(high) + 1))
    rel, c = solved
    if rel is sympy.Eq:
        return low == high == c
    if rel is sympy.Ne:
        return not (low <= c <= high)
    if rel in (sympy.Ge, sympy.Gt):
        return bool(rel(low, c))
    return high != math.inf and bool(rel(high, c))
