"""Frames called under a TorchFunctionMode (Note [Frames: under a user's torch function mode]): a
user's mode sees the calls eager makes, never kiln's guards or wrapper; torch's default-device
mode compiles, guarded, and never reaches the compiled code; meta inputs never reach a kernel."""

import pytest
import torch
from torch.overrides import TorchFunctionMode

import kiln


class Recorder(TorchFunctionMode):
    """Records the name of every torch function it sees."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


def body(x, w):
    return torch.relu(x @ w).sum(0).view(-1) + 1


@pytest.mark.parametrize("backend", ["kiln", "eager"])
def test_user_mode_sees_what_eager_runs(backend):
    x, w = torch.randn(8, 4), torch.randn(4, 3)
    with Recorder() as eager_mode:
        expected = body(x, w)
    kiln.reset()
    compiled = kiln.compile(body, backend=backend)
    compiled(x, w)  # compiled outside the mode first: the entry must not run under it
    for _ in range(2):
        with Recorder() as mode:
            actual = compiled(x, w)
        assert mode.seen == eager_mode.seen == ["matmul", "relu", "sum", "view", "add"]
        torch.testing.assert_close(actual, expected)


def test_meta_inputs_never_reach_a_kernel():
    # (a C++ kernel wrote through the meta tensors' null pointers: a crash)
    f = kiln.compile(lambda a, b: (a * 2).sin() + b.sum())
    out = f(torch.ones(3, device="meta"), torch.randn(2))
    assert out.device.type == "meta" and out.shape == (3,)


def ones_plus(x):
    return torch.ones(3) + x.sum()


def test_default_device_context_matches_eager():
    x = torch.randn(2)
    compiled = kiln.compile(ones_plus)
    kiln.reset()
    with torch.device("meta"):
        expected = ones_plus(x)
        actual = compiled(x)
    assert actual.device == expected.device == torch.device("meta")
    out = compiled(x)  # outside the context again: CPU, as eager
    assert out.device.type == "cpu"
    torch.testing.assert_close(out, ones_plus(x))


def scale(x):
    return (x * 2).cos()


def test_entry_compiled_outside_is_not_run_under_a_device_context():
    counts = []

    def backend(gm, example_inputs):
        counts.append(1)
        return gm.forward

    x = torch.randn(4)
    compiled = kiln.compile(scale, backend=backend)
    torch.testing.assert_close(compiled(x), scale(x))
    with torch.device("meta"):
        torch.testing.assert_close(compiled(x), scale(x))  # the guard checks the default device
    assert len(counts) == 2
    torch.testing.assert_close(compiled(x), scale(x))
    assert len(counts) == 2  # (the first entry serves again)


def enters_a_mode(x):
    y = x.sin()
    mode = Recorder()
    with mode:  # (a graph break: the rest runs in resume functions, under the mode)
        z = y.cos() * 2
    return z + 1, mode.seen


def test_mode_entered_inside_the_frame():
    x = torch.randn(3)
    expected, expected_seen = enters_a_mode(x)
    compiled = kiln.compile(enters_a_mode)
    for _ in range(2):
        actual, seen = compiled(x)
        assert seen == expected_seen == ["cos", "mul"]
        torch.testing.assert_close(actual, expected)
