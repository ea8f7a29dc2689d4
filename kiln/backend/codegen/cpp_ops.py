"""C++ for pointwise ops: the prelude every kernel includes, the per-op expression tables and
`CppOverrides`, the handler that turns ops into C++ expressions (kernels: cpp.py)."""

import torch

from kiln.backend.codegen import cpp_tiling, vecmath
from kiln.backend.codegen.common import CSEVar, compute_ctype, compute_dtype, cpp_constant
from kiln.backend.ir import Ix

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
