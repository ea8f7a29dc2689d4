"""torch.overrides.is_tensor_like in the frame, compiled vs eager (folded while tracing)."""

import torch
from frontend_helpers import run_and_compare


class NotATensor:
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _fn(x):
    if torch.overrides.is_tensor_like(x):
        return (x * 2,)
    return (torch.ones(3) + x,)


def test_is_tensor_like_of_a_tensor_and_numbers():
    compiled = run_and_compare(_fn, torch.randn(3), fullgraph=True, expected_graphs=1)
    for value in (4, 2.5, True):  # (the same compiled function, recompiled per type)
        torch.testing.assert_close(compiled(value), _fn(value))


def test_is_tensor_like_of_constants():
    def fn(x):
        return x + 1, [torch.overrides.is_tensor_like(v) for v in (None, "s", 3, NotATensor)]

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_graphs=1)
