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

from kiln.backend.index_exprs import ranges
from kiln.backend.ir import Ix, set_handler, set_range

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
        return _logical(a, b, absorbing=False)

    def logical_or(self, a, b):
        return _logical(a, b, absorbing=True)

    def __getattr__(self, name):
        if name in _CMP:
            return lambda a, b: self._compare(name, a, b)
        return lambda *args, **kw: _Val(_deps(*args))


def _logical(a, b, absorbing):
    """and/or of two probe values: the absorbing truth decides, the other one drops out."""
    if a.truth is absorbing or b.truth is absorbing:
        return _Val(truth=absorbing)
    if a.truth is (not absorbing):
        return b
    if b.truth is (not absorbing):
        return a
    return _Val(_deps(a, b))


def _deps(*args):
    out = frozenset()
    for a in args:
        if isinstance(a, _Val):
            out |= a.deps
    return out


def _probe(run, var, subst, ranges, every=False):
    """(live index uses, cut points) of the kernel's nodes under a substitution of var; with
    every, all index uses (dead ones too)."""
    h = ProbeHandler(var)
    live = []
    with set_handler(h):
        for value, store_ix in run(subst, ranges):
            if isinstance(value, _Val) and not every:
                live += [h.uses[i] for i in value.deps]
            if store_ix is not None:
                live.append(store_ix)
    return (live + h.uses if every else live), h.cuts


def plan_pieces(run, var, size):
    """The pieces of the inner loop over var in [0, size), or None for the plain loop.

    `run(subst, ranges)` runs the kernel's nodes under the current handler with var substituted
    (and the ranges set) and yields (value, store index or None) per node."""
    if type(size) is not int or size < 2 * MIN_TILE:
        return None
    saved = ranges().get(var)
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
            ranges().pop(var, None)
        else:
            ranges()[var] = saved


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


class FlatLoops:
    """Loop nests of pointwise kernels other than the plain one (mixed into KernelWriter)."""

    def flat_pieces(self, var, pieces):
        """The innermost loop of a pointwise kernel as pieces (Note [Codegen: inner-loop pieces])."""
        body = self.code
        for p in pieces:
            self.subst, self.piece_ranges = piece_subst(var, p)
            if p.k is None:
                body.writeline("#pragma omp simd")
                end = p.start + p.length
                body.writeline(f"for (int64_t {var} = {p.start}; {var} < {end}; {var}++) {{")
                body.level += 1
            else:
                t, lane = tile_names(var)
                body.writeline(f"for (int64_t {t} = 0; {t} < {p.length // p.k}; {t}++) {{")
                body.writeline("    #pragma omp simd")
                body.writeline(f"    for (int64_t {lane} = 0; {lane} < {p.k}; {lane}++) {{")
                body.level += 2
            self.flat_body()
            for _ in range(1 if p.k is None else 2):
                body.level -= 1
                body.writeline("}")
        self.subst, self.piece_ranges = {}, {}

    def flat_body(self):
        self.scopes.append({})
        for _, nodes in self.g.segments:
            for n in nodes:
                self.store(n, "flat", self.run_node(n, "flat"))
        self.scopes.pop()
        self.locals = {k: v for k, v in self.locals.items() if not v[2]}


def merged_inner(run, sizes, prefix="r"):
    """({var: 0}, {var: range}) merging the innermost loops whose every index steps through
    them as one contiguous range (r1 of 16 and r2 of 16 with coefficients 16 and 1: one loop of
    256, fewer horizontal reductions), or None. The merged loop keeps the innermost variable."""
    n = len(sizes)
    if n < 2 or any(type(s) is not int or s < 1 for s in sizes):
        return None
    uses, _ = _probe(run, None, {}, {}, every=True)
    last = f"{prefix}{n - 1}"
    if any(in_atom(ix, f"{prefix}{d}") for ix in uses for d in range(n)):
        return None
    span, first = sizes[-1], n - 1
    for d in range(n - 2, -1, -1):
        v = f"{prefix}{d}"
        if any(ix.terms.get(v, 0) != span * ix.terms.get(last, 0) for ix in uses):
            break
        span *= sizes[d]
        first = d
    if first == n - 1:
        return None
    # views rebuild their index from the merged variable: it must come out of atoms again
    subst = {f"{prefix}{d}": Ix() for d in range(first, n - 1)}
    uses, _ = _probe(run, None, subst, {last: (0, span - 1)}, every=True)
    if any(in_atom(ix, last) for ix in uses):
        return None
    return first, span


_DECL = re.compile(r"^\s*[\w:<>]+ ((?:tmp|ix)\d+) = (.*);$")
_IX_FIX = re.compile(r"^\s*(?:if \((ix\d+) < 0 \|\||(ix\d+) = \2 < 0 \?)")
_WORD = re.compile(r"\b[A-Za-z_]\w*\b")


def hoist(lines, at, start, loop_vars):
    """Move the declarations in lines[start:] that depend on no loop variable in loop_vars (nor
    on a value that does) to position `at`, before the loops. Index checks of a hoisted indirect
    index move with it. Only for loops known to run at least once (a hoisted load must be one
    the loop would have made)."""
    variant = set(loop_vars)
    keep, moved = [], []
    for line in lines[start:]:
        m = _DECL.match(line)
        fix = _IX_FIX.match(line)
        if m:
            name, rhs = m.groups()
            if variant.isdisjoint(_WORD.findall(rhs)):
                moved.append(line)
                continue
            variant.add(name)
        elif fix:
            name = fix.group(1) or fix.group(2)
            if name not in variant:
                moved.append(line)
                continue
        keep.append(line)
    if not moved:
        return
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    moved = [indent + ln.lstrip() for ln in moved]
    lines[start:] = keep
    lines[at:at] = moved
