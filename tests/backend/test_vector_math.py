"""Vectorized float32 math (codegen/vecmath.py): accuracy against float64, special values as eager."""

import pytest
import torch

from kiln.backend.codegen import vecmath
from tests.backend.helpers import compile_fn

# op -> (function, ULP bound against float64, domain scale of the random inputs)
UNARY = {
    "exp": (torch.exp, 1, 30.0),
    "exp2": (torch.exp2, 1, 30.0),
    "expm1": (torch.expm1, 1, 30.0),
    "log": (lambda x: torch.log(x.abs()), 1, 1e3),
    "log2": (lambda x: torch.log2(x.abs()), 1, 1e3),
    "log10": (lambda x: torch.log10(x.abs()), 1, 1e3),
    "log1p": (lambda x: torch.log1p(x.abs()), 1, 1e3),
    "sin": (torch.sin, 3, 1e2),  # Sleef u35, as inductor (Note [Vecmath: sin and cos at 3.5 ULP])
    "cos": (torch.cos, 3, 1e2),
    "tan": (torch.tan, 1, 3.0),
    "asin": (lambda x: torch.asin(x.clamp(-1, 1)), 1, 1.0),
    "acos": (lambda x: torch.acos(x.clamp(-1, 1)), 1, 1.0),
    "atan": (torch.atan, 1, 1e2),
    "sinh": (torch.sinh, 1, 20.0),
    "cosh": (torch.cosh, 1, 20.0),
    "tanh": (torch.tanh, 1, 5.0),
    "asinh": (torch.asinh, 1, 1e3),
    "acosh": (torch.acosh, 1, -1e3),  # negative scale: |x| + 1
    "atanh": (lambda x: torch.atanh(x.clamp(-1, 1)), 1, 1.0),
    "erfc": (torch.erfc, 2, 5.0),
    "sigmoid": (torch.sigmoid, 2, 20.0),
    "rsqrt": (lambda x: torch.rsqrt(x.abs()), 1, 1e3),
}
BINARY = {
    "pow": (lambda x, y: torch.pow(x.abs(), y), 1),
    "atan2": (torch.atan2, 1),
    "hypot": (torch.hypot, 1),
    "fmod": (torch.fmod, 0),
}

SPECIAL = [
    float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, 1e-45,
    -1e-45, 1e-39, -1e-39, 1.17549435e-38, 3.4028235e38, -3.4028235e38, 88.72, -88.72, 89.0,
    -104.0, 1e4, -1e4, 1e30, -1e30, 0.0625, 710.0, 3.1415927, 1.5707964, 1e-8,
]  # fmt: skip


def _inputs(scale, n=4096):
    x = torch.randn(n, dtype=torch.float64).mul(abs(scale))
    x = torch.cat([torch.tensor(SPECIAL, dtype=torch.float64), x, torch.rand(64) * 2 - 1])
    x = x.float()
    return x.abs() + 1 if scale < 0 else x


def _ulp(x):
    """The float32 ULP at |x| (denormal spacing below the normal range)."""
    ax = x.abs().clamp(min=torch.finfo(torch.float32).tiny)
    e = torch.floor(torch.log2(ax))
    return torch.pow(2.0, e - 23)


def _check_special(got, want, name):
    """NaN, inf and the sign of zeros as eager."""
    assert torch.equal(got.isnan(), want.isnan()), f"{name}: NaN positions differ"
    inf = want.isinf()
    assert torch.equal(got[inf], want[inf]), f"{name}: infinities differ"
    assert torch.equal(got.isinf(), inf), f"{name}: spurious infinities"
    zero = want == 0
    assert torch.equal(got[zero].signbit(), want[zero].signbit()), f"{name}: signed zeros differ"


def _check_ulps(got, ref64, bound, name):
    fin = ref64.isfinite() & got.isfinite()
    # a float64 reference beyond float32's range rounds to inf; the special check covers those
    fin &= ref64.abs() < torch.finfo(torch.float32).max
    err = (got.double()[fin] - ref64[fin]).abs() / _ulp(ref64[fin])
    worst = err.max().item() if err.numel() else 0.0
    # half an ULP for the rounding of the float64 reference itself
    assert worst <= bound + 0.5, f"{name}: {worst:.2f} ULP (bound {bound})"


def test_sleef_is_available_here():
    """On x86-64 torch builds libtorch_cpu exports Sleef's vector functions."""
    import platform

    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("Sleef vector ABI names checked on x86-64 only")
    assert {"sin", "log", "pow", "tanh"} <= vecmath.available_ops()


def test_unary_accuracy_and_specials():
    names = list(UNARY)
    xs = [_inputs(UNARY[n][2]) for n in names]

    def fn(*args):
        return tuple(UNARY[n][0](a) for n, a in zip(names, args))

    compiled = compile_fn(fn, xs)
    got = compiled(*xs)
    errors = []
    for n, x, g in zip(names, xs, got):
        f, bound, _ = UNARY[n]
        for check, args in (
            (_check_special, (g, f(x), n)),
            (_check_ulps, (g, f(x.double()), bound, n)),
        ):
            try:
                check(*args)
            except AssertionError as e:
                errors.append(str(e).splitlines()[0])
    assert not errors, errors
    src = compiled.cpp_src
    for n in names:
        if n in vecmath.available_ops():
            assert f"kiln_v{n}(" in src, n


def test_binary_accuracy_and_specials():
    x = _inputs(10.0)
    y = _inputs(3.0)[torch.randperm(x.numel())]
    names = list(BINARY)

    def fn(a, b):
        return tuple(BINARY[n][0](a, b) for n in names)

    got = compile_fn(fn, [x, y])(x, y)
    errors = []
    for n, g in zip(names, got):
        f, bound = BINARY[n]
        for check, args in (
            (_check_special, (g, f(x, y), n)),
            (_check_ulps, (g, f(x.double(), y.double()), bound, n)),
        ):
            try:
                check(*args)
            except AssertionError as e:
                errors.append(str(e).splitlines()[0])
    assert not errors, errors


def test_fused_chain_with_tail_and_strides():
    """Odd sizes (vector loop + scalar tail) and a transposed input give the same values."""
    x = torch.randn(37, 53) * 4
    y = torch.randn(53, 37).t()

    def fn(a, b):
        return (torch.sin(a) * torch.cos(b) + torch.tanh(a * b) + torch.log1p(b.abs()),)

    got = compile_fn(fn, [x, y])(x, y)[0]
    torch.testing.assert_close(got, fn(x, y)[0], rtol=2e-6, atol=2e-6)


def test_other_dtypes_keep_libm():
    """float64 and bfloat16 still match eager (bf16 computes in float32 and rounds)."""
    x64 = torch.randn(1000, dtype=torch.float64) * 5
    xb = (torch.randn(1000) * 5).bfloat16()

    def fn(a, b):
        return torch.sin(a) + torch.log(a.abs()), torch.tanh(b) * torch.exp(b)

    got = compile_fn(fn, [x64, xb])(x64, xb)
    want = fn(x64, xb)
    torch.testing.assert_close(got[0], want[0], equal_nan=True)
    torch.testing.assert_close(got[1], want[1], equal_nan=True)


def test_prelude_without_sleef_is_plain_libm(monkeypatch):
    """Where libtorch_cpu lacks the symbols, calls are scalar libm (still correct)."""
    monkeypatch.setattr(vecmath, "available_ops", lambda: frozenset())
    assert vecmath.call("sin", ["x"]) is None
    assert vecmath.prelude({"sin"}) == ""


def test_prelude_never_names_a_libtorch_path(monkeypatch):
    """The cached .so finds the libtorch already loaded by soname: a path from another environment
    would map a second libtorch, whose duplicate registrations abort the process."""
    here = vecmath.prelude({"sin"})
    monkeypatch.setattr(vecmath, "torch_cpu_library", lambda: "/elsewhere/lib/libtorch_cpu.so")
    assert vecmath.prelude({"sin"}) == here
    if here:
        assert 'dlopen("libtorch_cpu.so", RTLD_LAZY | RTLD_NOLOAD)' in here


def test_pow_scalar_exponents_bit_for_bit():
    """pow(x, 3 / -1 / -2) multiplies as eager's pow_tensor_scalar does; others call Sleef."""
    x = _inputs(10.0)
    for e in (3.0, -1.0, -2.0, 2.5, 3):
        compiled = compile_fn(lambda a, e=e: (torch.pow(a, e),), [x])
        got, want = compiled(x)[0], torch.pow(x, e)
        assert torch.equal(got.nan_to_num(7.0), want.nan_to_num(7.0)), e
        assert ("kiln_vpow" in compiled.cpp_src) == (e == 2.5), e


def test_erf_and_gelu_specials():
    """erf is eager's vectorized GELU form (abs error < 1e-6) on the vector exp, branch-free."""
    x = _inputs(3.0)
    compiled = compile_fn(lambda a: (torch.erf(a),), [x])
    got, want = compiled(x)[0], torch.erf(x)
    _check_special(got, want, "erf")
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0, equal_nan=True)
    if "exp" in vecmath.available_ops():
        assert "kiln_erff_e(" in compiled.cpp_src


def test_float64_calls_sleef_double_functions():
    """float64 math calls Sleef's double vector functions (eager's Vectorized<double> ones)."""
    x = torch.randn(3, 1001, dtype=torch.float64) * 4
    y = torch.randn(3, 1001, dtype=torch.float64)
    x[0, :6] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 800.0])

    def fn(a, b):
        return (
            torch.sin(a) * torch.exp(a) + torch.cos(a),
            torch.log1p(a.abs()) + torch.atan2(a, b) + torch.tanh(b) + torch.erf(a),
            torch.sigmoid(a) + torch.pow(a.abs(), b) + a**3 + a**-2,
        )

    compiled = compile_fn(fn, [x, y])
    got, want = compiled(x, y), fn(x, y)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, equal_nan=True)
    if "exp.f64" in vecmath.available_ops():
        for name in ("kiln_dsin(", "kiln_dexp(", "kiln_datan2(", "kiln_dpow("):
            assert name in compiled.cpp_src, name
