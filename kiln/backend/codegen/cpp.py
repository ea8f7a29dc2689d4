"""C++/OpenMP kernels: one translation unit per graph, one `extern "C"` function per Group.

    extern "C" int kernel0(const float* __restrict__ arg0, float* __restrict__ buf2) {
        int kiln_err = 0;
        #pragma omp parallel for
        for (int64_t o0 = 0; o0 < 4096; o0++) {
            double acc0 = 0;
            #pragma omp simd reduction(+:acc0)
            for (int64_t r0 = 0; r0 < 4096; r0++) { ...; acc0 += tmp1; }
            float red0 = static_cast<float>(acc0);
            #pragma omp simd
            for (int64_t r0 = 0; r0 < 4096; r0++) { ...; buf2[4096*o0 + r0] = tmp5; }
        }
        return kiln_err;
    }

No flag changes results: -O3 -march=native without -ffast-math; -fwrapv makes signed overflow
wrap as eager's does, -fno-math-errno only stops libm from setting errno. Float reductions
accumulate in double; half types compute in float and round on store.
"""

import re

import torch

from kiln.backend.codegen import cpp_tiling, vecmath
from kiln.backend.codegen.common import (
    CSEVar,
    IndentedBuffer,
    KernelBase,
    compute_ctype,
    compute_dtype,
    storage_ctype,
)
from kiln.backend.codegen.cpp_ops import PARALLEL_MIN, PRELUDE, CppOverrides
from kiln.backend.codegen.cpp_reductions import (
    SUM_CHUNK,
    ColumnReductions,
    _acc_ctype,
    _extreme,
)
from kiln.backend.codegen.cpp_transpose import LoopOrders
from kiln.backend.ir import Ix, cexpr, prod, set_handler, set_range, size_hint
from kiln.backend.scheduler import Group


class KernelWriter(KernelBase, cpp_tiling.FlatLoops, LoopOrders, ColumnReductions):
    """Writes one Group as a C++ function."""

    def __init__(self, group, graph, stores, nthreads, inplace=None):
        super().__init__(group, graph, stores, inplace)
        self.nthreads = max(nthreads, 1)
        self.handler = CppOverrides(self)
        self.vec_ops = set()  # ops calling vecmath's vector functions
        self.int_values = {}  # C++ text of an integer constant -> its value
        self.index_vals = {}  # name of an int64 index_expr value -> its Ix
        self.subst = {}  # loop variable -> its expression in a tiled piece (cpp_tiling)
        self.piece_ranges = {}  # loop variables' ranges in the current piece
        self.staged = {}  # (buffer, index text) -> local tile array (cpp_transpose)

    # --- values ----------------------------------------------------------------------------------

    def declare(self, name, expr, dtype):
        return f"{compute_ctype(dtype)} {name} = {expr};"

    def storage_ctype_of(self, name):
        return storage_ctype(self.graph.buffers[name].layout.dtype)

    def load(self, name, index):
        loc = self.locals.get(name)
        if loc is not None and loc[1] == index:
            return loc[0]
        buf = self.graph.buffers[name]
        dt = buf.layout.dtype
        local = self.staged.get((name, index.render())) if self.staged else None
        name = self.param_name(name)
        expr = local or f"{name}[{index.render()}]"
        if dt == torch.bfloat16:
            expr = f"kiln_bf16_to_f({expr})"
        elif dt == torch.float16:
            expr = f"kiln_f16_to_f({expr})"
        elif dt == torch.bool:  # gcc vectorizes no loop that loads a bool: load its byte
            expr = f"(reinterpret_cast<const uint8_t*>({name})[{index.render()}] != 0)"
        return self.cse(expr, compute_dtype(dt))

    def indirect(self, value, size, wrap=True):
        name = f"ix{self.n}"
        self.n += 1
        self.code.writeline(f"int64_t {name} = static_cast<int64_t>({value});")
        if wrap:
            self.code.writeline(f"{name} = {name} < 0 ? {name} + {cexpr(size)} : {name};")
        self.code.writeline(
            f"if ({name} < 0 || {name} >= {cexpr(size)}) {{ kiln_err = 1; {name} = 0; }}"
        )
        set_range(name, 0, max(size - 1, 0) if type(size) is int else size - 1)
        return Ix.var(name)

    def store(self, node, role, value):
        name = node.name
        layout = node.buf.layout
        idx, _ = self.index_vars(node, role)
        ix = layout.index(idx)
        self.locals[name] = (value, ix, role in ("inner", "flat"))
        if name in self.stores:
            name = self.alias.get(name, name)
            self.params[name] = True
            dt = layout.dtype
            if dt == torch.bfloat16:
                v = f"kiln_f_to_bf16(static_cast<float>({value}))"
            elif dt == torch.float16:
                v = f"kiln_f_to_f16(static_cast<float>({value}))"
            else:
                v = f"static_cast<{storage_ctype(dt)}>({value})"
            self.code.writeline(f"{name}[{ix.render()}] = {v};")

    # --- structure -------------------------------------------------------------------------------

    def index_vars(self, node, role):
        idx, ridx = node.index_vars(role, self.g.outer, self.g.inner)
        cpp_tiling.set_ranges(self.piece_ranges)
        if self.subst:
            idx = [cpp_tiling.substitute(i, self.subst) for i in idx]
            ridx = [cpp_tiling.substitute(i, self.subst) for i in ridx]
        return idx, ridx

    def _probe_run(self, subst, ranges):
        """Each node's value and store index with a loop variable substituted (cpp_tiling)."""
        old = self.subst, self.piece_ranges
        self.subst, self.piece_ranges = subst, ranges
        try:
            for _, nodes in self.g.segments:
                for n in nodes:
                    role = self.g.roles[n.name]
                    idx, ridx = self.index_vars(n, role)
                    data = n.buf.data
                    value = data.inner_fn(idx, ridx) if n.is_reduction else data.inner_fn(idx)
                    yield value, n.buf.layout.index(idx) if n.name in self.stores else None
        finally:
            self.subst, self.piece_ranges = old

    def run_node(self, node, role):
        idx, ridx = self.index_vars(node, role)
        with set_handler(self.handler):
            if node.is_reduction:
                return node.buf.data.inner_fn(idx, ridx)
            return node.buf.data.inner_fn(idx)

    def generate(self):
        g = self.g
        body = self.code
        outer_n = prod(g.outer)
        work = outer_n * prod(g.inner) * max(len(g.nodes), 1)
        parallel = self._parallel(work)
        # outer loops
        if g.inner or not g.outer:
            loops = list(enumerate(g.outer))
            simd_last = False
        else:
            loops = list(enumerate(g.outer))
            simd_last = True
        par_outer = parallel and (outer_n > 1 if type(outer_n) is int else True)
        self.inner_parallel = parallel and outer_n == 1
        pieces = None
        if simd_last and len(loops) >= 2:  # Note [Codegen: inner-loop pieces]
            pieces = cpp_tiling.plan_pieces(self._probe_run, f"o{len(loops) - 1}", g.outer[-1])
            if pieces:
                loops, simd_last = loops[:-1], False
            else:
                plan = self.loop_plan()  # Note [Codegen: transposed pointwise kernels]
                if plan is not None:
                    self.planned_loops(plan, par_outer)
                    return self._function()
                merge = cpp_tiling.merged_inner(self._probe_run, g.outer, prefix="o")
                if merge:  # contiguous dims as one loop (a 7x7 image: 49 lanes, not 7)
                    first, span = merge
                    loops = loops[:first] + [(len(loops) - 1, span)]
                    self.subst = {f"o{d}": Ix() for d in range(first, len(g.outer) - 1)}
                    self.piece_ranges = {f"o{len(g.outer) - 1}": (0, span - 1)}
        depth = 0
        for k, (d, size) in enumerate(loops):
            set_range(f"o{d}", 0, size - 1)
            hoist_at = len(body.lines)
            pragma = self._outer_pragma(k, loops, par_outer, simd_last)
            if pragma:
                body.writeline(pragma)
            body.writeline(f"for (int64_t o{d} = 0; o{d} < {cexpr(size)}; o{d}++) {{")
            body.level += 1
            depth += 1
        if pieces:
            self.flat_pieces(f"o{len(loops)}", pieces)
            for _ in range(depth):
                body.level -= 1
                body.writeline("}")
            return self._function()
        if self._is_column():
            return self.column_reduction()
        if not g.inner:
            body_at = len(body.lines)
            self.flat_body()
            if simd_last and type(g.outer[-1]) is int and g.outer[-1] > 0:
                cpp_tiling.hoist(body.lines, hoist_at, body_at, [f"o{len(g.outer) - 1}"])
            self.subst, self.piece_ranges = {}, {}
        else:
            self.scopes.append({})
            for kind, nodes in g.segments:
                if kind == "outer":
                    for n in nodes:
                        self.store(n, "outer", self.run_node(n, "outer"))
                else:
                    self.loop_segment(nodes)
            self.scopes.pop()
        for _ in range(depth):
            body.level -= 1
            body.writeline("}")
        return self._function()

    def _outer_pragma(self, k, loops, par_outer, simd_last):
        n = len(loops)
        last = k == n - 1
        if k == 0 and par_outer:
            if simd_last and n == 1:
                return "#pragma omp parallel for simd" + self.par_if
            limit = n - 1 if simd_last else n
            c, acc = 0, 1
            while c < limit and acc < 4 * self.nthreads:
                acc *= size_hint(loops[c][1])
                c += 1
            c = max(c, 1)
            return "#pragma omp parallel for" + (f" collapse({c})" if c > 1 else "") + self.par_if
        if last and simd_last:
            return "#pragma omp simd"
        return None

    def loop_segment(self, nodes):
        g, body = self.g, self.code
        reds = [n for n in nodes if g.roles[n.name] == "red"]
        accs = {}
        clauses = []
        serial = False
        for n in reds:
            a = f"acc{self.n}"
            self.n += 1
            accs[n.name] = a
            rt = n.reduction_type
            vd = compute_dtype(n.buf.data.src_dtype)
            at = _acc_ctype(rt, vd)
            if rt == "sum":
                body.writeline(f"{at} {a} = 0;")
                clauses.append(f"reduction(+:{a})")
            elif rt == "prod":
                body.writeline(f"{at} {a} = 1;")
                clauses.append(f"reduction(*:{a})")
            elif rt in ("max", "min"):
                body.writeline(f"{at} {a} = {_extreme(vd, rt == 'max')};")
                body.writeline(f"int {a}_nan = 0;")
                clauses += [f"reduction({rt}:{a})", f"reduction(|:{a}_nan)"]
            elif rt == "any":
                body.writeline(f"int {a} = 0;")
                clauses.append(f"reduction(|:{a})")
            elif rt == "all":
                body.writeline(f"int {a} = 1;")
                clauses.append(f"reduction(&:{a})")
            elif rt in ("argmax", "argmin"):
                body.writeline(f"{at} {a} = {_extreme(vd, rt == 'argmax')};")
                body.writeline(f"int64_t {a}_i = 0;")
                serial = True
            else:
                raise NotImplementedError(rt)
        inner = list(enumerate(g.inner))
        merge = None if serial else self._merged_inner()
        if merge:  # the innermost dims as one loop, named by the last
            first, span = merge
            inner = inner[:first] + [(len(g.inner) - 1, span)]
            self.subst = {f"r{d}": Ix() for d in range(first, len(g.inner) - 1)}
            self.piece_ranges = {f"r{len(g.inner) - 1}": (0, span - 1)}
        hoist_at = len(body.lines)
        # Note [Codegen: float partial sums]: a float32 sum adds runs of at most SUM_CHUNK
        # elements in float vector lanes (what eager's vectorized sum does), each run's total
        # into the double accumulator: the vector width of float, the precision of double.
        size_last = inner[-1][1] if inner else None
        chunked = []
        if inner and not self.inner_parallel and not serial and type(size_last) is int:
            chunked = [
                accs[n.name]
                for n in reds
                if n.reduction_type == "sum"
                and compute_dtype(n.buf.data.src_dtype) == torch.float32
            ]
        for a in chunked:
            clauses[clauses.index(f"reduction(+:{a})")] = f"reduction(+:{a}_f)"
        for k, (d, size) in enumerate(inner):
            set_range(f"r{d}", 0, size - 1)
            last = k == len(inner) - 1
            lo, hi = 0, cexpr(size)
            if last and chunked:
                if size > SUM_CHUNK:
                    body.writeline(f"for (int64_t rb = 0; rb < {size}; rb += {SUM_CHUNK}) {{")
                    body.level += 1
                    lo, hi = "rb", f"(rb + {SUM_CHUNK} < {size} ? rb + {SUM_CHUNK} : {size})"
                body.writelines([f"float {a}_f = 0;" for a in chunked])
            if k == 0 and self.inner_parallel and not serial:
                coll = f" collapse({len(inner)})" if len(inner) > 1 else ""
                body.writeline(
                    f"#pragma omp parallel for simd{coll}{self.par_if} {' '.join(clauses)}".rstrip()
                )
            elif last and not serial and not (self.inner_parallel and len(inner) > 1):
                body.writeline(f"#pragma omp simd {' '.join(clauses)}".rstrip())
            body.writeline(f"for (int64_t r{d} = {lo}; r{d} < {hi}; r{d}++) {{")
            body.level += 1
        body_at = len(body.lines)
        self.scopes.append({})
        for n in nodes:
            role = g.roles[n.name]
            v = self.run_node(n, role)
            if role == "inner":
                self.store(n, role, v)
                continue
            if n.name not in accs:
                raise AssertionError(f"{g} roles={g.roles} node={n.name} role={role}")
            a, rt = accs[n.name], n.reduction_type
            vd = compute_dtype(n.buf.data.src_dtype)
            if a in chunked:
                body.writeline(f"{a}_f += {v};")
            elif rt == "sum":
                body.writeline(f"{a} += static_cast<{_acc_ctype(rt, vd)}>({v});")
            elif rt == "prod":
                body.writeline(f"{a} *= static_cast<{_acc_ctype(rt, vd)}>({v});")
            elif rt == "max":
                body.writeline(f"{a} = {v} > {a} ? {v} : {a};")
                if vd.is_floating_point:
                    body.writeline(f"{a}_nan |= ({v} != {v});")
            elif rt == "min":
                body.writeline(f"{a} = {v} < {a} ? {v} : {a};")
                if vd.is_floating_point:
                    body.writeline(f"{a}_nan |= ({v} != {v});")
            elif rt == "any":
                body.writeline(f"{a} |= static_cast<int>(static_cast<bool>({v}));")
            elif rt == "all":
                body.writeline(f"{a} &= static_cast<int>(static_cast<bool>({v}));")
            else:
                flat = Ix()
                stride = 1
                for d in reversed(range(len(g.inner))):
                    flat = flat + Ix.var(f"r{d}") * stride
                    stride *= g.inner[d]
                cmp = ">" if rt == "argmax" else "<"
                nan = f"{v} != {v} || " if vd.is_floating_point else ""
                keep = f"!({a} != {a}) && " if vd.is_floating_point else ""
                body.writeline(
                    f"if ({keep}({nan}{v} {cmp} {a})) {{ {a} = {v}; {a}_i = {flat.render()}; }}"
                )
        self.scopes.pop()
        self.subst, self.piece_ranges = {}, {}
        if all(type(size) is int and size > 0 for _, size in inner):
            cpp_tiling.hoist(body.lines, hoist_at, body_at, [f"r{d}" for d, _ in inner])
        for k in range(len(inner)):
            body.level -= 1
            body.writeline("}")
            if k == 0 and chunked:
                body.writelines([f"{a} += static_cast<double>({a}_f);" for a in chunked])
                if size_last > SUM_CHUNK:
                    body.level -= 1
                    body.writeline("}")
        # inner locals die with the loop
        self.locals = {k: v for k, v in self.locals.items() if not v[2]}
        for n in reds:
            a, rt = accs[n.name], n.reduction_type
            od = compute_dtype(n.buf.layout.dtype)
            ct = compute_ctype(od)
            vd = compute_dtype(n.buf.data.src_dtype)
            if rt in ("max", "min") and vd.is_floating_point:
                expr = f"{a}_nan ? std::numeric_limits<{ct}>::quiet_NaN() : static_cast<{ct}>({a})"
            elif rt in ("argmax", "argmin"):
                expr = f"{a}_i"
            else:
                expr = f"static_cast<{ct}>({a})"
            v = CSEVar(f"red_{n.name}", od)
            body.writeline(f"{ct} {v} = {expr};")
            self.store(n, "red", v)

    def _merged_inner(self):
        """cpp_tiling.merged_inner for this group's inner loops, computed once."""
        if not hasattr(self, "_merge"):
            self._merge = cpp_tiling.merged_inner(self._probe_run, self.g.inner)
        return self._merge

    def _parallel(self, work):
        """Whether to emit OpenMP parallel loops; for a symbolic amount of work the test is
        made at run time by the `if(parallel: ...)` clause in self.par_if."""
        self.par_if = ""
        if type(work) is int:
            return work >= PARALLEL_MIN and self.nthreads > 1
        self.par_if = f" if(parallel: {cexpr(work)} >= {PARALLEL_MIN})"
        return self.nthreads > 1

    def _function(self):
        params = []
        for name, is_out in self.params.items():
            t = storage_ctype(self.graph.buffers[name].layout.dtype)
            params.append(f"{'' if is_out else 'const '}{t}* __restrict__ {name}")
        text = "\n".join(self.code.lines)
        sizes = sorted(set(_SIZE_ARG.findall(text)), key=int) if "ks" in text else []
        params += [f"int64_t ks{k}" for k in sizes]
        out = IndentedBuffer()
        out.writeline(f'extern "C" int {self.g.name}({", ".join(params)}) {{')
        out.writeline("    int kiln_err = 0;")
        out.lines += self.code.lines
        out.writeline("    return kiln_err;")
        out.writeline("}")
        return out.getvalue(), list(self.params) + [f"ks{k}" for k in sizes]


_SIZE_ARG = re.compile(r"\bks(\d+)\b")  # size symbol s3 is the kernel argument ks3


# Note [Codegen: kernels with the same code]
# An optimizer step updates each parameter with the same loop: 100 Linear layers give 100 copies
# of one weight kernel and 100 of one bias kernel, differing only in their names and the names of
# their pointer arguments. The second and later copies are emitted as one-line calls of the first
# (`return kernel3(arg12, arg14, arg15);`), so the C++ compiler optimizes each distinct loop once:
# compile time grows with the number of distinct loops, not with the number of parameters.
def _canonical(name, src, params):
    """The kernel's source with its name and parameter names replaced by positional ones."""
    if not params:
        return src.replace(name, "KERNEL", 1)
    names = {p: f"kp{i}" for i, p in enumerate(params)}
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    return pattern.sub(lambda m: names[m.group(1)], src.replace(name, "KERNEL", 1))


def _forwarder(src, first, params):
    """A kernel whose code equals kernel `first`'s: its signature, calling `first`."""
    head = src.split("{", 1)[0]
    return f"{head}{{  // the code of {first}\n    return {first}({', '.join(params)});\n}}\n"


def generate_cpp(graph, groups, stores, nthreads, inplace=None):
    """The translation unit for all kernel groups: (source, {kernel name: [buffer params]})."""
    parts = [PRELUDE]
    signatures = {}
    vec_ops = set()
    seen = {}  # canonical source -> the first kernel with it
    for g in groups:
        if isinstance(g, Group):
            writer = KernelWriter(g, graph, stores, nthreads, inplace or {})
            src, params = writer.generate()
            key = _canonical(g.name, src, params)
            if key in seen:  # Note [Codegen: kernels with the same code]
                parts.append(_forwarder(src, seen[key], params))
            else:
                seen[key] = g.name
                parts.append(src)
            signatures[g.name] = params
            vec_ops |= writer.vec_ops
    parts.insert(1, vecmath.prelude(vec_ops))
    return "\n".join(parts), signatures
