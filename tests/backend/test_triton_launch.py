"""The CUDA launch path's keys and hook checks (Note [Triton: launches on CUDA]); its launches
run in tests/backend/test_cuda.py where CUDA exists."""

import pytest
import torch

pytest.importorskip("triton")
knobs = pytest.importorskip("triton.knobs")

from kiln.backend.codegen import triton_helpers  # noqa: E402


@pytest.fixture
def runtime():
    rt = knobs.runtime
    saved = rt.launch_enter_hook, rt.launch_exit_hook
    yield rt
    rt.launch_enter_hook, rt.launch_exit_hook = saved


def test_empty_hook_chain_is_no_hook(runtime):
    """Triton keeps an empty HookChain when no hook is set: that must not count as a hook."""
    chain = getattr(knobs, "HookChain", None)
    runtime.launch_enter_hook = chain() if chain else None
    runtime.launch_exit_hook = chain() if chain else None
    assert not triton_helpers._hooked()
    if chain:
        runtime.launch_enter_hook.add(print)
        assert triton_helpers._hooked()
        runtime.launch_enter_hook.remove(print)
        assert not triton_helpers._hooked()
    runtime.launch_exit_hook = print  # the older API: a plain function
    assert triton_helpers._hooked()


def test_specialization_key():
    """Tensors by 16-byte alignment, ints by Triton's own properties, floats by type alone (a
    float that changes every call must not add an entry per value)."""
    base = torch.zeros(64)
    spec = triton_helpers._spec
    assert spec([base, base[1:], base[4:]]) == (True, False, True)
    assert spec([1, 16, 17, 2**40]) == (
        (True, False, True),
        (False, True, True),
        (False, False, True),
        (False, True, False),
    )
    assert spec([0.5]) == spec([0.25]) == (float,)
    assert spec([True]) != spec([False])


class _FakeCompiled:
    """What `kernel[grid](...)` returns on a GPU: the launcher pieces _Relaunch keeps."""

    def __init__(self, calls):
        self.calls = calls
        self.function, self.packed_metadata = "fn", "meta"

    def run(self, *launch_args):
        self.calls.append(("run", launch_args[0], launch_args[9:]))


class _FakeKernel:
    """A JIT kernel whose launches are recorded (the GPU launch path without a GPU)."""

    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        def jit(*args, **consts):
            self.calls.append(("jit", grid[0], args, tuple(consts.items())))
            return _FakeCompiled(self.calls)

        return jit


@pytest.fixture
def gpu_launch_path(monkeypatch):
    """The CUDA branch of the launchers, with the driver stubbed (runs on any machine)."""
    monkeypatch.setattr(triton_helpers, "INTERPRET", False)
    monkeypatch.setattr(triton_helpers, "_stream", lambda dev: "stream")
    monkeypatch.setattr(triton_helpers, "_device", lambda: 0)
    monkeypatch.setattr(triton_helpers, "_hooked", lambda: False)
    monkeypatch.setattr(triton_helpers.config, "triton_fast_launch", True)
    monkeypatch.setattr(triton_helpers, "_hits", {})
    monkeypatch.setattr(triton_helpers, "_compiled", {})


def test_tuned_launches_take_the_hit_path(gpu_launch_path, monkeypatch):
    """Under max-autotune a kernel is tuned on its first launch; later launches go straight to
    the launcher with the tuned configuration (they went through the tuner and Triton's JIT
    path on every call: max-autotune ran slower than default mode on a GPU)."""
    tunings = []

    def best(kernel, args, xnumel, rnumel, rblock, default, spec, run):
        tunings.append(xnumel)
        return (256, 1, 4)

    monkeypatch.setattr(triton_helpers.triton_tune, "best", best)
    kernel, x = _FakeKernel(), torch.zeros(1000)
    for _ in range(3):
        triton_helpers.launch(kernel, (x, x), 1000, None, None, False, tune=True)
    assert tunings == [1000]
    assert [c[0] for c in kernel.calls] == ["jit", "run", "run"]
    assert kernel.calls[1][1] == kernel.calls[2][1] == 4  # grid of the tuned XBLOCK=256
    assert kernel.calls[2][2][-2:] == (1000, 256)  # xnumel, then XBLOCK


def test_matmul_template_launches_take_the_hit_path(gpu_launch_path, monkeypatch):
    """A matmul template's configuration is looked up on its first launch only."""
    lookups = []

    def mm_default(m, n, k, dtype, interpret):
        lookups.append((m, n, k))
        return (64, 32, 16, 8, 4, 3)

    monkeypatch.setattr(triton_helpers.triton_tune, "mm_default", mm_default)
    kernel, a = _FakeKernel(), torch.zeros(100, 70)
    for _ in range(3):
        triton_helpers.launch_mm(kernel, (a, a, a), 100, 70, 1, 50)
    assert lookups == [(100, 70, 50)]
    assert [c[0] for c in kernel.calls] == ["jit", "run", "run"]
    assert kernel.calls[0][1] == 2 * 3  # ceil(100/64) * ceil(70/32) tiles
    assert kernel.calls[2][1] == 6 and kernel.calls[2][2][-4:] == (64, 32, 16, 8)
