"""Inner-loop pieces: the innermost loop cut where its index math would make gcc gather.

# Note [Codegen: inner-loop pieces]
A cat along the innermost dimension, or a view that splits it (the q/k/v gradients of an attention
block written into one (T, 3*H*D) buffer), indexes its inputs with the inner loop variable under
`//`, `%` and a clamp: `buf[32*((384*o0 + o1) / 32 % 4) + (384*o0 + o1) % 32]`. gcc vectorizes
that loop with gathers. Two rewrites give plain vector loads again, and both only change the loop
structure, never a value:

    segments  the inner range is cut at the constants the loop variable is compared with
              (`o1 < 256` in cat): in each segment the comparisons are decided (the C++ handler
              folds them, and the `where` keeps one branch; gcc drops the dead loads);
    tiles     in a segment whose index still has the variable inside an atom, the variable is
              written `start + K*t + l` with l in [0, K): `(384*o0 + 32*t + l) / 32` is then
              `12*o0 + t` by the index algebra (ir.Ix), and l indexes contiguously.

K is the largest divisor of the segment length (at least MIN_TILE) that leaves l outside every
atom of the live indices (loads, index_expr and stores that reach a stored value). A probe handler
runs the kernel's nodes symbolically to find the cut points and the live indices.
"""

import re

from kiln.backend.ir import RANGES, Ix, set_handler, set_range

MIN_TILE = 8  # smallest inner tile worth a vector loop
MAX_SEGMENTS = 16  # more cut points than this: keep the plain loop


class Piece:
    """One loop over [start, start + length) of the inner variable; tiled by k when k is set."""

    __slots__ = ("start", "length", "k")

    def __init__(self, start, length, k=None):
        self.start, self.length, self.k = start, length, k

    def __repr__(self):
        return f"Piece({self.start}, {self.length}, k={self.k})"


def tile_names(var):
    """The tile and lane variables that replace `var` in a tiled piece."""
    return f"{var}_t", f"{var}_l"


def piece_subst(var, p):
    """({var: index expression}, {variable: (lo, hi)}) of a piece.

    The ranges are set again after each node's index variables are made (that resets the
    loop variables to their whole ranges)."""
    if p.k is None:
        return {}, {var: (p.start, p.start + p.length - 1)}
    t, lane = tile_names(var)
    ranges = {t: (0, p.length // p.k - 1), lane: (0, p.k - 1)}
    return {var: Ix.var(t) * p.k + Ix.var(lane) + p.start}, ranges


def set_ranges(ranges):
    for v, (lo, hi) in ranges.items():
        set_range(v, lo, hi)


def substitute(ix, subst):
    """ix with each variable in subst replaced by its expression."""
    if not subst or not isinstance(ix, Ix) or not (set(ix.terms) & set(subst)):
        return ix
    out = Ix({s: c for s, c in ix.terms.items() if s not in subst}, ix.const)
    for s, e in subst.items():
        c = ix.terms.get(s)
        if c is not None:
            out = out + e * c
    return out


def in_atom(ix, sym):
    """Whether variable sym occurs inside an atom of ix, e.g. r0 in ((r0) % 128)."""
    pat = re.compile(rf"\b{sym}\b")
    return any(k != sym and pat.search(k) for k in ix.terms)


class _Val:
    """A probed value: the uses (index expressions) it depends on, and what is known of it."""

    __slots__ = ("deps", "ix", "const", "truth")

    def __init__(self, deps=frozenset(), ix=None, const=None, truth=None):
        self.deps, self.ix, self.const, self.truth = deps, ix, const, truth

    def __str__(self):
        return "v"


_CMP = {
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
}
_CUT = {"lt": 0, "ge": 0, "le": 1, "gt": 1}  # v < c cuts at c, v <= c at c + 1


def decide(op, ix, c):
    """True/False when comparison `ix <op> c` holds for every/no value of ix's range, else None."""
    if op not in _CMP or type(c) is not int:
        return None
    lo, hi = ix.bounds()
    if type(lo) is not int or type(hi) is not int:
        return None
    f = _CMP[op]
    if f(lo, c) and f(hi, c):
        return True
    if not f(lo, c) and not f(hi, c):
        return False
    return None


class ProbeHandler:
    """Runs inner_fns symbolically: the index uses that reach each value, and cut points of var."""

    def __init__(self, var):
        self.var = var
        self.uses = []  # Ix of loads, index_exprs
        self.cuts = set()
        self.indirect = {}  # indirect symbol -> deps of its value

    def _use(self, ix):
        self.uses.append(ix)
        deps = {len(self.uses) - 1}
        for s in ix.terms:
            deps |= self.indirect.get(s, set())
        return frozenset(deps)

    def load(self, name, index):
        return _Val(self._use(index))

    def index_expr(self, index, dtype):
        return _Val(self._use(index), ix=index)

    def constant(self, value, dtype):
        return _Val(const=value)

    def indirect_indexing(self, value, size, wrap=True):
        sym = f"pix{len(self.indirect)}"
        set_range(sym, 0, size - 1 if type(size) is int else size)
        self.indirect[sym] = set(value.deps)
        return Ix.var(sym)

    def _compare(self, op, a, b):
        if isinstance(a, _Val) and isinstance(b, _Val) and a.ix is not None:
            c = b.const
            if type(c) is int and set(a.ix.terms) == {self.var} and a.ix.terms[self.var] == 1:
                self.cuts.add(c - a.ix.const + _CUT[op])
            t = decide(op, a.ix, c)
            if t is not None:
                return _Val(truth=t)
        return _Val(_deps(a, b))

    def where(self, c, a, b):
        if c.truth is True:
            return a
        if c.truth is False:
            return b
        return _Val(_deps(c, a, b))

    def logical_and(self, a, b):
        if a.truth is False or b.truth is False:
            return _Val(truth=False)
        if a.truth is True:
            return b
        if b.truth is True:
            return a
        return _Val(_deps(a, b))

    def logical_or(self, a, b):
        if a.truth is True or b.truth is True:
            return _Val(truth=True)
        if a.truth is False:
            return b
        if b.truth is False:
            return a
        return _Val(_deps(a, b))

    def __getattr__(self, name):
        if name in _CMP:
            return lambda a, b: self._compare(name, a, b)
        return lambda *args, **kw: _Val(_deps(*args))


def _deps(*args):
    out = frozenset()
    for a in args:
        if isinstance(a, _Val):
            out |= a.deps
    return out


def _probe(run, var, subst, ranges):
    """(live index uses, cut points) of the kernel's nodes under a substitution of var."""
    h = ProbeHandler(var)
    live = []
    with set_handler(h):
        for value, store_ix in run(subst, ranges):
            if isinstance(value, _Val):
                live += [h.uses[i] for i in value.deps]
            if store_ix is not None:
                live.append(store_ix)
    return live, h.cuts


def plan_pieces(run, var, size):
    """The pieces of the inner loop over var in [0, size), or None for the plain loop.

    `run(subst, ranges)` runs the kernel's nodes under the current handler with var substituted
    (and the ranges set) and yields (value, store index or None) per node."""
    if type(size) is not int or size < 2 * MIN_TILE:
        return None
    saved = RANGES.get(var)
    try:  # the whole range: the cut points, and whether any index needs a piece
        live, cuts = _probe(run, var, {}, {var: (0, size - 1)})
        cuts = sorted(c for c in cuts if 0 < c < size)
        if not cuts and not any(in_atom(ix, var) for ix in live):
            return None
        if len(cuts) >= MAX_SEGMENTS:
            return None
        bounds = [0, *cuts, size]
        pieces = []
        for a, b in zip(bounds, bounds[1:]):
            pieces.append(_tile(run, var, Piece(a, b - a)))
        if len(pieces) == 1 and pieces[0].k is None:
            return None
        return pieces
    finally:
        if saved is None:
            RANGES.pop(var, None)
        else:
            RANGES[var] = saved


def _tile(run, var, p):
    """p with the largest tile that takes var out of every live atom (or untiled)."""
    live, _ = _probe(run, var, *piece_subst(var, p))
    if not any(in_atom(ix, var) for ix in live):
        return p
    _, lane = tile_names(var)
    for k in sorted((d for d in range(MIN_TILE, p.length) if p.length % d == 0), reverse=True):
        q = Piece(p.start, p.length, k)
        live, _ = _probe(run, var, *piece_subst(var, q))
        if not any(in_atom(ix, lane) for ix in live):
            return q
    return p
