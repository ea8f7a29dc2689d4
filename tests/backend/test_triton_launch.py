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
