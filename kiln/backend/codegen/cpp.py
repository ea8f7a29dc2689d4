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
    cpp_constant,
    storage_ctype,
)
from kiln.backend.codegen.cpp_reductions import (
    SUM_CHUNK,
    ColumnReductions,
    _acc_ctype,
    _extreme,
)
from kiln.backend.codegen.cpp_transpose import LoopOrders
from kiln.backend.ir import Ix, cexpr, prod, set_handler, set_range, size_hint
from kiln.backend.scheduler import Group

PRELUDE = r"""
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <omp.h>

static inline float kiln_bf16_to_f(uint16_t x) {
    uint32_t u = static_cast<uint32_t>(x) << 16; float f; std::memcpy(&f, &u, 4); return f;
}
static inline uint16_t kiln_f_to_bf16(float f) {
    uint32_t u; std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
}
static inline float kiln_round_bf16(float f) { return kiln_bf16_to_f(kiln_f_to_bf16(f)); }
// float16 as its bits, converted with integer and float arithmetic and selects by mask (exact,
// round to nearest even, subnormals, inf and nan as eager's casts): gcc 12 vectorizes no loop over
// _Float16 conversions, and vectorizes these (Note [Codegen: low-precision floats])
static inline float kiln_f16_to_f(uint16_t x) {
    uint32_t u = static_cast<uint32_t>(x & 0x7fffu) << 13; float f; std::memcpy(&f, &u, 4);
    f *= 5.192296858534828e+33f;  // 2^112 rebiases the exponent; subnormals come out exact
    std::memcpy(&u, &f, 4);
    u |= 0x7f800000u & (0u - static_cast<uint32_t>((x & 0x7c00u) == 0x7c00u));  // inf, nan
    u |= static_cast<uint32_t>(x & 0x8000u) << 16;
    std::memcpy(&f, &u, 4); return f;
}
static inline uint16_t kiln_f_to_f16(float f) {
    uint32_t u; std::memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    u &= 0x7fffffffu;
    uint32_t big = 0x7c00u | (0x200u & (0u - static_cast<uint32_t>(u > 0x7f800000u)));
    float a; std::memcpy(&a, &u, 4);
    float d = a + 0.5f;  // a subnormal result: the float adder rounds it to nearest even
    uint32_t du; std::memcpy(&du, &d, 4);
    uint32_t sub = du - 0x3f000000u;
    uint32_t norm = (u + 0xc8000fffu + ((u >> 13) & 1u)) >> 13;
    uint32_t m_big = 0u - static_cast<uint32_t>(u >= 0x47800000u);
    uint32_t m_sub = 0u - static_cast<uint32_t>(u < 0x38800000u);
    return static_cast<uint16_t>((big & m_big) | (~m_big & ((sub & m_sub) | (norm & ~m_sub))) | sign);
}
static inline float kiln_round_f16(float f) { return kiln_f16_to_f(kiln_f_to_f16(f)); }
template <typename T> static inline T kiln_maximum(T a, T b) {  // a tie gives b, as eager
    return a != a ? a : (b != b ? b : (a > b ? a : b));
}
template <typename T> static inline T kiln_minimum(T a, T b) {
    return a != a ? a : (b != b ? b : (a < b ? a : b));
}
template <typename T> static inline T kiln_floordiv_f(T a, T b) {
    if (b == 0) return a / b;
    T mod = std::fmod(a, b);
    T div = (a - mod) / b;
    if ((mod != 0) && ((b < 0) != (mod < 0))) div -= 1;
    if (div == 0) return std::copysign(T(0), a / b);
    T fl = std::floor(div);
    if (div - fl > T(0.5)) fl += 1;
    return fl;
}
template <typename T> static inline T kiln_remainder_f(T a, T b) {
    T m = std::fmod(a, b);
    if (m != 0 && ((b < 0) != (m < 0))) m += b;
    return m;
}
template <typename T> static inline T kiln_floordiv_i(T a, T b) {
    T q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;
    return q;
}
static inline int64_t kiln_floordiv_idx(int64_t a, int64_t b) {
    int64_t q = a / b; if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1; return q;
}
static inline int64_t kiln_mod_idx(int64_t a, int64_t b) { int64_t m = a % b; return m < 0 ? m + b : m; }
static inline int64_t kiln_clamp_idx(int64_t a, int64_t n) {
    return a < 0 ? 0 : (a >= n ? (n > 0 ? n - 1 : 0) : a);
}
template <typename T> static inline T kiln_sign(T a) { return static_cast<T>((T(0) < a) - (a < T(0))); }
// Vectorizable float exp/erf/tanh (gcc inlines and vectorizes them; std:: versions are calls).
// exp: range reduction x = n*ln2 + r, degree-7 Taylor on |r| <= ln2/2 (error < 1 ulp + Horner),
// exact overflow/underflow/NaN behaviour; erf: the rational form eager's vectorized erf uses.
// select without a branch: gcc 12 vectorizes no loop with both a call and a branch (vecmath.py)
static inline float kiln_self(bool c, float a, float b) {
    uint32_t ua, ub; std::memcpy(&ua, &a, 4); std::memcpy(&ub, &b, 4);
    uint32_t m = 0u - static_cast<uint32_t>(c), r = (ua & m) | (ub & ~m);
    float f; std::memcpy(&f, &r, 4); return f;
}
static inline float kiln_bits_to_f(int32_t i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline float kiln_expf(float x) {
    float xc = x < -103.0f ? -103.0f : (x > 89.0f ? 89.0f : x);
    float n = std::nearbyint(xc * 1.44269504088896341f);
    float r = xc - n * 0.693145751953125f;
    r = r - n * 1.428606765330187045e-06f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    p = p + r * r * r * r * r * r * r * r * (1.0f / 40320.0f);
    int32_t ni = static_cast<int32_t>(n);
    int32_t h = ni / 2;
    float s1 = kiln_bits_to_f((h + 127) << 23);
    float s2 = kiln_bits_to_f((ni - h + 127) << 23);
    float res = p * s1 * s2;
    res = x > 88.72283935546875f ? std::numeric_limits<float>::infinity() : res;
    res = x < -103.97208f ? 0.0f : res;
    return x != x ? x : res;
}
static inline float kiln_erff_e(float x, float e) {  // e = exp(-x * x)
    float ax = std::fabs(x);
    float t = 1.0f / (1.0f + 0.3275911f * ax);
    float p = 1.061405429f;
    p = p * t - 1.453152027f;
    p = p * t + 1.421413741f;
    p = p * t - 0.284496736f;
    p = p * t + 0.254829592f;
    float y = 1.0f - p * t * e;
    return std::copysign(y, x);  // no branch: gcc 12 vectorizes no loop with calls and branches
}
static inline float kiln_erff(float x) { return kiln_erff_e(x, kiln_expf(-x * x)); }
static inline float kiln_tanhf(float x) {
    float ax = std::fabs(x);
    float e = kiln_expf(2.0f * (ax > 20.0f ? 20.0f : ax));
    float big = 1.0f - 2.0f / (e + 1.0f);
    float x2 = ax * ax;
    float small = ax * (1.0f + x2 * (-1.0f / 3.0f + x2 * (2.0f / 15.0f + x2 * (-17.0f / 315.0f))));
    float y = ax < 0.0625f ? small : big;
    return x != x ? x : std::copysign(y, x);
}
extern "C" void kiln_set_num_threads(int n) { if (n > 0) omp_set_num_threads(n); }
"""

PARALLEL_MIN = 1 << 15  # elements of work below which a kernel runs on one thread

FLOAT_UNARY = {
    "exp": "std::exp({0})",
    "exp2": "std::exp2({0})",
    "expm1": "std::expm1({0})",
    "log": "std::log({0})",
    "log2": "std::log2({0})",
    "log10": "std::log10({0})",
    "log1p": "std::log1p({0})",
    "sqrt": "std::sqrt({0})",
    "rsqrt": "{1}(1) / std::sqrt({0})",
    "sin": "std::sin({0})",
    "cos": "std::cos({0})",
    "tan": "std::tan({0})",
    "asin": "std::asin({0})",
    "acos": "std::acos({0})",
    "atan": "std::atan({0})",
    "sinh": "std::sinh({0})",
    "cosh": "std::cosh({0})",
    "tanh": "std::tanh({0})",
    "asinh": "std::asinh({0})",
    "acosh": "std::acosh({0})",
    "atanh": "std::atanh({0})",
    "erf": "std::erf({0})",
    "erfc": "std::erfc({0})",
    "lgamma": "std::lgamma({0})",
    "sigmoid": "{1}(1) / ({1}(1) + std::exp(-{0}))",
    "reciprocal": "{1}(1) / {0}",
    "frac": "{0} - std::trunc({0})",
}
SAME_UNARY = {
    "neg": "-{0}",
    "square": "{0} * {0}",
    "relu": "{0} < {1}(0) ? {1}(0) : {0}",
    "sign": "kiln_sign<{1}>({0})",
    "bitwise_not": "~{0}",
}
BINARY = {
    "add": "{0} + {1}",
    "sub": "{0} - {1}",
    "mul": "{0} * {1}",
    "truediv": "{0} / {1}",
    "maximum": "kiln_maximum<{2}>({0}, {1})",
    "minimum": "kiln_minimum<{2}>({0}, {1})",
    "pow": "std::pow({0}, {1})",
    "atan2": "std::atan2({0}, {1})",
    "hypot": "std::hypot({0}, {1})",
    "fmod": "std::fmod({0}, {1})",
    "remainder": "kiln_remainder_f<{2}>({0}, {1})",
    "bitwise_and": "{0} & {1}",
    "bitwise_or": "{0} | {1}",
    "bitwise_xor": "{0} ^ {1}",
}
# exactly commutative in IEEE arithmetic and in wrapping integers (not max/min: NaN and -0.0)
COMMUTATIVE = ("add", "mul", "bitwise_and", "bitwise_or", "bitwise_xor")
COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


# float32/float64 pow(x, scalar) as eager's pow_tensor_scalar computes it (2 and 0.5 are lowered earlier)
POW_FLOAT32 = {3.0: "{0} * {0} * {0}", -1.0: "{1} / {0}", -2.0: "{1} / ({0} * {0})"}
# float32 ops kept inline (the prelude's polynomials) rather than Sleef calls: none today (Sleef's
# expf_u10 is faster than kiln_expf); the prelude's versions serve where Sleef is missing
VECMATH_INLINE = set()
# float32 versions that vectorize (see the prelude) where Sleef is missing; double keeps std::
FLOAT32_UNARY = {
    "exp": "kiln_expf({0})",
    "erf": "kiln_erff({0})",
    "tanh": "kiln_tanhf({0})",
    "sigmoid": "1.0f / (1.0f + kiln_expf(-{0}))",
}


class CppOverrides:
    """The ops handler that writes C++ statements into the current scope of a KernelWriter."""

    def __init__(self, writer):
        self.w = writer

    def _var(self, expr, dtype):
        return self.w.cse(expr, dtype)

    def _vecmath(self, name, *args):
        """A float32/float64 call of Sleef's vector function for `name` (see vecmath.py), or
        None."""
        dtype = args[0].dtype
        if name in VECMATH_INLINE or dtype not in (torch.float32, torch.float64):
            return None
        found = vecmath.call(name, args, dtype)
        if found is None:
            return None
        expr, key = found
        self.w.vec_ops.add(key)
        return self._var(expr, dtype)

    def load(self, name, index):
        return self.w.load(name, index)

    def constant(self, value, dtype):
        cd = compute_dtype(dtype)
        text = cpp_constant(value, cd)
        if cd.is_floating_point:
            self.w.const_values[text] = float(value)
        elif cd != torch.bool:
            self.w.int_values[text] = int(value)
        return CSEVar(text, cd)

    def pow(self, a, b):
        # eager's pow(tensor, scalar) multiplies for these exponents (float32 bit for bit)
        floating = a.dtype in (torch.float32, torch.float64)
        e = self.w.const_values.get(str(b)) if floating else None
        if e in POW_FLOAT32:  # float64 too (eager's pow_tensor_scalar does the same)
            one = "1.0f" if a.dtype == torch.float32 else "1.0"
            return self._var(POW_FLOAT32[e].format(a, one), a.dtype)
        return self.__getattr__("pow")(a, b)

    def index_expr(self, index, dtype):
        cd = compute_dtype(dtype)
        ix = Ix.wrap(index)
        v = self._var(f"static_cast<{compute_ctype(cd)}>({ix.render()})", cd)
        if cd == torch.int64:
            self.w.index_vals[v.name] = ix
        return v

    def _compare(self, name, a, b):
        # a comparison of the loop index that the loop's range decides folds to a constant
        # (Note [Codegen: inner-loop pieces]: cat's `i < 256` inside one segment)
        ix, c = self.w.index_vals.get(a.name), self.w.int_values.get(b.name)
        if ix is not None and c is not None:
            t = cpp_tiling.decide(name, ix, c)
            if t is not None:
                return CSEVar("true" if t else "false", torch.bool)
        return self._var(f"{a} {COMPARE[name]} {b}", torch.bool)

    def indirect_indexing(self, value, size, wrap=True):
        return self.w.indirect(value, size, wrap)

    # Note [Codegen: low-precision floats]
    # bfloat16 and float16 buffers are stored as their 16 bits (uint16_t), loaded into float,
    # computed in float and rounded to nearest even at the store, as eager's kernels compute each
    # op (a fused chain keeps its intermediates in float, as inductor does; an explicit `.to()`
    # rounds in place, kiln_round_*). The conversions are integer/float arithmetic with selects
    # by mask, so loops over them vectorize like float loops (gcc vectorizes no _Float16 cast).
    def to_dtype(self, x, dtype, src=None):
        if dtype == torch.bfloat16:
            return self._var(f"kiln_round_bf16(static_cast<float>({x}))", torch.float32)
        if dtype == torch.float16:
            return self._var(f"kiln_round_f16(static_cast<float>({x}))", torch.float32)
        if x.dtype == dtype:
            return x
        return self._var(f"static_cast<{compute_ctype(dtype)}>({x})", dtype)

    def where(self, c, a, b):
        if c.name in ("true", "false"):
            return a if c.name == "true" else b
        if a.dtype == torch.float32:  # bit for bit the same, and no branch
            return self._var(f"kiln_self({c}, {a}, {b})", a.dtype)
        return self._var(f"{c} ? {a} : {b}", a.dtype)

    def relu(self, a):
        if a.dtype == torch.float32:
            return self._var(f"kiln_self({a} < 0.0f, 0.0f, {a})", a.dtype)
        return self._var(SAME_UNARY["relu"].format(a, compute_ctype(a.dtype)), a.dtype)

    # float32 max/min/clamp select bits (kiln_self): the ?: chains below are branches to gcc
    def maximum(self, a, b):
        if a.dtype == torch.float32:  # NaN wins; a tie gives b (signed zeros as eager)
            return self._var(f"kiln_self(({a} > {b}) | ({a} != {a}), {a}, {b})", a.dtype)
        return self._var(BINARY["maximum"].format(a, b, compute_ctype(a.dtype)), a.dtype)

    def minimum(self, a, b):
        if a.dtype == torch.float32:
            return self._var(f"kiln_self(({a} < {b}) | ({a} != {a}), {a}, {b})", a.dtype)
        return self._var(BINARY["minimum"].format(a, b, compute_ctype(a.dtype)), a.dtype)

    def clamp_min(self, a, lo):
        if a.dtype == torch.float32:  # a NaN stays (NaN < lo is false)
            return self._var(f"kiln_self({a} < {lo}, {lo}, {a})", a.dtype)
        if a.dtype.is_floating_point:
            return self._var(f"{a} != {a} ? {a} : ({a} < {lo} ? {lo} : {a})", a.dtype)
        return self._var(f"{a} < {lo} ? {lo} : {a}", a.dtype)

    def clamp_max(self, a, hi):
        if a.dtype == torch.float32:
            return self._var(f"kiln_self({a} > {hi}, {hi}, {a})", a.dtype)
        if a.dtype.is_floating_point:
            return self._var(f"{a} != {a} ? {a} : ({a} > {hi} ? {hi} : {a})", a.dtype)
        return self._var(f"{a} > {hi} ? {hi} : {a}", a.dtype)

    def abs(self, a):
        if a.dtype == torch.bool:
            return a
        return self._var(f"std::abs({a})", a.dtype)

    def floor(self, a):
        return self._rounding(a, "std::floor")

    def ceil(self, a):
        return self._rounding(a, "std::ceil")

    def trunc(self, a):
        return self._rounding(a, "std::trunc")

    def round(self, a):
        return self._rounding(a, "std::nearbyint")

    def _rounding(self, a, fn):
        if not a.dtype.is_floating_point:
            return a
        return self._var(f"{fn}({a})", a.dtype)

    def isnan(self, a):
        return self._pred(a, "std::isnan({0})", "false")

    def isinf(self, a):
        return self._pred(a, "std::isinf({0})", "false")

    def isfinite(self, a):
        return self._pred(a, "std::isfinite({0})", "true")

    def signbit(self, a):
        if a.dtype == torch.bool:
            return CSEVar("false", torch.bool)
        return self._pred(a, "std::signbit({0})", "{0} < 0")

    def _pred(self, a, ffmt, ifmt):
        fmt = ffmt if a.dtype.is_floating_point else ifmt
        return self._var(fmt.format(a), torch.bool)

    def logical_not(self, a):
        return self._var(f"!static_cast<bool>({a})", torch.bool)

    def logical_and(self, a, b):
        return self._logical(a, b, "false", "&&")

    def logical_or(self, a, b):
        return self._logical(a, b, "true", "||")

    def _logical(self, a, b, absorbing, op):
        """`a op b` on bools, folding the absorbing constant and dropping the identity."""
        identity = "true" if absorbing == "false" else "false"
        if absorbing in (a.name, b.name):
            return CSEVar(absorbing, torch.bool)
        if a.name == identity and b.dtype == torch.bool:
            return b
        if b.name == identity and a.dtype == torch.bool:
            return a
        return self._var(f"static_cast<bool>({a}) {op} static_cast<bool>({b})", torch.bool)

    def logical_xor(self, a, b):
        return self._var(f"static_cast<bool>({a}) != static_cast<bool>({b})", torch.bool)

    def floordiv(self, a, b):
        t = compute_ctype(a.dtype)
        fn = "kiln_floordiv_f" if a.dtype.is_floating_point else "kiln_floordiv_i"
        return self._var(f"{fn}<{t}>({a}, {b})", a.dtype)

    def truncdiv(self, a, b):
        if a.dtype.is_floating_point:
            return self._var(f"std::trunc({a} / {b})", a.dtype)
        return self._var(f"{a} / {b}", a.dtype)

    def __getattr__(self, name):
        if name in FLOAT_UNARY:

            def unary(a):
                fmt = FLOAT_UNARY[name]
                if a.dtype == torch.float32 and name == "erf":
                    e = self._vecmath("exp", self._var(f"-{a} * {a}", a.dtype))
                    if e is not None:  # eager's vectorized erf, with the vector exp
                        return self._var(f"kiln_erff_e({a}, {e})", a.dtype)
                if a.dtype in (torch.float32, torch.float64) and name == "sigmoid":
                    e = self._vecmath("exp", self._var(f"-{a}", a.dtype))
                    one = "1.0f" if a.dtype == torch.float32 else "1.0"
                    if e is not None:  # as eager: 1 / (1 + exp(-x)) with the vector exp
                        return self._var(f"{one} / ({one} + {e})", a.dtype)
                vec = self._vecmath(name, a)
                if vec is not None:
                    return vec
                if a.dtype == torch.float32:
                    fmt = FLOAT32_UNARY.get(name, fmt)
                return self._var(fmt.format(a, compute_ctype(a.dtype)), a.dtype)

            return unary
        if name in SAME_UNARY:
            fmt = SAME_UNARY[name]
            return lambda a: self._var(fmt.format(a, compute_ctype(a.dtype)), a.dtype)
        if name in BINARY:
            fmt = BINARY[name]

            def binary(a, b):
                if name in COMMUTATIVE and a.dtype == b.dtype and str(b) < str(a):
                    a, b = b, a  # one spelling per value: CSE finds x*y == y*x
                vec = self._vecmath(name, a, b)
                if vec is not None:
                    return vec
                return self._var(fmt.format(a, b, compute_ctype(a.dtype)), a.dtype)

            return binary
        if name in COMPARE:
            return lambda a, b: self._compare(name, a, b)
        raise AttributeError(f"C++ backend has no op {name!r}")


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


def generate_cpp(graph, groups, stores, nthreads, inplace=None):
    """The translation unit for all kernel groups: (source, {kernel name: [buffer params]})."""
    parts = [PRELUDE]
    signatures = {}
    vec_ops = set()
    for g in groups:
        if isinstance(g, Group):
            writer = KernelWriter(g, graph, stores, nthreads, inplace or {})
            src, params = writer.generate()
            parts.append(src)
            signatures[g.name] = params
            vec_ops |= writer.vec_ops
    parts.insert(1, vecmath.prelude(vec_ops))
    parts.append(python_entry(list(signatures)))
    return "\n".join(parts), signatures


# Note [C++: Python entry points]
# The wrapper calls each kernel once per graph run. Through ctypes a call costs about 1.2 us
# (argument conversion by `argtypes`, a foreign-call frame); through a METH_FASTCALL function of
# a Python extension module it costs under 0.1 us. So each translation unit ends with such a
# module, `kiln_kernels`: one function per kernel that converts its int arguments (pointers from
# `data_ptr()`, sizes) to the kernel's parameter types, releases the GIL around the kernel as
# ctypes does, and returns its int result. It is compiled only where Python.h is found
# (codecache adds -DKILN_PY_ENTRY); elsewhere, or with config.cpp_python_entry off, the same
# .so is called through ctypes. A decode step of a small decoder runs 14 kernels.
PY_ENTRY_PRELUDE = r"""
#ifdef KILN_PY_ENTRY
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <tuple>
#include <type_traits>
#include <utility>
template <typename T> static inline T kiln_py_arg(PyObject* o) {
    if constexpr (std::is_pointer_v<T>) return static_cast<T>(PyLong_AsVoidPtr(o));
    else return static_cast<T>(PyLong_AsLongLong(o));
}
template <typename... A, size_t... I>
static PyObject* kiln_py_call(int (*f)(A...), PyObject* const* a, Py_ssize_t n,
                              std::index_sequence<I...>) {
    if (n != (Py_ssize_t)sizeof...(A)) {
        PyErr_Format(PyExc_TypeError, "a kiln kernel takes %d arguments, got %zd",
                     (int)sizeof...(A), n);
        return nullptr;
    }
    std::tuple<A...> args{kiln_py_arg<A>(a[I])...};
    if (PyErr_Occurred()) return nullptr;
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = std::apply(f, args);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(r);
}
template <typename... A>
static PyObject* kiln_py(int (*f)(A...), PyObject* const* a, Py_ssize_t n) {
    return kiln_py_call(f, a, n, std::index_sequence_for<A...>{});
}
"""


def python_entry(names):
    """The `kiln_kernels` extension module of a translation unit (Note [C++: Python entry
    points]): a METH_FASTCALL function per kernel."""
    lines = [PY_ENTRY_PRELUDE]
    for k in names:
        lines.append(
            f"static PyObject* kiln_py_{k}(PyObject*, PyObject* const* a, Py_ssize_t n) "
            f"{{ return kiln_py({k}, a, n); }}"
        )
    table = "".join(
        f'    {{"{k}", (PyCFunction)(void (*)(void))kiln_py_{k}, METH_FASTCALL, nullptr}},\n'
        for k in names
    )
    lines.append(
        f"static PyMethodDef kiln_py_methods[] = {{\n{table}    {{nullptr, nullptr, 0, nullptr}}}};"
    )
    lines.append(
        "static struct PyModuleDef kiln_py_module = "
        '{PyModuleDef_HEAD_INIT, "kiln_kernels", nullptr, -1, kiln_py_methods};'
    )
    lines.append(
        "PyMODINIT_FUNC PyInit_kiln_kernels(void) { return PyModule_Create(&kiln_py_module); }"
    )
    lines.append("#endif")
    return "\n".join(lines)
