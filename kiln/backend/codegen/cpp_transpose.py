"""Loop orders of pointwise kernels whose operands are laid out differently (transposes, NHWC).

# Note [Codegen: transposed pointwise kernels]
The plain loop nest runs the last dim innermost. Two things can make that wrong:

    inner   more indices step by 1 along another dim p (`x.t() + y` with the output laid out
            like x.t(), an NHWC batch norm whose channels are contiguous): p runs innermost;
    cross   an operand steps by 1 along a dim q other than the innermost one (y in `x.t() + y`,
            x in `x.t().contiguous()`): read lane by lane it is a gather with a stride of a whole
            row, and when rows are a multiple of 4 KiB apart every lane falls in the same cache
            set. Such operands are staged: the (q, inner) plane runs in CROSS x TILE tiles, each
            tile of the operand is copied once into a local array reading it along q (whole
            cache lines), and the vectorized inner loop reads the local array contiguously.

Only the loop structure changes, never a value: each element is computed by the same
expression; the staged load reads the same element the direct load would.
"""

from kiln.backend.codegen.cpp_tiling import ProbeHandler, in_atom
from kiln.backend.ir import set_handler

TILE = 16  # lanes of a staged kernel's inner loop (16 float32: one cache line)
CROSS = 64  # a tile's length along the cross dim (the staged operand's rows: 4 cache lines)
# loads staged as they are stored (converted to their compute type when read from the tile)
STAGED_CTYPES = {
    "float",
    "double",
    "int64_t",
    "int32_t",
    "int16_t",
    "int8_t",
    "uint8_t",
    "uint16_t",
    "_Float16",
}


def stride_one_votes(uses, names):
    """{loop variable: how many indices step by 1 along it}.

    An index over one loop variable only (a per-channel vector `w[o1]`, broadcast over the
    others) does not vote: it stays in cache whatever the loop order."""
    votes = dict.fromkeys(names, 0)
    for ix in uses:
        if sum(1 for v in names if ix.terms.get(v)) < 2:
            continue
        for v in names:
            if ix.terms.get(v) == 1 and not in_atom(ix, v):
                votes[v] += 1
    return votes


class _LoadRecorder(ProbeHandler):
    """The probe handler, also recording which buffer each load reads."""

    def __init__(self):
        super().__init__(None)
        self.named = []

    def load(self, name, index):
        self.named.append((name, index))
        return super().load(name, index)


def _named_loads(run):
    """[(buffer name, Ix)] of every load of the kernel's nodes, and the store indices."""
    h = _LoadRecorder()
    stores = []
    with set_handler(h):
        for _, store_ix in run({}, {}):
            if store_ix is not None:
                stores.append(store_ix)
    return h.named, stores


class LoopOrders:
    """Pointwise loop nests for transposed and NHWC operands (mixed into KernelWriter)."""

    def loop_plan(self):
        """(inner dim, cross dim or None, {(name, index text): local array}) or None for the
        plain nest (Note [Codegen: transposed pointwise kernels])."""
        g = self.g
        n = len(g.outer)
        if n < 2 or any(type(s) is not int for s in g.outer):
            return None
        names = [f"o{d}" for d in range(n)]
        loads, stores = _named_loads(self._probe_run)
        votes = stride_one_votes([ix for _, ix in loads] + stores, names)
        best = max(range(n), key=lambda d: (votes[names[d]], d))
        inner = n - 1
        if best != n - 1 and votes[names[best]] > votes[names[-1]] and g.outer[best] >= 16:
            inner = best
        cross, staged = self._cross_loads(loads, names, inner)
        if inner == n - 1 and cross is None:
            return None
        return inner, cross, staged

    def _cross_loads(self, loads, names, inner):
        """The dim most external operands step by 1 along (not the inner one), and their loads."""
        g = self.g
        mine = g.names()
        iv = names[inner]
        by_dim = {}
        for name, ix in loads:
            if name in mine or set(ix.terms) - set(names) or any(in_atom(ix, v) for v in names):
                continue
            if ix.terms.get(iv, 0) in (0, 1, -1):
                continue  # contiguous along the inner dim, or the same for every lane
            ctype = self.storage_ctype_of(name)
            if ctype not in STAGED_CTYPES:
                continue
            for d, v in enumerate(names):
                if d != inner and ix.terms.get(v) == 1 and g.outer[d] >= TILE:
                    by_dim.setdefault(d, {})[(name, ix.render())] = (name, ix, ctype)
        if not by_dim or g.outer[inner] < TILE:
            return None, {}
        cross = max(by_dim, key=lambda d: (len(by_dim[d]), d))
        return cross, by_dim[cross]

    def planned_loops(self, plan, parallel):
        inner, cross, staged = plan
        if cross is None:
            return self.reordered_loops(inner, parallel)
        return self.staged_loops(inner, cross, staged, parallel)

    def _open_outer(self, dims, parallel, block_trips=()):
        """Loops over dims; the parallel loop collapses as many of them (and of the block loops
        that follow, with these trip counts) as give every thread a few iterations."""
        g, body = self.g, self.code
        if parallel:
            trips = [g.outer[d] for d in dims] + list(block_trips)
            c, work = 0, 1
            while c < len(trips) and work < 4 * self.nthreads:
                work *= trips[c]
                c += 1
            c = max(c, 1)
            body.writeline("#pragma omp parallel for" + (f" collapse({c})" if c > 1 else ""))
        for d in dims:
            body.writeline(f"for (int64_t o{d} = 0; o{d} < {g.outer[d]}; o{d}++) {{")
            body.level += 1

    def _close(self, depth):
        for _ in range(depth):
            self.code.level -= 1
            self.code.writeline("}")

    def reordered_loops(self, p, parallel):
        """Dim p innermost over its whole range, the others outside in order: an NHWC kernel
        (every index steps by 1 along the channels) runs its channels inside."""
        g, body = self.g, self.code
        outer = [d for d in range(len(g.outer)) if d != p]
        self._open_outer(outer, parallel)
        body.writeline("#pragma omp simd")
        body.writeline(f"for (int64_t o{p} = 0; o{p} < {g.outer[p]}; o{p}++) {{")
        body.level += 1
        self.flat_body()
        self._close(len(outer) + 1)

    def staged_loops(self, inner, cross, staged, parallel):
        """CROSS x TILE tiles of the (cross, inner) plane; the staged operands' tiles are read
        along cross into local arrays, the body runs inner lanes over them."""
        g, body = self.g, self.code
        T = TILE
        iv, cv = f"o{inner}", f"o{cross}"
        outer = [d for d in range(len(g.outer)) if d not in (inner, cross)]
        trips = [-(-g.outer[cross] // CROSS), -(-g.outer[inner] // T)]
        self._open_outer(outer, parallel, trips)
        for v, size, t in ((cv, g.outer[cross], CROSS), (iv, g.outer[inner], T)):
            body.writeline(f"for (int64_t {v}b = 0; {v}b < {size}; {v}b += {t}) {{")
            body.level += 1
        for v, size, t in ((cv, g.outer[cross], CROSS), (iv, g.outer[inner], T)):
            body.writeline(f"const int64_t {v}e = {v}b + {t} < {size} ? {v}b + {t} : {size};")
        self.staged = {}
        for k, (key, (name, ix, ctype)) in enumerate(sorted(staged.items())):
            local = f"stage{k}"
            body.writeline(f"{ctype} {local}[{CROSS}][{T}];")
            body.writeline(f"for (int64_t {iv} = {iv}b; {iv} < {iv}e; {iv}++) {{")
            body.writeline("    #pragma omp simd")
            body.writeline(f"    for (int64_t {cv} = {cv}b; {cv} < {cv}e; {cv}++) {{")
            src = self.param_name(name)
            body.writeline(f"        {local}[{cv} - {cv}b][{iv} - {iv}b] = {src}[{ix.render()}];")
            body.writeline("    }")
            body.writeline("}")
            self.staged[key] = f"{local}[{cv} - {cv}b][{iv} - {iv}b]"
        body.writeline(f"for (int64_t {cv} = {cv}b; {cv} < {cv}e; {cv}++) {{")
        body.writeline("    #pragma omp simd")
        body.writeline(f"    for (int64_t {iv} = {iv}b; {iv} < {iv}e; {iv}++) {{")
        body.level += 2
        self.flat_body()
        self.staged = {}
        self._close(len(outer) + 4)
