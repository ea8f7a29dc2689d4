"""A compiled frame is compiled again when process settings a backend reads at compile time
change: deterministic algorithms, cuBLAS TF32 (kiln's Triton matmul picks its precision by it)."""

import torch

import kiln


def test_settings_changes_recompile():
    compiled_under, ran_under = [], []

    def backend(gm, example_inputs):
        state = (torch.are_deterministic_algorithms_enabled(), torch._C._get_cublas_allow_tf32())
        compiled_under.append(state)

        def run(*args):
            ran_under.append(state)
            return gm.forward(*args)

        return run

    def fn(x):
        return x + 1

    compiled = kiln.compile(fn, backend=backend)
    before = (torch.are_deterministic_algorithms_enabled(), torch._C._get_cublas_allow_tf32())
    x = torch.randn(3)
    try:
        for state in [(False, False), (True, False), (False, True), (False, False)]:
            torch.use_deterministic_algorithms(state[0])
            torch._C._set_cublas_allow_tf32(state[1])
            torch.testing.assert_close(compiled(x), x + 1)
            assert ran_under[-1] == state  # (the entry compiled under these settings ran)
    finally:
        torch.use_deterministic_algorithms(before[0])
        torch._C._set_cublas_allow_tf32(before[1])
    assert len(compiled_under) == 3
