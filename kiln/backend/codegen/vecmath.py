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
    "sin": ("sinf_u10", "std::sin", 1),
    "cos": ("cosf_u10", "std::cos", 1),
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

# the vector ABI prefix per instruction set (gcc's choice for -march) and lanes of float
ISAS = (("__AVX512F__", "_ZGVeN16", 16), ("__AVX2__", "_ZGVdN8", 8))


@functools.lru_cache(None)
def torch_cpu_library():
    """Path of the loaded libtorch_cpu shared object, or None."""
    path = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    return path if os.path.exists(path) else None


@functools.lru_cache(None)
def available_ops():
    """The ops whose Sleef vector functions libtorch_cpu exports for every ISA in ISAS."""
    path = torch_cpu_library()
    if path is None or '"' in path or "\\" in path:
        return frozenset()
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return frozenset()
    ok = set()
    for op, (fn, _, arity) in SLEEF_F32.items():
        if all(hasattr(lib, f"{pfx}{'v' * arity}_Sleef_{fn}") for _, pfx, _ in ISAS):
            ok.add(op)
    return frozenset(ok)


def call(op, args):
    """The C++ expression calling the vectorizable float32 `op`, or None when there is none."""
    if op not in available_ops():
        return None
    return f"kiln_v{op}({', '.join(str(a) for a in args)})"


def _params(arity, t):
    return ", ".join(f"{t} x{i}" for i in range(arity))


def _one_isa(ops, pfx, lanes):
    out = [
        f"typedef float kiln_vf __attribute__((vector_size({lanes * 4})));",
        f'#define KILN_VABI "{pfx}"',
    ]
    init = []
    for op in sorted(ops):
        fn, libm, arity = SLEEF_F32[op]
        name = f"kiln_v{op}"
        vs = "v" * arity
        xs = ", ".join(f"x{i}" for i in range(arity))
        lane = ", ".join(f"x{i}[i]" for i in range(arity))
        bcast = " ".join(f"kiln_vf v{i} = {{}}; v{i} = x{i} - v{i};" for i in range(arity))
        vargs = ", ".join(f"v{i}" for i in range(arity))
        out += [
            f"#pragma omp declare simd notinbranch simdlen({lanes})",
            f'extern "C" KILN_CONST float {name}({_params(arity, "float")});',
            f"static kiln_vf (*{name}_p)({', '.join(['kiln_vf'] * arity)});",
            f"static kiln_vf {name}_libm({_params(arity, 'kiln_vf')}) {{ kiln_vf r = {{}}; "
            f"for (int i = 0; i < {lanes}; i++) r[i] = {libm}({lane}); return r; }}",
            f'extern "C" KILN_HIDDEN kiln_vf {name}_vec({_params(arity, "kiln_vf")}) '
            f"{{ return {name}_p({xs}); }}",
            f'extern "C" KILN_HIDDEN float {name}_one({_params(arity, "float")}) '
            f"{{ {bcast} return {name}_p({vargs})[0]; }}",
            f'__asm__(".globl {name}\\n.hidden {name}\\n.set {name}, {name}_one\\n"',
            f'        ".globl " KILN_VABI "{vs}_{name}\\n.hidden " KILN_VABI "{vs}_{name}\\n"',
            f'        ".set " KILN_VABI "{vs}_{name}, {name}_vec\\n");',
        ]
        init += [
            f"    {name}_p = h ? reinterpret_cast<decltype({name}_p)>("
            f'dlsym(h, KILN_VABI "{vs}_Sleef_{fn}")) : nullptr;',
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
    for op in ops:
        _, libm, arity = SLEEF_F32[op]
        xs = ", ".join(f"x{i}" for i in range(arity))
        lines.append(
            f"static inline float kiln_v{op}({_params(arity, 'float')}) {{ return {libm}({xs}); }}"
        )
    lines.append("#endif")
    return "\n".join(lines) + "\n"
