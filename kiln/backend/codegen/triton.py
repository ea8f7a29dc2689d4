"""Triton kernels: one module per graph, one `@triton.jit` function per Group and its launcher.

The same loop IR and scheduler as the C++ path (Note [Triton: kernel structure]); the kernels
differ from C++ only in this file's ops handler and loop structure:

    @triton.jit
    def kernel0_tl(arg0_1, buf1, xnumel, rnumel, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
        xindex = tl.program_id(0).to(tl.int64) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
        xmask = xindex < xnumel
        o0 = xindex
        rindex = tl.arange(0, RBLOCK)[None, :].to(tl.int64)
        ...
        red0 = red_max(tl.where(xrmask, tmp0, float("-inf")), 1)[:, None]

    def kernel0(arg0_1, buf1):
        return launch(kernel0_tl, (arg0_1, buf1), 64, 128, 128, False)
"""

import hashlib
import importlib.util
import math
import os
import re
import tempfile

import sympy
import torch

from kiln import config, modes
from kiln.backend.codegen.common import PERSISTENT_MAX, IndentedBuffer, KernelBase, compute_dtype
from kiln.backend.codegen.wrapper import WrapperCodegen
from kiln.backend.devices import reads_by_value, value_arg
from kiln.backend.graph import GraphNotSupported
from kiln.backend.ir import Ix, prod, set_handler, set_range
from kiln.backend.scheduler import Group
from kiln.symbolic.sizes import _print

TL_DTYPE = {
    torch.float32: "tl.float32",
    torch.float64: "tl.float64",
    torch.float16: "tl.float16",
    torch.bfloat16: "tl.bfloat16",
    torch.int64: "tl.int64",
    torch.int32: "tl.int32",
    torch.int16: "tl.int16",
    torch.int8: "tl.int8",
    torch.uint8: "tl.uint8",
    torch.bool: "tl.int1",
}

# libdevice functions by op name (Note [Triton: libdevice under the interpreter])
LIBDEVICE = {
    name: name
    for name in (
        "exp exp2 expm1 log log2 log10 log1p sqrt sin cos tan asin acos atan sinh cosh tanh "
        "asinh acosh atanh erf erfc lgamma"
    ).split()
}
LIBDEVICE_BINARY = {"atan2": "atan2", "hypot": "hypot", "fmod": "fmod"}
INFIX = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "bitwise_and": "&",
    "bitwise_or": "|",
    "bitwise_xor": "^",
}
COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
POW_FLOAT = {3.0: "{0} * {0} * {0}", -1.0: "{1} / {0}", -2.0: "{1} / ({0} * {0})"}


def kexpr(e):
    """Python source of a size inside a kernel (symbol s0 is the kernel argument ks0)."""
    if type(e) is int:
        return str(e)
    return _print(sympy.sympify(e), "k", False)


def index_text(ix):
    """Triton source of an index (Ix renders C: `/` of non-negatives and the kiln_* helpers)."""
    text = ix.render() if isinstance(ix, Ix) else str(ix)
    text = text.replace(" / ", " // ")
    text = text.replace("std::max<int64_t>", "tl.maximum").replace(
        "std::min<int64_t>", "tl.minimum"
    )
    return text


def literal(value, dtype, shape="[]"):
    """A Triton block of `value` in `dtype` (converted as eager converts a Python scalar)."""
    if dtype == torch.bool:
        return f"tl.full({shape}, {bool(value)}, tl.int1)"
    if dtype.is_floating_point:
        v = float(value)
        if dtype in (torch.float16, torch.bfloat16):
            v = float(torch.tensor(v, dtype=dtype).item())
        text = repr(v) if math.isfinite(v) else f'float("{v}")'
        return f"tl.full({shape}, {text}, {TL_DTYPE[compute_dtype(dtype)]})"
    v = int(value)
    info = torch.iinfo(dtype)
    v = (v - info.min) % (info.max - info.min + 1) + info.min
    return f"tl.full({shape}, {v}, {TL_DTYPE[dtype]})"


class TritonOverrides:
    """The ops handler that writes Triton statements into the current scope of a TritonKernel."""

    def __init__(self, kernel):
        self.k = kernel

    def _var(self, expr, dtype):
        return self.k.cse(expr, dtype)

    def load(self, name, index):
        return self.k.load(name, index)

    def constant(self, value, dtype):
        cd = compute_dtype(dtype)
        # a block, never a 0-d scalar: the interpreter cannot mix int1 scalars with blocks
        v = self._var(literal(value, dtype, self.k.shape), cd)
        self.k.const_values[v.name] = value
        return v

    def index_expr(self, index, dtype):
        cd = compute_dtype(dtype)
        return self._var(f"({self.k.zero} + ({index_text(Ix.wrap(index))})).to({TL_DTYPE[cd]})", cd)

    def indirect_indexing(self, value, size, wrap=True):
        return self.k.indirect(value, size, wrap)

    def to_dtype(self, x, dtype, src=None):
        if dtype == torch.bfloat16:
            return self._var(f"round_bf16({x}.to(tl.float32))", torch.float32)
        if dtype == torch.float16:
            return self._var(f"{x}.to(tl.float16).to(tl.float32)", torch.float32)
        if x.dtype == dtype:
            return x
        if dtype == torch.bool:
            return self._var(f"{x} != 0", torch.bool)
        return self._var(f"{x}.to({TL_DTYPE[dtype]})", dtype)

    def where(self, c, a, b):
        return self._var(f"tl.where({c}, {a}, {b})", a.dtype)

    def rand(self, seed, offset):  # Note [Random: numbers from a seed per graph]
        return self._var(f"tl.rand({seed}, {offset}.to(tl.uint32))", torch.float32)

    def randn(self, seed, offset):
        return self._var(f"tl.randn({seed}, {offset}.to(tl.uint32))", torch.float32)

    def truediv(self, a, b):
        if a.dtype == torch.float32 and b.dtype == torch.float32:
            return self._var(f"tl.div_rn({a}, {b})", a.dtype)  # IEEE division (eager's)
        return self._var(f"{a} / {b}", a.dtype)

    def reciprocal(self, a):
        return self.truediv(self.constant(1, a.dtype), a)

    def rsqrt(self, a):
        return self.truediv(self.constant(1, a.dtype), self.sqrt(a))

    def sigmoid(self, a):
        one = self.constant(1, a.dtype)
        return self.truediv(one, self._var(f"{one} + libdevice.exp(-{a})", a.dtype))

    def frac(self, a):
        return self._var(f"{a} - libdevice.trunc({a})", a.dtype)

    def neg(self, a):
        return self._var(f"-{a}", a.dtype)

    def square(self, a):
        return self._var(f"{a} * {a}", a.dtype)

    def relu(self, a):
        return self._var(f"tl.where({a} < 0, {self.constant(0, a.dtype)}, {a})", a.dtype)

    def sign(self, a):
        t = TL_DTYPE[a.dtype]
        return self._var(f"({a} > 0).to({t}) - ({a} < 0).to({t})", a.dtype)

    def bitwise_not(self, a):
        if a.dtype == torch.bool:
            return self._var(f"{a} == 0", torch.bool)
        return self._var(f"~{a}", a.dtype)

    def maximum(self, a, b):
        return self._var(f"maximum({a}, {b})", a.dtype)

    def minimum(self, a, b):
        return self._var(f"minimum({a}, {b})", a.dtype)

    def clamp_min(self, a, lo):
        return self._var(f"tl.where({a} < {lo}, {lo}, {a})", a.dtype)

    def clamp_max(self, a, hi):
        return self._var(f"tl.where({a} > {hi}, {hi}, {a})", a.dtype)

    def abs(self, a):
        if a.dtype == torch.bool:
            return a
        return self._var(f"tl.abs({a})", a.dtype)

    def _rounding(self, a, fn):
        if not a.dtype.is_floating_point:
            return a
        return self._var(f"libdevice.{fn}({a})", a.dtype)

    def floor(self, a):
        return self._rounding(a, "floor")

    def ceil(self, a):
        return self._rounding(a, "ceil")

    def trunc(self, a):
        return self._rounding(a, "trunc")

    def round(self, a):
        return self._rounding(a, "nearbyint")

    def isnan(self, a):
        return self._pred(a, "{0} != {0}", "False")

    def isinf(self, a):
        return self._pred(a, 'tl.abs({0}) == float("inf")', "False")

    def isfinite(self, a):
        return self._pred(a, '({0} == {0}) & (tl.abs({0}) != float("inf"))', "True")

    def signbit(self, a):
        if a.dtype == torch.bool:
            return self.constant(False, torch.bool)
        return self._pred(a, "libdevice.signbit({0}) != 0", "{0} < 0")

    def _pred(self, a, ffmt, ifmt):
        if not a.dtype.is_floating_point and ifmt in ("True", "False"):
            return self.constant(ifmt == "True", torch.bool)
        fmt = ffmt if a.dtype.is_floating_point else ifmt
        return self._var(fmt.format(a), torch.bool)

    def logical_not(self, a):
        return self._var(f"{a} == 0", torch.bool)

    def logical_and(self, a, b):
        return self._var(f"({a} != 0) & ({b} != 0)", torch.bool)

    def logical_or(self, a, b):
        return self._var(f"({a} != 0) | ({b} != 0)", torch.bool)

    def logical_xor(self, a, b):
        return self._var(f"({a} != 0) != ({b} != 0)", torch.bool)

    def floordiv(self, a, b):
        fn = "floordiv_f" if a.dtype.is_floating_point else "floordiv_i"
        return self._var(f"{fn}({a}, {b})", a.dtype)

    def truncdiv(self, a, b):
        if a.dtype.is_floating_point:
            return self._var(f"libdevice.trunc({a} / {b})", a.dtype)
        return self._var(f"{a} // {b}", a.dtype)

    def remainder(self, a, b):
        fn = "remainder_f" if a.dtype.is_floating_point else "remainder_i"
        return self._var(f"{fn}({a}, {b})", a.dtype)

    def pow(self, a, b):
        e = self.k.const_values.get(b.name) if a.dtype.is_floating_point else None
        if e is not None and float(e) in POW_FLOAT:  # eager's pow_tensor_scalar multiplies
            return self._var(POW_FLOAT[float(e)].format(a, self.constant(1, a.dtype)), a.dtype)
        if not a.dtype.is_floating_point:
            t = TL_DTYPE[a.dtype]
            return self._var(
                f"libdevice.pow({a}.to(tl.float64), {b}.to(tl.float64)).to({t})", a.dtype
            )
        return self._var(f"libdevice.pow({a}, {b})", a.dtype)

    def __getattr__(self, name):
        if name in LIBDEVICE:
            return lambda a: self._var(f"libdevice.{LIBDEVICE[name]}({a})", a.dtype)
        if name in LIBDEVICE_BINARY:
            fn = LIBDEVICE_BINARY[name]
            return lambda a, b: self._var(f"libdevice.{fn}({a}, {b})", a.dtype)
        if name in INFIX:
            op = INFIX[name]
            if name in ("add", "mul"):  # on bools: C++'s bool(a + b), not int1 wrapping
                bop = "|" if name == "add" else "&"
                return lambda a, b: self._var(
                    f"{a} {bop if a.dtype == torch.bool else op} {b}", a.dtype
                )
            return lambda a, b: self._var(f"{a} {op} {b}", a.dtype)
        if name in COMPARE:
            op = COMPARE[name]
            return lambda a, b: self._var(f"{a} {op} {b}", torch.bool)
        raise AttributeError(f"Triton backend has no op {name!r}")


# Note [Triton: kernel structure]
# A Group's outer ranges flatten to `xindex` (XBLOCK per program, masked by xmask), its inner
# ranges to `rindex` (RBLOCK wide, masked by rmask); loop variables o0.. and r0.. are recovered by
# // and % of the flat indices, so every index expression of the loop IR (symbolic sizes are
# kernel arguments ks0..) is used as it is. Pointwise groups are 1-D blocks, groups with inner
# ranges 2-D [XBLOCK, RBLOCK] blocks; values per outer index (a reduction's result, an "outer"
# node) are [XBLOCK, 1]. A reduction whose static extent fits PERSISTENT_MAX is persistent (the
# row is one block: loop segments share loaded values); otherwise each loop segment is a loop over
# RBLOCK-wide steps with [XBLOCK, RBLOCK] accumulators reduced after the loop. Every load and store
# is masked, and its index broadcast to the block (`zero`), so a value read at an outer index
# inside a loop has the loop's shape. Masked-off lanes of a reduction hold its identity.
class TritonKernel(KernelBase):
    """Writes one Group as a Triton kernel and its launcher."""

    def __init__(self, group, graph, stores, inplace=None):
        super().__init__(group, graph, stores, inplace)
        self.handler = TritonOverrides(self)
        self.err = False
        self.zero, self.mask = "xzero", "xmask"
        self.shape = "[XBLOCK]"  # the block shape of values in the current context
        self.persistent = 0  # RBLOCK of a persistent reduction, else 0
        self.stored = False  # a store was written (a later loop reading it needs a barrier)

    def declare(self, name, expr, dtype):
        return f"{name} = {expr}"

    def load(self, name, index):
        loc = self.locals.get(name)
        if loc is not None and loc[1] == index:
            return loc[0]
        buf = self.graph.buffers[name]
        dt = buf.layout.dtype
        p = self.param_name(name)
        if reads_by_value(buf, self.graph.device):  # Note [Backend: graphs on two devices]
            t = TL_DTYPE[compute_dtype(dt)]
            if dt == torch.bool:
                return self.cse(f"(tl.full({self.shape}, 0, tl.int32) + {p}) != 0", dt)
            if dt == torch.float64:  # passed as its bits (devices.value_arg)
                bits = f"(tl.full({self.shape}, 0, tl.int64) + {p})"
                return self.cse(f"{bits}.to(tl.float64, bitcast=True)", dt)
            return self.cse(f"(tl.full({self.shape}, 0, {t}) + {p}).to({t})", compute_dtype(dt))
        expr = f"tl.load({p} + ({self.zero} + ({index_text(index)})), {self.mask}, other=0)"
        if dt in (torch.float16, torch.bfloat16):
            expr += ".to(tl.float32)"
        return self.cse(expr, compute_dtype(dt))

    def indirect(self, value, size, wrap=True):
        name = f"ix{self.n}"
        self.n += 1
        n = kexpr(size)
        w = self.code.writeline
        w(f"{name} = {value}.to(tl.int64)")
        if wrap:
            w(f"{name} = tl.where({name} < 0, {name} + {n}, {name})")
        w(f"{name}_bad = (({name} < 0) | ({name} >= {n})) & {self.mask}")
        w(f"tl.store(kiln_err + {self.zero}, 1, {name}_bad)")
        w(f'tl.device_assert({name}_bad == 0, "kiln: index out of bounds")')
        w(f"{name} = tl.where({name}_bad, 0, {name})")
        self.err = True
        set_range(name, 0, max(size - 1, 0) if type(size) is int else size - 1)
        return Ix.var(name)

    def store(self, node, role, value):
        name = node.name
        layout = node.buf.layout
        idx, _ = node.index_vars(role, self.g.outer, self.g.inner)
        ix = layout.index(idx)
        self.locals[name] = (value, ix, role == "inner" and not self.persistent)
        if name in self.stores:
            name = self.alias.get(name, name)
            self.params[name] = True
            dt = layout.dtype
            v = f"{value} != 0" if dt == torch.bool else f"{value}.to({TL_DTYPE[dt]})"
            if dt == torch.bfloat16:  # rounded to nearest even (the interpreter's cast truncates)
                v = f"round_bf16({value}.to(tl.float32)).to(tl.bfloat16)"
            if dt == torch.bool and value.dtype == torch.bool:
                v = str(value)
            self.stored = True
            ptr = f"{name} + ({self.zero} + ({index_text(ix)}))"
            self.code.writeline(f"tl.store({ptr}, {v}, {self.mask})")

    def run_node(self, node, role):
        idx, ridx = node.index_vars(role, self.g.outer, self.g.inner)
        with set_handler(self.handler):
            if node.is_reduction:
                return node.buf.data.inner_fn(idx, ridx)
            return node.buf.data.inner_fn(idx)

    # --- structure -------------------------------------------------------------------------------

    def _unflatten(self, flat, prefix, sizes):
        """o0.. (or r0..) from a flat index, row-major."""
        stride = 1
        for d in reversed(range(len(sizes))):
            s = sizes[d]
            set_range(f"{prefix}{d}", 0, s - 1)
            expr = flat if type(stride) is int and stride == 1 else f"({flat} // ({kexpr(stride)}))"
            if d > 0:
                expr = f"{expr} % ({kexpr(s)})"
            self.code.writeline(f"{prefix}{d} = {expr}")
            stride = prod([stride, s])

    def generate(self):
        g, w = self.g, self.code.writeline
        two_d = bool(g.inner)
        self.shape = "[XBLOCK, 1]" if two_d else "[XBLOCK]"
        xshape = "[:, None]" if two_d else ""
        w(f"xindex = tl.program_id(0).to(tl.int64) * XBLOCK + tl.arange(0, XBLOCK){xshape}")
        w("xmask = xindex < xnumel")
        w("xzero = xindex * 0")
        self._unflatten("xindex", "o", g.outer)
        rn = prod(g.inner) if two_d else None
        if two_d and type(rn) is int and rn <= PERSISTENT_MAX:
            self.persistent = max(_pow2(rn), 1)
            self._rloop_head("tl.arange(0, RBLOCK)[None, :].to(tl.int64)")
        for kind, nodes in g.segments:
            if kind == "loop":
                self.loop_segment(nodes)
            else:
                for n in nodes:
                    self.store(n, g.roles[n.name], self.run_node(n, g.roles[n.name]))
        return self._function(rn)

    def _rloop_head(self, rindex):
        w = self.code.writeline
        w(f"rindex = {rindex}")
        w("rmask = rindex < rnumel")
        w("xrzero = xzero + rindex * 0")
        w("xrmask = xmask & rmask")
        self._unflatten("rindex", "r", self.g.inner)

    def loop_segment(self, nodes):
        g, w = self.g, self.code.writeline
        reds = [n for n in nodes if g.roles[n.name] == "red"]
        accs = {}
        looped = not self.persistent
        if looped:
            if self.stored:
                w("tl.debug_barrier()")  # an earlier loop's stores are read below
            for n in reds:
                a = f"acc{self.n}"
                self.n += 1
                accs[n.name] = a
                adt = _acc_dtype(n)
                w(f"{a} = tl.full([XBLOCK, RBLOCK], {_identity(n)}, {TL_DTYPE[adt]})")
                if n.reduction_type in ("argmax", "argmin"):
                    w(f"{a}_i = tl.full([XBLOCK, RBLOCK], 0, tl.int64)")
                if _compensated(n):
                    w(f"{a}_c = tl.full([XBLOCK, RBLOCK], 0, tl.float32)")
                if n.reduction_type == "welford_m2":  # {a}: the lane's running mean
                    w(f"{a}_m2 = tl.full([XBLOCK, RBLOCK], 0, {TL_DTYPE[adt]})")
                    w(f"{a}_n = tl.full([XBLOCK, RBLOCK], 0, {TL_DTYPE[adt]})")
            w("for roffset in range(0, rnumel, RBLOCK):")
            self.code.level += 1
            self._rloop_head("roffset + tl.arange(0, RBLOCK)[None, :].to(tl.int64)")
            self.scopes.append({})
        self.zero, self.mask, self.shape = "xrzero", "xrmask", "[XBLOCK, RBLOCK]"
        values = {}
        for n in nodes:
            role = g.roles[n.name]
            v = self.run_node(n, role)
            if role == "inner":
                self.store(n, role, v)
                continue
            adt = _acc_dtype(n)
            if v.dtype != adt:
                v = self.cse(f"{v}.to({TL_DTYPE[adt]})", adt)
            masked = self.cse(f"tl.where(xrmask, {v}, {_identity(n)})", adt)
            if not looped:
                values[n.name] = masked
                continue
            a, rt = accs[n.name], n.reduction_type
            if _compensated(n):  # Note [Triton: compensated float32 sums]
                w(f"{a}_y = {masked} - {a}_c")
                w(f"{a}_t = {a} + {a}_y")
                w(f"{a}_c = ({a}_t - {a}) - {a}_y")
                w(f"{a} = {a}_t")
            elif rt == "welford_m2":  # Note [Triton: variance in one pass]
                t = TL_DTYPE[adt]
                w(f"{a}_nn = {a}_n + xrmask.to({t})")
                w(f"{a}_d = {masked} - {a}")
                w(f"{a} = tl.where(xrmask, {a} + {a}_d / tl.maximum({a}_nn, 1.0), {a})")
                w(f"{a}_m2 = tl.where(xrmask, {a}_m2 + {a}_d * ({masked} - {a}), {a}_m2)")
                w(f"{a}_n = {a}_nn")
            elif rt == "sum":
                w(f"{a} = {a} + {masked}")
            elif rt == "prod":
                w(f"{a} = {a} * {masked}")
            elif rt in ("max", "any"):
                w(f"{a} = maximum({a}, {masked})")
            elif rt in ("min", "all"):
                w(f"{a} = minimum({a}, {masked})")
            else:  # argmax/argmin: a lane keeps its first best (indices grow along the loop)
                cmp = ">" if rt == "argmax" else "<"
                take = f"({masked} {cmp} {a}) | (({masked} != {masked}) & ({a} == {a}))"
                w(f"{a}_take = {take}")
                w(f"{a} = tl.where({a}_take, {masked}, {a})")
                w(f"{a}_i = tl.where({a}_take, rindex + xrzero, {a}_i)")
        if looped:
            self.scopes.pop()
            self.code.level -= 1
            self.locals = {k: v for k, v in self.locals.items() if not v[2]}
        self.zero, self.mask, self.shape = "xzero", "xmask", "[XBLOCK, 1]"
        for n in reds:
            rt = n.reduction_type
            src = accs[n.name] if looped else values[n.name]
            if rt in ("argmax", "argmin"):
                idx = f"{src}_i" if looped else "rindex + xrzero"
                w(f"red{self.n} = red_{rt}({src}, {idx}, 1)")
            elif looped and _compensated(n):
                w(f"red{self.n} = red_sum({src} - {src}_c, 1)")
            elif rt == "welford_m2":  # persistent: one element a lane, the exact two passes
                t = TL_DTYPE[_acc_dtype(n)]
                parts = f"{src}_m2, {src}_n" if looped else f"{src} * 0, xrmask.to({t})"
                w(f"red{self.n} = red_welford_m2({src}, {parts}, 1)")
            else:
                fn = {"any": "max", "all": "min"}.get(rt, rt)
                w(f"red{self.n} = red_{fn}({src}, 1)")
            od = compute_dtype(n.buf.layout.dtype)
            expr = f"red{self.n}[:, None]"
            self.n += 1
            if rt in ("any", "all") or od == torch.bool:
                expr = f"{expr} != 0"
            elif _acc_dtype(n) != od:
                expr = f"{expr}.to({TL_DTYPE[od]})"
            self.store(n, "red", self.cse(expr, od))

    def _function(self, rnumel):
        g = self.g
        params = list(self.params)
        text = "\n".join(self.code.lines)
        sizes = sorted(set(_SIZE_ARG.findall(text)), key=int) if "ks" in text else []
        outer = prod(g.outer)
        extra = set(_SIZE_ARG.findall(kexpr(outer) + " " + kexpr(rnumel or 0)))
        sizes = sorted(set(sizes) | extra, key=int)
        args = params + [f"ks{k}" for k in sizes]
        sig = args + ["xnumel"] + (["rnumel"] if g.inner else []) + (["kiln_err"] * self.err)
        out = IndentedBuffer()
        out.writeline("@triton.jit")
        consts = "XBLOCK: tl.constexpr" + (", RBLOCK: tl.constexpr" if g.inner else "")
        out.writeline(f"def {g.name}_tl({', '.join(sig)}, {consts}):")
        dtypes = (f"{p} {str(self.graph.buffers[p].layout.dtype)[6:]}" for p in params)
        out.writeline(f"    # {', '.join(dtypes)}")  # Note [Triton: launches on CUDA]
        out.lines += self.code.lines
        out.writeline("")
        out.writeline("")
        out.writeline(f"def {g.name}({', '.join(args)}):")
        rn = kexpr(rnumel) if g.inner else "None"
        out.writeline(
            f"    return launch({g.name}_tl, ({''.join(a + ', ' for a in args)}), "
            f"{kexpr(outer)}, {rn}, {self.persistent}, {self.err}"
            f"{', tune=True' if modes.current('max_autotune') else ''})"
        )
        return out.getvalue(), args


_SIZE_ARG = re.compile(r"\bks(\d+)\b")


def _pow2(n):
    return 1 << max(int(n) - 1, 0).bit_length()


# Note [Triton: compensated float32 sums]
# A looped float32 sum adds each lane's elements in order (RBLOCK lanes, rnumel / RBLOCK steps
# each), then the lanes as a tree. Over millions of elements a plain float32 running sum loses
# ~1e-5 relative (eager's cascade sum ~1e-7; the C++ kernels accumulate in double): the lanes
# carry Kahan compensations (4 flops per element in a memory-bound loop), folded in at the end.
def _compensated(n):
    return n.reduction_type == "sum" and _acc_dtype(n) == torch.float32


# Note [Triton: variance in one pass]
# var/var_mean over a reduction that does not fit one block (looped) lower to a sum (the mean)
# and a `welford_m2` reduction, the sum of squared deviations from the mean, side by side in one
# loop: x is read once, where the two-pass form (mean, then sum((x - mean)**2)) reads it twice.
# Each lane keeps Welford's running (mean, m2, count) over the elements it sees; the lanes are
# combined at the end as sum(m2) + sum(count * (mean - row mean)**2). A reduction that fits one
# block keeps the two passes (its data is in registers: exact and free), as does the C++ path.
def _acc_dtype(n):
    vd = compute_dtype(n.buf.data.src_dtype)
    rt = n.reduction_type
    if rt in ("sum", "prod", "welford_m2"):
        return vd if vd.is_floating_point else torch.int64
    if rt in ("any", "all") or vd == torch.bool:
        return torch.int32
    return vd


def _identity(n):
    rt = n.reduction_type
    adt = _acc_dtype(n)
    if rt in ("sum", "any", "welford_m2"):
        return "0"
    if rt == "prod" or rt == "all":
        return "1"
    lowest = rt in ("max", "argmax")
    if adt.is_floating_point:
        return f'float("{"-" if lowest else ""}inf")'
    info = torch.iinfo(adt)
    return str(info.min if lowest else info.max)


PRELUDE = """import torch
import triton
import triton.language as tl

from kiln.backend.codegen.triton_helpers import *  # noqa: F403
from kiln.backend.codegen.triton_helpers import libdevice, launch  # noqa: F401
"""


def generate_triton(graph, groups, stores, inplace=None, write_template=None):
    """The module source of all kernel groups: (source, {kernel name: [params]});
    `write_template(group, ...)` writes a matmul template's group (or returns None)."""
    parts = [PRELUDE]
    signatures = {}
    for g in groups:
        if isinstance(g, Group):
            made = None
            if g.template and write_template:  # Note [Triton: the matmul template]
                made = write_template(g, graph, stores, inplace or {})
            src, params = made or TritonKernel(g, graph, stores, inplace or {}).generate()
            parts.append(src)
            signatures[g.name] = params
    return "\n\n".join(parts), signatures


class TritonWrapperCodegen(WrapperCodegen):
    """The wrapper generator for Triton kernels: kernels take tensors, not pointers."""

    def kernel_arg(self, p):
        if _SIZE_ARG.fullmatch(p):
            return p[1:]
        buf = self.graph.buffers.get(p)
        if buf is not None and reads_by_value(buf, self.graph.device):
            return value_arg(p, buf.layout.dtype)  # Note [Backend: graphs on two devices]
        return p


_modules = {}  # source hash -> loaded module


def load_module(source):
    """The generated module of a source, written below the cache dir (Triton reads its kernels'
    source files) and imported once per process."""
    key = hashlib.sha256(source.encode()).hexdigest()[:40]
    mod = _modules.get(key)
    if mod is not None:
        return mod
    d = os.path.join(config.cache_dir, "triton")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"k{key}.py")
    if not os.path.exists(path):
        fd, tmp = tempfile.mkstemp(suffix=".tmp", dir=d)
        with os.fdopen(fd, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(f"kiln_triton_{key}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    _modules[key] = mod
    return mod


def check_runnable(graph):
    """Raise GraphNotSupported where Triton cannot run this graph's kernels."""
    try:
        import triton  # noqa: F401
    except ImportError as e:
        raise GraphNotSupported(
            f"Triton is not installed (pip install torch-kiln[gpu]): {e}"
        ) from e
    cpu = getattr(graph, "device", torch.device("cpu")).type == "cpu"
    if cpu and os.environ.get("TRITON_INTERPRET", "0") != "1":
        raise GraphNotSupported("Triton kernels for CPU tensors need TRITON_INTERPRET=1")
