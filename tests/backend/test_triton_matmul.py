"""The Triton matmul template (Note [Triton: the matmul template]) against eager.

On CPU the template runs in Triton's interpreter (TRITON_INTERPRET=1, `config.cpu_backend =
"triton"`, every load and store checked to stay inside its tensors), forced by
`config.matmul_template = "always"`; the CUDA tests at the end run the same cases on a GPU.
"""

import json
import os

import pytest
import torch
import torch.nn.functional as F

import kiln
from kiln import config, logs
from tests.backend.helpers import check

pytest.importorskip("triton")

from kiln.backend.codegen import triton_matmul, triton_tune  # noqa: E402

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
interp = pytest.mark.skipif(not INTERPRET, reason="Triton's interpreter (TRITON_INTERPRET=1)")
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.fixture(autouse=True)
def forced(monkeypatch, tmp_path):
    monkeypatch.setattr(config, "strict", True)
    monkeypatch.setattr(config, "matmul_template", "always")
    monkeypatch.setattr(config, "cache_dir", str(tmp_path))
    monkeypatch.setattr(triton_matmul, "_tuned", {})
    monkeypatch.setattr(triton_matmul._disk, "entries", None)
    monkeypatch.setattr(triton_tune, "_tuned", {})
    monkeypatch.setattr(triton_tune._disk, "entries", None)
    kiln.reset()  # (frames compiled by earlier tests)
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # eager's fp32 matmuls in fp32
    yield
    torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.fixture
def cpu_triton(monkeypatch):
    from tests.backend.triton_bounds import checked

    monkeypatch.setattr(config, "cpu_backend", "triton")
    checked(monkeypatch)


def _templates(compiled):
    """How many matmul template kernels a compiled graph's source holds."""
    return compiled.cpp_src.count("launch_mm(")


def _check(fn, inputs, templates=1, rtol=1e-4, atol=1e-4, kernels=None):
    compiled = check(fn, inputs, rtol=rtol, atol=atol, expect_kernels=kernels)
    assert _templates(compiled) == templates, compiled.cpp_src
    assert "tl.dot(" in compiled.cpp_src or "dot_bf16(" in compiled.cpp_src
    return compiled


SHAPES = [(1, 3, 7), (5, 40, 7), (33, 100, 20), (16, 16, 16), (40, 1, 33)]


def _mm_cases(device):
    """(name, fn, inputs) of every case, on a device."""

    def r(*s, dtype=torch.float32):
        return torch.randn(*s, device=device, dtype=dtype)

    cases = []
    for m, k, n in SHAPES:
        cases.append((f"mm{m}x{k}x{n}", torch.mm, [r(m, k), r(k, n)]))
    cases += [
        ("linear_t", lambda x, w: x @ w.t(), [r(33, 24), r(7, 24)]),
        ("a_t", lambda a, b: a.t() @ b, [r(24, 33), r(24, 7)]),
        ("sliced", lambda a, b: a[1:, 2:] @ b[::2], [r(6, 42), r(80, 9)]),
        (
            "addmm",
            lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=-2.0),
            [r(9), r(5, 17), r(17, 9)],
        ),
        ("addmm_2d_bias", torch.addmm, [r(5, 9), r(5, 17), r(17, 9)]),
        ("bmm", torch.bmm, [r(3, 5, 17), r(3, 17, 33)]),
        ("bmm_t", lambda a, b: a @ b.transpose(1, 2), [r(2, 33, 8), r(2, 20, 8)]),
        ("bmm_batch1", torch.bmm, [r(1, 1, 9), r(1, 9, 1)]),
    ]
    return cases


CASE_NAMES = [c[0] for c in _mm_cases("cpu")]


def _case(name, device):
    return next(c for c in _mm_cases(device) if c[0] == name)


@interp
@pytest.mark.parametrize("name", CASE_NAMES)
def test_matmuls_match_eager(cpu_triton, name):
    _check_case(*_case(name, "cpu")[1:])


def _check_case(fn, inputs):
    """One case: the template, except for an outer product (k = 1), a pointwise kernel (Note
    [Matmuls: outer products])."""
    if inputs[0].shape[-1] == 1 and len(inputs) == 2:
        compiled = check(fn, inputs, rtol=1e-4, atol=1e-4, expect_kernels=1)
        assert _templates(compiled) == 0 and "tl.dot(" not in compiled.cpp_src
        return
    _check(fn, inputs, kernels=1)


@interp
def test_addmm_beta_zero_ignores_nan_bias(cpu_triton):
    c = torch.full((9,), float("nan"))
    a, b = torch.randn(5, 17), torch.randn(17, 9)
    _check(lambda c, a, b: torch.addmm(c, a, b, beta=0, alpha=3.0), [c, a, b], kernels=1)


def _epilogue_cases(device):
    def r(*s):
        return torch.randn(*s, device=device)

    x, w, bias, res = r(33, 24), r(20, 24), r(20), r(33, 20)
    return {
        "relu": (lambda x, w: torch.relu(x @ w.t()), [x, w], "tl.where"),
        "gelu": (lambda x, w, b: F.gelu(F.linear(x, w, b)), [x, w, bias], "erf"),
        "bias_residual": (lambda x, w, b, r: F.linear(x, w, b) + r, [x, w, bias, res], "+"),
        "scale": (lambda x, w: (x @ w.t()) * 0.125, [x, w], "0.125"),
        "to_fp16": (lambda x, w: (x @ w.t()).half(), [x, w], "tl.float16"),
    }


def _tol(name):
    """float16 results: a sum in another order may round to the neighbouring float16 (1e-3)."""
    return {"rtol": 2e-3, "atol": 2e-3} if name == "to_fp16" else {}


@interp
@pytest.mark.parametrize("name", list(_epilogue_cases("cpu")))
def test_epilogue_fused_into_one_kernel(cpu_triton, name):
    fn, inputs, text = _epilogue_cases("cpu")[name]
    compiled = _check(fn, inputs, kernels=1, **_tol(name))
    # the epilogue is computed after the K loop, before the only store
    tail = compiled.cpp_src.split("xmask = ", 1)[1]
    assert text in tail and tail.count("tl.store(") == 1, compiled.cpp_src


@interp
def test_epilogue_over_the_reshaped_result(cpu_triton):
    # linear on [B, T, C]: a matmul over [B*T, C] viewed as [B, T, N], then bias, gelu, residual
    x, w, b = torch.randn(2, 5, 24), torch.randn(7, 24), torch.randn(7)
    res, rowscale = torch.randn(2, 5, 7), torch.randn(2, 1, 7)

    def fn(x, w, b, res, rowscale):
        return F.gelu(F.linear(x, w, b)) * rowscale + res

    compiled = _check(fn, [x, w, b, res, rowscale], kernels=1)
    assert "erf" in compiled.cpp_src.split("xmask = ", 1)[1]


@interp
def test_reshape_reading_another_element_is_not_fused(cpu_triton):
    def fn(a, b):
        p = a @ b  # [10, 7] read as [5, 14] and as [2, 5, 7] flipped: other elements
        return p.view(5, 14) * 2, p.view(2, 5, 7).flip(1) + 1

    compiled = _check(fn, [torch.randn(10, 6), torch.randn(6, 7)])
    assert compiled.kernel_count == 3


@interp
def test_result_used_twice_is_stored_and_fused(cpu_triton):
    def fn(a, b):
        p = a @ b
        return p, torch.tanh(p) * 2

    compiled = _check(fn, [torch.randn(9, 12), torch.randn(12, 5)], kernels=1)
    assert compiled.cpp_src.count("tl.store(") == 2


@interp
def test_reads_elsewhere_are_not_fused(cpu_triton):
    def fn(a, b):
        p = a @ b
        return p + p.t(), p.sum(1)

    # the transposed read and the row sum read the stored result in kernels of their own
    compiled = _check(fn, [torch.randn(12, 12), torch.randn(12, 12)])
    assert compiled.kernel_count >= 2


@interp
def test_two_matmuls_sharing_an_operand_stay_apart(cpu_triton):
    x, w1, w2 = torch.randn(7, 16), torch.randn(16, 9), torch.randn(16, 9)
    _check(lambda x, w1, w2: torch.relu(x @ w1) + x @ w2, [x, w1, w2], templates=2)


@interp
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision(cpu_triton, dtype):
    a, b, c = (torch.randn(*s).to(dtype) for s in ((33, 40), (40, 20), (20,)))
    compiled = _check(
        lambda c, a, b: torch.relu(torch.addmm(c, a, b)), [c, a, b], rtol=2e-2, atol=2e-2
    )
    want = "dot_bf16(" if dtype == torch.bfloat16 else "tl.dot("
    assert want in compiled.cpp_src


@interp
def test_training_linear_gelu(cpu_triton, monkeypatch):
    made = []
    real = triton_matmul.TritonMatmulKernel.generate

    def generate(self):
        out = real(self)
        made.append(out is not None)
        return out

    monkeypatch.setattr(triton_matmul.TritonMatmulKernel, "generate", generate)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(24, 33), torch.nn.GELU(), torch.nn.Linear(33, 5))
    x = torch.randn(13, 24, requires_grad=True)
    compiled = kiln.compile(model)
    loss = compiled(x).square().sum()
    loss.backward()
    got = [x.grad.clone()] + [p.grad.clone() for p in model.parameters()]
    x.grad = None
    model.zero_grad()
    model(x).square().sum().backward()
    want = [x.grad] + [p.grad for p in model.parameters()]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    assert sum(made) >= 5, made  # 2 forward, 3+ backward matmuls (dx of the first needs none)


@interp
def test_symbolic_sizes_keep_the_aten_call(cpu_triton, monkeypatch):
    sources = []
    real = triton_matmul.generate_group
    monkeypatch.setattr(triton_matmul, "generate_group", lambda *a: sources.append(a) or real(*a))

    def fn(x, w):
        return torch.relu(x @ w)

    compiled = kiln.compile(fn, backend="kiln", dynamic=True)
    for m in (5, 9):
        x, w = torch.randn(m, 12), torch.randn(12, 7)
        torch.testing.assert_close(compiled(x, w), fn(x, w), rtol=1e-4, atol=1e-4)
    assert not sources  # (only static sizes are offered: Note [Triton: the matmul template])


@interp
def test_default_mode_never_uses_the_template(cpu_triton, monkeypatch):
    a, b = torch.randn(9, 12), torch.randn(12, 5)
    for setting in ("auto", "never"):
        monkeypatch.setattr(config, "matmul_template", setting)
        compiled = check(torch.mm, [a, b])
        assert _templates(compiled) == 0, compiled.cpp_src


@interp
def test_max_autotune_times_and_keeps_the_choice(cpu_triton, monkeypatch):
    # on CPU the choice is not timed ("auto" times CUDA matmuls): pretend these are
    monkeypatch.setattr(config, "matmul_template", "auto")
    monkeypatch.setattr(triton_matmul, "_timed", lambda val: True)
    logs.counters["backend"].clear()
    kiln.reset()
    x, w = torch.randn(9, 12), torch.randn(5, 12)

    def fn(x, w):
        return torch.relu(x @ w.t())

    out = kiln.compile(fn, mode="max-autotune-no-cudagraphs")(x, w)
    torch.testing.assert_close(out, fn(x, w), rtol=1e-4, atol=1e-4)
    assert logs.counters["backend"]["autotune_timed"] >= 1
    with open(os.path.join(config.cache_dir, "triton", "matmul_choices.json")) as f:
        assert set(json.load(f).values()) <= {"template", "aten"}
    # a new process (fresh memory) reads the choice from disk
    monkeypatch.setattr(triton_matmul, "_tuned", {})
    monkeypatch.setattr(triton_matmul._disk, "entries", None)
    kiln.reset()
    out = kiln.compile(fn, mode="max-autotune-no-cudagraphs")(x, w)
    torch.testing.assert_close(out, fn(x, w), rtol=1e-4, atol=1e-4)
    assert logs.counters["backend"]["autotune_disk_hits"] >= 1


@interp
def test_tuned_template_configs_agree(cpu_triton, monkeypatch):
    # max-autotune with the template forced: each candidate configuration runs and is correct
    from kiln.backend import cpu_tune

    monkeypatch.setattr(cpu_tune, "matmuls_as_loops", lambda *args: None)  # (not timed here)
    logs.counters["backend"].clear()
    kiln.reset()
    a, b = torch.randn(20, 33), torch.randn(33, 40)
    out = kiln.compile(torch.mm, mode="max-autotune-no-cudagraphs")(a, b)
    torch.testing.assert_close(out, a @ b, rtol=1e-4, atol=1e-4)
    tuned = [k for k in triton_tune._tuned if isinstance(k[0], str)]  # (keyed by the matmul)
    assert len(tuned) == 1
    # the same matmul with an epilogue reuses the configuration
    out = kiln.compile(lambda a, b: torch.relu(a @ b), mode="max-autotune-no-cudagraphs")(a, b)
    torch.testing.assert_close(out, torch.relu(a @ b), rtol=1e-4, atol=1e-4)
    assert [k for k in triton_tune._tuned if isinstance(k[0], str)] == tuned


_SM90_COMPILE = r"""
import importlib.util, re, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

path = sys.argv[1]
spec = importlib.util.spec_from_file_location("kiln_sm90_check", path)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
src = open(path).read()
PTR = {"float32": "*fp32", "bfloat16": "*bf16", "float16": "*fp16"}
CONSTS = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "XBLOCK": 128, "RBLOCK": 64}
for name, params, dtypes in re.findall(r"def (kernel\d+)_tl\((.*?)\):\n    # (.*)\n", src):
    dts = dict(d.split() for d in dtypes.split(", "))
    sig, consts = {}, {}
    for p in params.split(", "):
        p = p.split(":")[0]
        sig[p] = "constexpr" if p in CONSTS else PTR.get(dts.get(p), "i32")
        if p in CONSTS:
            consts[p] = CONSTS[p]
    k = triton.compile(ASTSource(getattr(mod, name + "_tl"), sig, consts),
                       target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    print(name, "wgmma" if "wgmma.mma_async" in k.asm["ptx"] else "fma")
"""


@interp
def test_template_compiles_for_sm90(cpu_triton, tmp_path):
    # the kernels' source compiled for an H100 by Triton's own compiler (no GPU needed): what the
    # interpreter cannot check (types, tl.dot's rules on a device)
    pytest.importorskip("triton.backends.nvidia")
    import subprocess
    import sys

    a, b, c = (torch.randn(*s).bfloat16() for s in ((64, 128), (128, 64), (64,)))
    compiled = _check(lambda c, a, b: F.gelu(torch.addmm(c, a, b)), [c, a, b], rtol=2e-2, atol=2e-2)
    path = tmp_path / "kernels.py"
    path.write_text(compiled.cpp_src)
    script = tmp_path / "compile.py"
    script.write_text(_SM90_COMPILE)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    proc = subprocess.run(
        [sys.executable, str(script), str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode and "ptxas" in proc.stderr and "not found" in proc.stderr:
        pytest.skip("no ptxas")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "kernel0 wgmma" in proc.stdout, proc.stdout


def test_candidates_fit_the_sizes():
    assert triton_tune.mm_candidates(1, 4096, 4096, (16, 64, 64, 8, 4, 4))[0][0] == 16
    assert all(c[0] <= 32 for c in triton_tune.mm_candidates(8, 4096, 4096, (16, 64, 64, 8, 4, 4)))
    big = triton_tune.mm_candidates(4096, 4096, 4096, (128, 128, 32, 8, 8, 3))
    assert (64, 64, 32, 8, 4, 3) in big and len(big) == len(set(big))


# --- CUDA (skipped without a GPU) ----------------------------------------------------------------


@cuda
@pytest.mark.parametrize("name", CASE_NAMES)
def test_cuda_matmuls_match_eager(name):
    _check_case(*_case(name, "cuda")[1:])


@cuda
@pytest.mark.parametrize("name", list(_epilogue_cases("cpu")))
def test_cuda_epilogues(name):
    fn, inputs, _ = _epilogue_cases("cuda")[name]
    _check(fn, inputs, kernels=1, **_tol(name))


@cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cuda_low_precision(dtype):
    a, b, c = (torch.randn(*s, device="cuda").to(dtype) for s in ((130, 256), (256, 72), (72,)))
    _check(lambda c, a, b: F.gelu(torch.addmm(c, a, b)), [c, a, b], rtol=2e-2, atol=2e-2)


@cuda
def test_cuda_tf32_follows_eager():
    torch.backends.cuda.matmul.allow_tf32 = True  # (the fixture restores it)
    a, b = torch.randn(128, 256, device="cuda"), torch.randn(256, 64, device="cuda")
    compiled = _check(torch.mm, [a, b], rtol=1e-2, atol=5e-2)  # (tf32 inputs: ~1e-3 each)
    assert 'input_precision="tf32"' in compiled.cpp_src


@cuda
def test_cuda_training_linear_gelu():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.GELU(), torch.nn.Linear(96, 10))
    model = model.cuda()
    x = torch.randn(37, 64, device="cuda", requires_grad=True)
    kiln.compile(model)(x).square().sum().backward()
    got = [x.grad.clone()] + [p.grad.clone() for p in model.parameters()]
    x.grad = None
    model.zero_grad()
    model(x).square().sum().backward()
    want = [x.grad] + [p.grad for p in model.parameters()]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


@cuda
def test_cuda_max_autotune_chooses(monkeypatch):
    monkeypatch.setattr(config, "matmul_template", "auto")
    logs.counters["backend"].clear()
    kiln.reset()
    x, w, b = (torch.randn(*s, device="cuda") for s in ((64, 512), (256, 512), (256,)))

    def fn(x, w, b):
        return F.gelu(F.linear(x, w, b))

    out = kiln.compile(fn, mode="max-autotune-no-cudagraphs")(x, w, b)
    torch.testing.assert_close(out, fn(x, w, b), rtol=1e-4, atol=1e-4)
    assert logs.counters["backend"]["autotune_timed"] >= 1
    with open(os.path.join(config.cache_dir, "triton", "matmul_choices.json")) as f:
        assert set(json.load(f).values()) <= {"template", "aten"}
