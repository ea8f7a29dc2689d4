"""Frames called under a user's TorchDispatchMode (Note [Frames: under a user's dispatch mode]):
the mode sees the ATen calls eager makes, never kiln's own, and a frame compiled inside a mode's
__torch_dispatch__ works."""

import torch
from frontend_helpers import CountingBackend
from torch.utils._python_dispatch import TorchDispatchMode

import kiln


class Recorder(TorchDispatchMode):
    """Records the name of every ATen call it sees."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


class IgnoringRecorder(Recorder):
    @classmethod
    def ignore_compile_internals(cls):
        return True


def body(x, y):
    return (x * y).sin() + 1


def test_mode_sees_what_eager_runs():
    x, y = torch.randn(4), torch.randn(4)
    with Recorder() as eager_mode:
        expected = body(x, y)
    for backend in ("kiln", "eager"):
        kiln.reset()
        with Recorder() as mode:
            got = kiln.compile(body, backend=backend)(x, y)
        torch.testing.assert_close(got, expected)
        assert mode.seen == eager_mode.seen  # (no meta-tensor calls of kiln's, no fused kernel)


def test_compile_inside_torch_dispatch():
    """A mode's __torch_dispatch__ compiles the op with another signature than kiln's own
    calls would use: kiln never sends its tracing calls through the mode."""

    class Redo(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return kiln.compile(lambda a, b: func(a, b) * 2, backend="eager")(*args, **kwargs)

    x = torch.ones(3)
    fn = kiln.compile(lambda a, b: torch.add(a, b), backend="eager", fullgraph=True)
    with Redo():
        got = fn(x, x)
    torch.testing.assert_close(got, torch.full((3,), 4.0))


def test_mode_that_ignores_compilation():
    """ignore_compile_internals: the frame compiles (the mode off while kiln traces) and its
    compiled code runs with the mode on."""
    backend = CountingBackend()
    x, y = torch.randn(4), torch.randn(4)
    with IgnoringRecorder() as mode:
        got = kiln.compile(body, backend=backend)(x, y)
    torch.testing.assert_close(got, body(x, y))
    assert backend.calls == 1
    assert "aten.empty_strided.default" not in mode.seen  # (kiln's meta inputs)
    assert "aten.sin.default" in mode.seen  # the graph ran under the mode


def test_compiled_again_once_the_mode_is_gone():
    backend = CountingBackend()
    fn = kiln.compile(body, backend=backend)
    x, y = torch.randn(4), torch.randn(4)
    with Recorder():
        fn(x, y)
    assert backend.calls == 0
    torch.testing.assert_close(fn(x, y), body(x, y))
    assert backend.calls == 1
