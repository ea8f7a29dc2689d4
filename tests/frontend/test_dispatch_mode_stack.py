"""torch.utils._python_dispatch._get_current_dispatch_mode_stack() folded with a guard."""

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

import kiln


class _Counting(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        return func(*args, **(kwargs or {}))


def _modes_then_work(x):
    n = len(_get_current_dispatch_mode_stack())
    return x * 2 + n


def test_empty_stack_is_captured():
    out = kiln.compile(_modes_then_work, fullgraph=True)(torch.ones(3))
    torch.testing.assert_close(out, torch.full((3,), 2.0))


def test_an_active_mode_is_seen_at_run_time():
    f = kiln.compile(_modes_then_work, backend="eager")
    torch.testing.assert_close(f(torch.ones(3)), torch.full((3,), 2.0))
    mode = _Counting()
    with mode:
        out = f(torch.ones(3))
    torch.testing.assert_close(out, torch.full((3,), 3.0))  # the guard saw the mode
    assert mode.calls > 0


def test_multihead_attention_eval_in_one_graph():
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(16, 2, batch_first=True).eval()
    q = torch.randn(2, 3, 16)
    with torch.no_grad():
        ref = mha(q, q, q)[0]
        out = kiln.compile(mha, fullgraph=True)(q, q, q)[0]
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
