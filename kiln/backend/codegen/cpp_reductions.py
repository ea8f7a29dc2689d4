"""Reductions in C++ kernels: accumulators, and column reductions (the kept dim innermost).

A column reduction sums rows into a block of outputs side by side, vectorized along the kept
(contiguous) dim, e.g. a bias gradient over a [512, 256] gradient:

    for (ob = 0; ob < 256; ob += 64) {
        double acc0[64] = 0...;
        for (r0 = 0; r0 < 512; r0++)
            #pragma omp simd
            for (o0 = ob; o0 < oe; o0++) acc0[o0 - ob] += g[256*r0 + o0];
    }

# Note [Codegen: rows split across threads]
A column kernel with fewer blocks of outputs than threads (a batch norm's 16 or 64 channels over
N*H*W rows) would run on one thread. Its rows are split instead: each reduction loop opens a
parallel region, every thread accumulates its share of the rows (`omp for schedule(static)` over
the outermost row loop) into its own accumulators, writes them to its row of `acc_p[thread][B]`,
and after the region the rows are folded into the block's accumulators in thread order, so a
given thread count always gives the same result. Per-output steps between loops run serially.

# Note [Codegen: column segments]
A kernel may hold several reduction loops in a row with per-output steps between them: an NHWC
batch norm's mean, then the variance around that mean, then the running statistics and rsqrt.
In a row kernel each result is a scalar the next loop reads. In a column kernel each loop and
each per-output step runs once per block of lanes, so a value made in one lane loop is written to
a per-lane array (`lane_buf4[o0 - ob]`) and the later loops of the block read it from there. The
values, and the order in which each lane's values are added, are those of the row kernel.
"""

import torch

from kiln.backend.codegen import cpp_tiling
from kiln.backend.codegen.common import CSEVar, compute_ctype, compute_dtype
from kiln.backend.codegen.cpp_tiling import in_atom
from kiln.backend.ir import Ix, cexpr, prod, set_range, size_hint


# accumulator C type of a reduction over values of a compute dtype
def _acc_ctype(rtype, dtype):
    if rtype in ("sum", "prod"):
        if dtype.is_floating_point:
            return "double"
        return "int64_t"
    if rtype in ("any", "all") or dtype == torch.bool:
        return "int"
    return compute_ctype(dtype)


COLUMN_BLOCK = 64  # outputs per block in column reductions
SUM_CHUNK = 1024  # elements a float32 sum adds in float before its double accumulator
COLUMN_CHUNK = 256  # rows a float32 column sum adds in float before its double accumulators
COLUMN_TYPES = ("sum", "prod", "max", "min", "any", "all")  # reductions a column kernel does


# how a thread's partial result p folds into an accumulator a (Note [Codegen: rows split across
# threads]); a partial is never NaN (its NaN flag is kept apart)
_COMBINE = {
    "sum": "{a} += {p};",
    "prod": "{a} *= {p};",
    "max": "{a} = {p} > {a} ? {p} : {a};",
    "min": "{a} = {p} < {a} ? {p} : {a};",
    "any": "{a} |= {p};",
    "all": "{a} &= {p};",
}


def _acc_init(rt, vd):
    """Initial value of an accumulator (value part; the NaN flag starts at 0)."""
    if rt == "sum" or rt == "any":
        return "0"
    if rt == "prod" or rt == "all":
        return "1"
    return _extreme(vd, rt == "max")


def _acc_update(rt, a, v, vd):
    """Statements folding value v into accumulator a (and its NaN flag a_nan)."""
    at = _acc_ctype(rt, vd)
    if rt == "sum":
        return [f"{a} += static_cast<{at}>({v});"]
    if rt == "prod":
        return [f"{a} *= static_cast<{at}>({v});"]
    if rt == "any":
        return [f"{a} |= static_cast<int>(static_cast<bool>({v}));"]
    if rt == "all":
        return [f"{a} &= static_cast<int>(static_cast<bool>({v}));"]
    cmp = ">" if rt == "max" else "<"
    out = [f"{a} = {v} {cmp} {a} ? {v} : {a};"]
    if vd.is_floating_point:
        out.append(f"{a}_nan |= ({v} != {v});")
    return out


def _acc_final(rt, a, od, vd):
    ct = compute_ctype(od)
    if rt in ("max", "min") and vd.is_floating_point:
        return f"{a}_nan ? std::numeric_limits<{ct}>::quiet_NaN() : static_cast<{ct}>({a})"
    return f"static_cast<{ct}>({a})"


def _extreme(dtype, lowest):
    ct = compute_ctype(dtype)
    if dtype.is_floating_point:
        return f"{'-' if lowest else ''}std::numeric_limits<{ct}>::infinity()"
    return f"std::numeric_limits<{ct}>::{'lowest' if lowest else 'max'}()"


class ColumnReductions:
    """Column reduction kernels (mixed into KernelWriter)."""

    def _is_column(self):
        """Reductions whose inputs are contiguous along the kept (outer) dimension.

        Several reduction loops may follow each other, with per-output steps between them (a
        batch norm's mean, then its variance around that mean, then the running statistics)."""
        g = self.g
        if not g.inner or not g.outer or size_hint(g.outer[-1]) < 8:
            return False
        if not any(kind == "loop" for kind, _ in g.segments):
            return False
        ol, rl = f"o{len(g.outer) - 1}", f"r{len(g.inner) - 1}"
        for kind, nodes in g.segments:
            if kind not in ("loop", "outer"):
                return False
            # pointwise nodes of a reduction loop ("inner": e.g. a gradient stored while its
            # bias gradient sums it) run in the same vectorized block
            roles = ("red", "inner") if kind == "loop" else ("outer",)
            if any(g.roles[n.name] not in roles for n in nodes):
                return False
            reds = [n for n in nodes if g.roles[n.name] == "red"]
            if kind == "loop" and (
                not reds or any(n.reduction_type not in COLUMN_TYPES for n in reds)
            ):
                return False
            for n in nodes:
                role = g.roles[n.name]
                loads = n.loads(role, g.outer, g.inner)
                if not loads and role == "red":
                    return False
                for _, ix in loads:
                    if ol not in ix.terms and not in_atom(ix, ol):
                        continue  # the same for every lane (a row statistic): a broadcast
                    if ix.terms.get(ol, 0) != 1 and not in_atom(ix, ol):
                        return False
                    # contiguous along the rows: a row kernel reads it better (a load that is
                    # the same for every row, a per-output statistic, is a vector load per lane)
                    if role != "outer" and ix.terms.get(rl, 0) in (1, -1) and not in_atom(ix, rl):
                        return False
                if role != "red" and n.store_index(role, g.outer, g.inner).terms.get(ol, 0) != 1:
                    return False
        return True

    def column_reduction(self):
        """Blocks of outputs accumulate side by side while the reduction walks rows (vectorized)."""
        g, body = self.g, self.code
        # Undo the generic outer loop nest: rebuild it with the last outer dim in blocks.
        body.lines.clear()
        body.level = 1
        k = len(g.outer)
        last = f"o{k - 1}"
        work = prod(g.outer) * prod(g.inner) * len(g.nodes)
        par = self._parallel(work)
        pieces = None
        if not (par and k == 1):  # pieces follow each other: the parallel loops are the others
            pieces = cpp_tiling.plan_pieces(self._probe_run, last, g.outer[-1])
        # Note [Codegen: rows split across threads]
        self.row_split = 0
        if par and not pieces and all(type(x) is int for x in (*g.outer, *g.inner)):
            blocks = prod(g.outer[:-1]) * -(-g.outer[-1] // COLUMN_BLOCK)
            if blocks < self.nthreads and prod(g.inner) >= 4 * COLUMN_CHUNK:
                self.row_split, par = self.nthreads, False
        if par:
            c = k - 1 if pieces else k
            body.writeline(
                (f"#pragma omp parallel for collapse({c})" if c > 1 else "#pragma omp parallel for")
                + self.par_if
            )
        for d in range(k - 1):
            set_range(f"o{d}", 0, g.outer[d] - 1)
            body.writeline(f"for (int64_t o{d} = 0; o{d} < {cexpr(g.outer[d])}; o{d}++) {{")
            body.level += 1
        set_range(last, 0, g.outer[-1] - 1)
        for p in pieces or [None]:
            self.column_piece(last, p)
        self.subst, self.piece_ranges = {}, {}
        for _ in range(k - 1):
            body.level -= 1
            body.writeline("}")
        return self._function()

    def column_piece(self, last, p):
        """One piece of the blocked column loop: None is the whole range in blocks of
        COLUMN_BLOCK, a tiled piece has blocks of p.k (Note [Codegen: inner-loop pieces])."""
        g, body = self.g, self.code
        if p is None or p.k is None:
            lo, hi = (0, cexpr(g.outer[-1])) if p is None else (p.start, p.start + p.length)
            if p is not None:
                self.subst, self.piece_ranges = cpp_tiling.piece_subst(last, p)
            B, slot = COLUMN_BLOCK, f"{last} - ob"
            body.writeline(f"for (int64_t ob = {lo}; ob < {hi}; ob += {B}) {{")
            body.level += 1
            body.writeline(f"const int64_t oe = ob + {B} < {hi} ? ob + {B} : {hi};")
            lanes = f"for (int64_t {last} = ob; {last} < oe; {last}++) {{"
        else:
            self.subst, self.piece_ranges = cpp_tiling.piece_subst(last, p)
            t, slot = cpp_tiling.tile_names(last)
            B = p.k
            body.writeline(f"for (int64_t {t} = 0; {t} < {p.length // p.k}; {t}++) {{")
            body.level += 1
            lanes = f"for (int64_t {slot} = 0; {slot} < {p.k}; {slot}++) {{"
        # Note [Codegen: column segments]: a value made in one lane loop (a reduction's result,
        # a per-output step) is read by later loops of the block from a per-lane array
        spill = len(g.segments) > 1
        for _, nodes in g.segments if spill else []:
            for n in nodes:
                if g.roles[n.name] != "inner":
                    ct = compute_ctype(compute_dtype(n.buf.layout.dtype))
                    body.writeline(f"{ct} lane_{n.name}[{B}];")
        for kind, nodes in g.segments:
            if kind == "loop":
                self.column_loop(nodes, B, slot, lanes, spill)
            else:
                self.column_lanes(nodes, slot, lanes, spill)
        body.level -= 1
        body.writeline("}")

    def _spill(self, n, slot):
        """Later loops of the block read n's value from its lane array."""
        value, ix, _ = self.locals[n.name]
        self.code.writeline(f"lane_{n.name}[{slot}] = {value};")
        dtype = compute_dtype(n.buf.layout.dtype)
        self.locals[n.name] = (CSEVar(f"lane_{n.name}[{slot}]", dtype), ix, False)

    def _declare_acc(self, n, a, B, parts=0):
        """Accumulator arrays of reduction n (with parts: `a_p[parts][B]`, one row a thread)."""
        rt, vd = n.reduction_type, compute_dtype(n.buf.data.src_dtype)
        body = self.code
        if parts:
            body.writeline(f"{_acc_ctype(rt, vd)} {a}_p[{parts}][{B}];")
            body.writeline(f"int {a}_pnan[{parts}][{B}];")
            body.writeline(
                f"for (int t = 0; t < {parts}; t++) for (int64_t j = 0; j < {B}; j++) "
                f"{{ {a}_p[t][j] = {_acc_init(rt, vd)}; {a}_pnan[t][j] = 0; }}"
            )
            return
        body.writeline(f"{_acc_ctype(rt, vd)} {a}[{B}];")
        body.writeline(f"int {a}_nan[{B}];")
        body.writeline(
            f"for (int64_t j = 0; j < {B}; j++) {{ {a}[j] = {_acc_init(rt, vd)}; {a}_nan[j] = 0; }}"
        )

    def _combine_parts(self, reds, accs, B):
        """End of the parallel region: each thread's partials into its row; then the rows into
        the block's accumulators in thread order (the same result for the same thread count)."""
        body = self.code
        for n in reds:
            a = accs[n.name]
            body.writeline(
                f"for (int64_t j = 0; j < {B}; j++) {{ {a}_p[kt][j] = {a}[j]; "
                f"{a}_pnan[kt][j] = {a}_nan[j]; }}"
            )
        body.level -= 1
        body.writeline("}")
        for n in reds:
            a = accs[n.name]
            fold = _COMBINE[n.reduction_type].format(a=f"{a}[j]", p=f"{a}_p[t][j]")
            body.writeline(
                f"for (int t = 0; t < {self.row_split}; t++) for (int64_t j = 0; j < {B}; j++) "
                f"{{ {fold} {a}_nan[j] |= {a}_pnan[t][j]; }}"
            )

    def column_lanes(self, nodes, slot, lanes, spill):
        """Per-output steps between reduction loops, one lane loop."""
        body = self.code
        body.writeline(lanes)
        body.level += 1
        self.scopes.append({})
        for n in nodes:
            self.store(n, "outer", self.run_node(n, "outer"))
        self.scopes.pop()
        if spill:
            for n in nodes:
                self._spill(n, slot)
        body.level -= 1
        body.writeline("}")

    def column_loop(self, nodes, B, slot, lanes, spill):
        """One reduction loop: accumulator arrays, rows outside, lanes inside (vectorized)."""
        g, body = self.g, self.code
        accs = {}
        reds = [n for n in nodes if g.roles[n.name] == "red"]
        nt = self.row_split
        for n in reds:
            a = f"acc{self.n}"
            self.n += 1
            accs[n.name] = a
            self._declare_acc(n, a, B)
            if nt:  # one row of partial results per thread, in thread order
                self._declare_acc(n, a, B, parts=nt)
        if nt:
            body.writeline(f"#pragma omp parallel num_threads({nt})")
            body.writeline("{")
            body.level += 1
            body.writeline("const int kt = omp_get_thread_num();")
            for n in reds:  # this thread's accumulators (they shadow the block's)
                self._declare_acc(n, accs[n.name], B)
        pragma = "#pragma omp for schedule(static)" if nt else None
        inner = list(enumerate(g.inner))
        saved = self.subst, self.piece_ranges
        merge = self._merged_inner()
        if merge:  # rows of contiguous dims as one loop (N, H, W of an NHWC batch norm)
            first, span = merge
            inner = inner[:first] + [(len(g.inner) - 1, span)]
            self.subst = {**self.subst, **{f"r{d}": Ix() for d in range(first, len(g.inner) - 1)}}
            self.piece_ranges = {**self.piece_ranges, f"r{len(g.inner) - 1}": (0, span - 1)}
        # Note [Codegen: float partial sums], by rows: float lanes for at most COLUMN_CHUNK rows
        # of the innermost row loop at a time, then into the double accumulators
        chunked = []
        rows = inner[-1][1]
        if type(rows) is int:
            chunked = [
                accs[n.name]
                for n in reds
                if n.reduction_type == "sum"
                and compute_dtype(n.buf.data.src_dtype) == torch.float32
            ]
        blocked = bool(chunked) and rows > COLUMN_CHUNK
        for k, (d, size) in enumerate(inner):
            set_range(f"r{d}", 0, size - 1)
            start, end = 0, cexpr(size)
            if k == len(inner) - 1 and chunked:
                if blocked:
                    if pragma:
                        body.writeline(pragma)
                        pragma = None
                    body.writeline(f"for (int64_t rb = 0; rb < {rows}; rb += {COLUMN_CHUNK}) {{")
                    body.level += 1
                    start, end = (
                        "rb",
                        f"(rb + {COLUMN_CHUNK} < {rows} ? rb + {COLUMN_CHUNK} : {rows})",
                    )
                for a in chunked:
                    body.writeline(f"float {a}_f[{B}];")
                    body.writeline(f"for (int64_t j = 0; j < {B}; j++) {a}_f[j] = 0;")
            if pragma:
                body.writeline(pragma)
                pragma = None
            body.writeline(f"for (int64_t r{d} = {start}; r{d} < {end}; r{d}++) {{")
            body.level += 1
        body.writeline("#pragma omp simd")
        body.writeline(lanes)
        body.level += 1
        self.scopes.append({})
        for n in nodes:
            if g.roles[n.name] == "inner":
                self.store(n, "inner", self.run_node(n, "inner"))
                continue
            v = self.run_node(n, "red")
            rt, vd = n.reduction_type, compute_dtype(n.buf.data.src_dtype)
            a = accs[n.name]
            if a in chunked:
                body.writeline(f"{a}_f[{slot}] += {v};")
                continue
            stmts = _acc_update(rt, f"{a}[{slot}]", v, vd)
            body.writelines([st.replace(f"{a}[{slot}]_nan", f"{a}_nan[{slot}]") for st in stmts])
        self.scopes.pop()
        self.locals = {k: v for k, v in self.locals.items() if not v[2]}  # loop-local values
        body.level -= 1
        body.writeline("}")
        for k in reversed(range(len(inner))):
            body.level -= 1
            body.writeline("}")
            if k == len(inner) - 1 and chunked:
                for a in chunked:
                    body.writeline(f"for (int64_t j = 0; j < {B}; j++) {a}[j] += {a}_f[j];")
                if blocked:
                    body.level -= 1
                    body.writeline("}")
        self.subst, self.piece_ranges = saved
        if nt:
            self._combine_parts(reds, accs, B)
        body.writeline(lanes)
        body.level += 1
        for n in reds:
            a = accs[n.name]
            rt, vd = n.reduction_type, compute_dtype(n.buf.data.src_dtype)
            od = compute_dtype(n.buf.layout.dtype)
            fin = _acc_final(rt, f"{a}[{slot}]", od, vd).replace(
                f"{a}[{slot}]_nan", f"{a}_nan[{slot}]"
            )
            v = CSEVar(f"red_{n.name}", od)
            body.writeline(f"{compute_ctype(od)} {v} = {fin};")
            self.store(n, "red", v)
            if spill:
                self._spill(n, slot)
        body.level -= 1
        body.writeline("}")
