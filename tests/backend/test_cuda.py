"""CUDA tensors through the kiln backend: Triton kernels on a GPU against eager on the same GPU.

Skipped where CUDA is absent (CI, the CPU machines); the Triton kernels' structure is tested on CPU
by test_triton.py under Triton's interpreter. Here the backend's op tests and model parity tests
run again with CUDA as the default device (`torch.set_default_device`), strict (a graph that falls
back to eager fails), and each must send at least one graph through Triton.
"""

import contextlib
import inspect

import pytest
import torch
import torch.nn.functional as F

import kiln
from kiln import config, logs
from tests.backend import test_model_parity, test_ops
from tests.backend.helpers import check

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


# tests whose graphs may rightly not reach Triton in this process: the device-assert test
# compiles in a subprocess
NO_TRITON_NEEDED = {
    "test_out_of_bounds_index_is_a_device_assert",
}


@pytest.fixture(autouse=True)
def on_cuda(monkeypatch, request):
    """CUDA by default, strict, and at least one graph through Triton."""
    real_special = test_ops.special

    def special(shape, dtype=torch.float32, seed=0):
        with torch.device("cpu"):
            return real_special(shape, dtype, seed).to("cuda")

    monkeypatch.setattr(test_ops, "special", special)
    monkeypatch.setattr(config, "strict", True)
    before = logs.counters["backend"]["triton_graphs"]
    with torch.device("cuda"):
        yield
    torch.cuda.synchronize()
    if request.node.name not in NO_TRITON_NEEDED:
        assert logs.counters["backend"]["triton_graphs"] > before, "no graph went through Triton"


# every argument-free op test of test_ops.py but the out-of-bounds one (an index error in eager
# CUDA code is a device-side assert that ends the process's CUDA context)
OPS_TESTS = sorted(
    name
    for name, fn in vars(test_ops).items()
    if name.startswith("test_")
    and not inspect.signature(fn).parameters
    and name != "test_index_out_of_bounds_raises"
)


@pytest.mark.parametrize("name", OPS_TESTS)
def test_ops_on_cuda(name):
    getattr(test_ops, name)()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_unary_on_cuda(dtype):
    test_ops.test_unary_float(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_binary_broadcast_on_cuda(dtype):
    test_ops.test_binary_broadcast_float(dtype)


@pytest.mark.parametrize("name", ["mlp", "conv_bn", "attention"])
def test_training_parity_on_cuda(name):
    make, inp = {
        "mlp": (test_model_parity.MLP, (4, 16)),
        "conv_bn": (test_model_parity.ConvBN, (2, 3, 6, 6)),
        "attention": (test_model_parity.Attention, (2, 5, 16)),
    }[name]
    torch.manual_seed(0)
    from tests.autograd.aot_helpers import check_module_parity

    check_module_parity(make(), torch.randn(inp), compile_fn=test_model_parity.kiln_module)


def test_hf_llama_training_parity_on_cuda():
    pytest.importorskip("transformers")
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "autograd"))
    from tests.autograd import test_hf_models as hf
    from tests.autograd.aot_helpers import check_module_parity

    torch.manual_seed(0)
    with torch.device("cpu"):  # the inputs come from a CPU generator
        model, inputs = hf.llama()
    inputs = {k: v.cuda() for k, v in inputs.items()}
    check_module_parity(
        model.cuda(), rtol=1e-4, atol=1e-4, compile_fn=test_model_parity.kiln_module, **inputs
    )


def test_kernels_are_on_the_current_stream():
    """Kernels and ATen calls of a compiled graph run on the caller's stream."""
    f = kiln.compile(lambda x, w: (x @ w).relu().sum(-1) + x.sin().mean(-1), backend="kiln")
    x, w = torch.randn(256, 256), torch.randn(256, 256)
    want = (x @ w).relu().sum(-1) + x.sin().mean(-1)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        got = f(x, w)
    torch.cuda.current_stream().wait_stream(s)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)


def test_dynamic_sizes_one_compile_on_cuda():
    logs.counters["stats"].clear()
    f = kiln.compile(lambda x: torch.softmax(x * 2, -1) + x.mean(0), backend="kiln", dynamic=True)
    for n in (8, 16, 33, 100):
        x = torch.randn(n, 700)
        torch.testing.assert_close(f(x), torch.softmax(x * 2, -1) + x.mean(0))
    assert logs.counters["stats"]["unique_graphs"] == 1


@contextlib.contextmanager
def compiled_not_eager():
    """No graph inside ran eagerly (a mixed-device graph used to: Note [Backend: graphs on two
    devices])."""
    before = logs.counters["backend"]["eager_fallbacks"]
    yield
    assert logs.counters["backend"]["eager_fallbacks"] == before, "a graph ran eagerly"


def test_cpu_scalar_tensor_with_cuda_tensors():
    """A 0-d CPU tensor may meet CUDA tensors (eager allows it): read by value by the kernel."""
    f = kiln.compile(lambda x, s: x * s + 1, backend="kiln")
    with compiled_not_eager():
        for v, dtype in ((3.0, torch.float32), (-0.5, torch.float32), (0.1, torch.float64)):
            x, s = torch.randn(64), torch.tensor(v, dtype=dtype, device="cpu")
            torch.testing.assert_close(f(x, s), x * s + 1)


def test_cpu_scalar_made_inside_the_frame_on_cuda():
    """`x * torch.tensor(3.0)` (a CPU constant) and int/bool CPU scalars next to CUDA tensors."""
    fn = lambda x, n, b: (x * torch.tensor(3.0, device="cpu") + n) * ((x > 0) & b)  # noqa: E731
    f = kiln.compile(fn, backend="kiln")
    with compiled_not_eager():
        for k in (2, 7):
            x = torch.randn(100)
            n, b = torch.tensor(k, device="cpu"), torch.tensor(k > 3, device="cpu")
            torch.testing.assert_close(f(x, n, b), fn(x, n, b))


@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("opt_cls", [torch.optim.Adam, torch.optim.AdamW])
def test_adam_with_cpu_step_counters_on_cuda(opt_cls, foreach):
    """A compiled optimizer step over CUDA parameters whose `step` counters stay on the CPU
    (capturable=False): parameters and state as eager's after three steps."""
    with torch.device("cpu"):  # (so that the optimizer puts `step` on the CPU)
        torch.manual_seed(0)
        params = [torch.randn(64, 32, device="cuda"), torch.randn(32, device="cuda")]
        ref = [p.clone().requires_grad_() for p in params]
        mine = [p.clone().requires_grad_() for p in params]
        opts = [opt_cls(ps, lr=0.01, foreach=foreach, capturable=False) for ps in (ref, mine)]
        step = kiln.compile(opts[1].step, backend="kiln")
        with compiled_not_eager():
            for _ in range(3):
                grads = [torch.randn_like(p) for p in params]
                for ps in (ref, mine):
                    for p, g in zip(ps, grads):
                        p.grad = g.clone()
                opts[0].step()
                step()
    for p, q in zip(ref, mine):
        torch.testing.assert_close(q, p)
        want, got = opts[0].state[p], opts[1].state[q]
        for key in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(got[key], want[key])
        assert got["step"].device.type == "cpu" and got["step"].item() == 3


def test_forward_moves_its_cpu_input_to_the_device_on_cuda():
    """`x.to(self.weight.device)` inside forward: a device copy in the graph, the rest compiled;
    a training step's gradients as eager's."""

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(16, 8)

        def forward(self, x):
            x = x.to(self.lin.weight.device)
            return (self.lin(x).relu() * 2).sum(-1)

    torch.manual_seed(0)
    model = Net()
    compiled = kiln.compile(model, backend="kiln")
    with compiled_not_eager():
        for _ in range(2):
            x = torch.randn(4, 16, device="cpu")
            want = model(x)
            want.sum().backward()
            grads = [p.grad.clone() for p in model.parameters()]
            model.zero_grad()
            got = compiled(x)
            got.sum().backward()
            torch.testing.assert_close(got, want)
            for p, g in zip(model.parameters(), grads):
                torch.testing.assert_close(p.grad, g)
            model.zero_grad()


def test_result_moved_to_the_cpu_on_cuda():
    """A graph that ends with `y.cpu()`: kernels on the GPU, the copy in the graph."""
    fn = lambda x: (x.sin() * 2).softmax(-1).cpu()  # noqa: E731
    f = kiln.compile(fn, backend="kiln")
    with compiled_not_eager():
        x = torch.randn(8, 100)
        got = f(x)
    assert got.device.type == "cpu"
    torch.testing.assert_close(got, fn(x))


def test_dropout_is_random_per_call_on_cuda():
    f = kiln.compile(lambda x: F.dropout(x, 0.5, training=True), backend="kiln")
    x = torch.ones(4096)
    a, b = f(x), f(x)
    assert not torch.equal(a, b)
    assert set(a.unique().tolist()) <= {0.0, 2.0}
    assert 0.4 < (a == 0).float().mean().item() < 0.6


def test_low_precision_layer_norm_on_cuda():
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.randn(64, 512, dtype=dtype)
        w, b = torch.randn(512, dtype=dtype), torch.randn(512, dtype=dtype)
        compiled = check(
            lambda x, w, b: F.layer_norm(x, (512,), w, b), [x, w, b], atol=2e-2, rtol=2e-2
        )
        assert "tl.float32" in compiled.cpp_src


def test_reduce_overhead_replays_a_model_on_cuda():
    """mode="reduce-overhead": a model in eval mode replays its recording and matches eager."""
    logs.counters["cudagraphs"].clear()
    model = test_model_parity.MLP().eval()
    compiled = kiln.compile(model, backend="kiln", mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(4, 16)
            torch.testing.assert_close(compiled(x), model(x))
    assert logs.counters["cudagraphs"]["replays"] >= 2


def test_direct_relaunch_matches_the_jit_launcher():
    """Note [Triton: launches on CUDA]: relaunched compiled kernels give the JIT path's results,
    also for inputs of another alignment (a new specialization) and another size."""
    f = kiln.compile(lambda x, i: (x[i].softmax(-1) * 2).sum(0), backend="kiln")
    base = torch.randn(4096 * 66)
    for offset, n in ((0, 33), (1, 33), (0, 65), (3, 65)):
        x = base[offset : offset + 4096 * n].view(n, 4096)[:, :1000]
        i = torch.randint(0, n, (7,))
        want = (x[i].softmax(-1) * 2).sum(0)
        for fast in (False, True, True):
            config.triton_fast_launch = fast
            torch.testing.assert_close(f(x, i), want)
    config.triton_fast_launch = True


def test_launch_hits_and_launch_hooks():
    """A repeated launch takes the hit path; a launch hook set later (a profiler's) is called."""
    from triton import knobs

    from kiln.backend.codegen import triton_helpers

    f = kiln.compile(lambda x: (x * 2).sin() + 1, backend="kiln")
    x = torch.randn(1000, device="cuda")
    for _ in range(3):
        torch.testing.assert_close(f(x), (x * 2).sin() + 1)
    assert any(key[2] == 1000 for key in triton_helpers._hits)  # (id, device, xnumel, ...)
    seen = []
    hook = lambda *args: seen.append(args)  # noqa: E731
    chain = knobs.runtime.launch_enter_hook
    if hasattr(chain, "add"):
        chain.add(hook)
    else:
        knobs.runtime.launch_enter_hook = hook
    try:
        torch.testing.assert_close(f(x), (x * 2).sin() + 1)
    finally:
        if hasattr(chain, "add"):
            chain.remove(hook)
        else:
            knobs.runtime.launch_enter_hook = chain
    assert seen


def test_out_of_bounds_index_is_a_device_assert(tmp_path):
    """An index out of bounds stops a CUDA kernel with a device-side assert, as in eager CUDA
    code (run in a subprocess: the assert ends the process's CUDA context)."""
    import subprocess
    import sys

    script = tmp_path / "oob.py"
    script.write_text(
        "import torch, kiln\n"
        "f = kiln.compile(lambda x, i: x[i] + 1, backend='kiln')\n"
        "x = torch.randn(10, device='cuda')\n"
        "f(x, torch.tensor([1, 2], device='cuda'))\n"
        "print(f(x, torch.tensor([1, 20], device='cuda')).sum().item())\n"
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert "device-side assert" in out.stderr or "index out of bounds" in out.stderr, out.stderr


def test_reduce_overhead_training_steps_on_cuda():
    """Training under reduce-overhead: forward and backward replayed, parameters as in eager."""
    import copy

    logs.counters["cudagraphs"].clear()
    torch.manual_seed(0)
    model = test_model_parity.MLP()
    ref = copy.deepcopy(model)
    compiled = kiln.compile(model, backend="kiln", mode="reduce-overhead")
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (ref, model)]
    for _ in range(5):
        x = torch.randn(4, 16)
        for m, opt in zip((ref, compiled), opts):
            opt.zero_grad()
            m(x).pow(2).mean().backward()
            opt.step()
        for p, q in zip(ref.parameters(), model.parameters()):
            torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5)
    assert logs.counters["cudagraphs"]["replays"] >= 4


def test_reduce_overhead_graphs_across_a_break_on_cuda():
    def fn(x):
        y = x.sin() * 2
        kiln.graph_break()
        return (y + 1).cos()

    logs.counters["cudagraphs"].clear()
    compiled = kiln.compile(fn, backend="kiln", mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(5):
            x = torch.randn(1000)
            torch.testing.assert_close(compiled(x), fn(x))
    assert logs.counters["cudagraphs"]["replays"] >= 6


def test_max_autotune_on_cuda():
    """mode="max-autotune-no-cudagraphs": Triton kernels' configurations timed, results as eager."""
    timed = logs.counters["backend"]["autotune_timed"]  # (not cleared: the fixture counts too)
    fn = lambda x: torch.softmax(x * 2, -1) + x.sum(-1, keepdim=True)  # noqa: E731
    compiled = kiln.compile(fn, backend="kiln", mode="max-autotune-no-cudagraphs")
    for n in (4096, 300):
        x = torch.randn(64, n)
        torch.testing.assert_close(compiled(x), fn(x), rtol=1e-4, atol=1e-4)
    assert logs.counters["backend"]["autotune_timed"] >= timed + 2
