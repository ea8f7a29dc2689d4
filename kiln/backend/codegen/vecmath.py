"""Vectorized float32 math for generated C++: Sleef's vector functions from libtorch_cpu.

# Note [Vecmath: how gcc vectorizes sin]
A loop calling libm's scalar `sinf` stays scalar. gcc vectorizes a call only to a function declared
`#pragma omp declare simd`: it then calls the function's vector variant, named by the x86 vector
ABI (`_ZGVeN16v_<name>`: AVX-512, 16 lanes, one vector argument). libtorch_cpu exports Sleef's
vector functions under exactly such names (`_ZGVeN16v_Sleef_sinf_u10`), the ones eager's
`at::vec::Vectorized<float>` calls, so kiln's kernels compute what eager computes (Sleef `u10`:
at most 1 ULP; NaN, inf and signed zeros as Sleef defines them) at SIMD speed.

Each used function `kiln_<f>` is declared `declare simd` and never defined in C++ (a definition
would make gcc clone its body instead); assembler aliases give it a scalar body (one lane of the
vector call, for loop tails and unvectorized loops) and a vector body (a jump through a pointer).
The declarations say `const` (a pure function of the arguments: the pointer it reads is set
once, before any call): gcc 12 if-converts (and so vectorizes) a loop with branches only when its
calls are const. A constructor resolves the pointers with dlsym on the libtorch_cpu already loaded,
found by soname with RTLD_NOLOAD: never by path, since a shared object cached by another
environment would map a second libtorch, whose static registrations abort the process. The
shared object links against nothing and compiles as fast as before; a symbol that is missing at run
time falls back to the libm function lane by lane. Without AVX2 the functions are plain libm calls.
"""

import ctypes
import functools
import os

import torch

# kiln op -> (Sleef function, libm fallback, arity), float32; the accuracy eager's vec code uses.
# asinh and acosh stay libm: Sleef's return inf beyond |x| ~ 1.8e19.
SLEEF_F32 = {
    "exp": ("expf_u10", "std::exp", 1),
    "exp2": ("exp2f_u10", "std::exp2", 1),
    "expm1": ("expm1f_u10", "std::expm1", 1),
    "log": ("logf_u10", "std::log", 1),
    "log2": ("log2f_u10", "std::log2", 1),
    "log10": ("log10f_u10", "std::log10", 1),
    "log1p": ("log1pf_u10", "std::log1p", 1),
    "sin": ("sinf_u35", "std::sin", 1),  # Note [Vecmath: sin and cos at 3.5 ULP]
    "cos": ("cosf_u35", "std::cos", 1),
    "tan": ("tanf_u10", "std::tan", 1),
    "asin": ("asinf_u10", "std::asin", 1),
    "acos": ("acosf_u10", "std::acos", 1),
    "atan": ("atanf_u10", "std::atan", 1),
    "sinh": ("sinhf_u10", "std::sinh", 1),
    "cosh": ("coshf_u10", "std::cosh", 1),
    "tanh": ("tanhf_u10", "std::tanh", 1),
    "atanh": ("atanhf_u10", "std::atanh", 1),
    "erfc": ("erfcf_u15", "std::erfc", 1),
    "lgamma": ("lgammaf_u10", "std::lgamma", 1),
    "pow": ("powf_u10", "std::pow", 2),
    "atan2": ("atan2f_u10", "std::atan2", 2),
    "hypot": ("hypotf_u05", "std::hypot", 2),
    "fmod": ("fmodf", "std::fmod", 2),
}

# kiln op -> (Sleef function, libm fallback, arity), float64: what eager's Vectorized<double> calls
SLEEF_F64 = {
    op: (fn.replace("f_", "_").removesuffix("f"), libm, arity)
    for op, (fn, libm, arity) in SLEEF_F32.items()
}
SLEEF_F64.update(
    sin=("sin_u10", "std::sin", 1), cos=("cos_u10", "std::cos", 1), erf=("erf_u10", "std::erf", 1)
)

# Note [Vecmath: sin and cos at 3.5 ULP]
# float32 sin/cos call Sleef's u35 functions, the ones at::vec::Vectorized<float>::sin/cos (and so
# inductor's kernels) call. Measured on 2^20 inputs of scale 100 (1 thread): u35 is 2.2 ULP from
# float64 at worst and 0.8 ms; u10 is 0.86 ULP but 6.6 ms (its slow range reduction); eager's own
# torch.sin is 0.6 ULP and 2.8 ms. 2.2 ULP is far inside assert_close's float32 rtol (1.3e-6,
# about 11 ULP), so u35. float64 keeps u10 (eager's Vectorized<double> does too).

# the vector ABI prefix per instruction set (gcc's choice for -march) and lanes of float
ISAS = (("__AVX512F__", "_ZGVeN16", 16), ("__AVX2__", "_ZGVdN8", 8))
# per element type: (Sleef table, suffix of kiln op keys, C type, function name prefix)
ELEMS = {
    "f": (SLEEF_F32, "", "float", "kiln_v"),
    "d": (SLEEF_F64, ".f64", "double", "kiln_d"),
}


def _abi(pfx, elem):
    """The vector ABI prefix for doubles: half the lanes of floats (_ZGVeN16 -> _ZGVeN8)."""
    if elem == "f":
        return pfx
    head = pfx.rstrip("0123456789")
    return f"{head}{int(pfx[len(head) :]) // 2}"


@functools.lru_cache(None)
def torch_cpu_library():
    """Path of the loaded libtorch_cpu shared object, or None."""
    path = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    return path if os.path.exists(path) else None


@functools.lru_cache(None)
def available_ops():
    """The op keys ("sin" for float32, "sin.f64" for float64) whose Sleef vector functions
    libtorch_cpu exports for every ISA in ISAS."""
    path = torch_cpu_library()
    if path is None or '"' in path or "\\" in path:
        return frozenset()
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return frozenset()
    ok = set()
    for elem, (table, suffix, _, _) in ELEMS.items():
        for op, (fn, _, arity) in table.items():
            names = [f"{_abi(pfx, elem)}{'v' * arity}_Sleef_{fn}" for _, pfx, _ in ISAS]
            if all(hasattr(lib, n) for n in names):
                ok.add(op + suffix)
    return frozenset(ok)


def call(op, args, dtype=torch.float32):
    """(C++ expression calling the vectorizable `op` in float32/float64, its op key), or None."""
    elem = {torch.float32: "f", torch.float64: "d"}.get(dtype)
    if elem is None:
        return None
    key = op + ELEMS[elem][1]
    if key not in available_ops():
        return None
    return f"{ELEMS[elem][3]}{op}({', '.join(str(a) for a in args)})", key


def _split_key(key):
    return (key[: -len(".f64")], "d") if key.endswith(".f64") else (key, "f")


def _params(arity, t):
    return ", ".join(f"{t} x{i}" for i in range(arity))


def _one_isa(keys, pfx, lanes):
    out = [
        f"typedef float kiln_vf __attribute__((vector_size({lanes * 4})));",
        f"typedef double kiln_vd __attribute__((vector_size({lanes * 4})));",
    ]
    init = []
    for key in sorted(keys):
        op, elem = _split_key(key)
        table, _, ct, prefix = ELEMS[elem]
        fn, libm, arity = table[op]
        vt, n = f"kiln_v{elem}", lanes if elem == "f" else lanes // 2
        abi = _abi(pfx, elem)
        name = f"{prefix}{op}"
        vs = "v" * arity
        xs = ", ".join(f"x{i}" for i in range(arity))
        lane = ", ".join(f"x{i}[i]" for i in range(arity))
        bcast = " ".join(f"{vt} v{i} = {{}}; v{i} = x{i} - v{i};" for i in range(arity))
        vargs = ", ".join(f"v{i}" for i in range(arity))
        out += [
            f"#pragma omp declare simd notinbranch simdlen({n})",
            f'extern "C" KILN_CONST {ct} {name}({_params(arity, ct)});',
            f"static {vt} (*{name}_p)({', '.join([vt] * arity)});",
            f"static {vt} {name}_libm({_params(arity, vt)}) {{ {vt} r = {{}}; "
            f"for (int i = 0; i < {n}; i++) r[i] = {libm}({lane}); return r; }}",
            f'extern "C" KILN_HIDDEN {vt} {name}_vec({_params(arity, vt)}) '
            f"{{ return {name}_p({xs}); }}",
            f'extern "C" KILN_HIDDEN {ct} {name}_one({_params(arity, ct)}) '
            f"{{ {bcast} return {name}_p({vargs})[0]; }}",
            f'__asm__(".globl {name}\\n.hidden {name}\\n.set {name}, {name}_one\\n"',
            f'        ".globl {abi}{vs}_{name}\\n.hidden {abi}{vs}_{name}\\n"',
            f'        ".set {abi}{vs}_{name}, {name}_vec\\n");',
        ]
        init += [
            f"    {name}_p = h ? reinterpret_cast<decltype({name}_p)>("
            f'dlsym(h, "{abi}{vs}_Sleef_{fn}")) : nullptr;',
            f"    if (!{name}_p) {name}_p = {name}_libm;",
        ]
    out.append("__attribute__((constructor)) static void kiln_vecmath_init() {")
    out.append('    void* h = dlopen("libtorch_cpu.so", RTLD_LAZY | RTLD_NOLOAD);')
    out += init
    out.append("}")
    return out


def prelude(ops):
    """C++ declaring (and resolving) the vector functions of `ops`; empty when there are none."""
    ops = sorted(set(ops) & available_ops())
    if not ops:
        return ""
    lines = [
        "#include <dlfcn.h>",
        '#define KILN_HIDDEN __attribute__((visibility("hidden")))',
        "#define KILN_CONST __attribute__((const, nothrow, leaf))",
    ]
    for k, (macro, pfx, lanes) in enumerate(ISAS):
        lines.append(f"#{'if' if k == 0 else 'elif'} defined({macro})")
        lines += _one_isa(ops, pfx, lanes)
    lines.append("#else")
    for key in ops:
        op, elem = _split_key(key)
        table, _, ct, prefix = ELEMS[elem]
        _, libm, arity = table[op]
        xs = ", ".join(f"x{i}" for i in range(arity))
        lines.append(
            f"static inline {ct} {prefix}{op}({_params(arity, ct)}) {{ return {libm}({xs}); }}"
        )
    lines.append("#endif")
    return "\n".join(lines) + "\n"
