"""`torch.set_default_device` inside a compiled frame (Note [Frames: set_default_device inside the
frame]) and the user's modes above torch's default-device mode: the process is left as eager
leaves it, the user's modes see what eager shows them, factories made after the change break."""

import contextlib

import pytest
import torch
from frontend_helpers import CountingBackend, Recorder
from torch._C import _get_function_stack_at, _len_torch_function_stack
from torch._C import _pop_torch_function_stack as pop_mode
from torch._C import _push_on_torch_function_stack as push_mode

import kiln


def stack_state():
    """The function-mode stack as (class name, device of a default-device mode or the mode)."""
    out = []
    for i in range(_len_torch_function_stack()):
        m = _get_function_stack_at(i)
        out.append((type(m).__name__, getattr(m, "device", m)))
    return out


@pytest.fixture(autouse=True)
def no_default_device():
    torch.set_default_device(None)
    kiln.reset()
    yield
    torch.set_default_device(None)
    assert _len_torch_function_stack() == 0


def sets_then_adds(x):
    torch.set_default_device("cpu")
    torch.set_default_device(None)
    torch.set_default_device("cpu")
    return x + 1


def clears_then_adds(x):
    torch.set_default_device(None)
    return x * 2


def sets_then_pops(x):
    torch.set_default_device("cpu")
    y = x * 3
    pop_mode()
    return y + 1


def run(fn, args, modes=(), before=None):
    """fn(*args) with `before` set as the default device and `modes` entered; what it returned,
    the stack it left inside the modes, what each mode saw, and the default device after."""
    torch.set_default_device(before)
    with contextlib.ExitStack() as entered:
        for m in modes:
            entered.enter_context(m)
        out = fn(*args)
        left = stack_state()
    device = torch.get_default_device()
    torch.set_default_device(None)
    return out, left, [m.seen for m in modes], device


def same_as_eager(fn, make_args, n_modes=0, before=None, fullgraph=True):
    backend = CountingBackend()
    compiled = kiln.compile(fn, backend=backend, fullgraph=fullgraph)
    for _ in range(2):  # (the compile, then the cached entry)
        want = run(fn, make_args(), [Recorder() for _ in range(n_modes)], before)
        got = run(compiled, make_args(), [Recorder() for _ in range(n_modes)], before)
        torch.testing.assert_close(got[0], want[0])
        left_want = [(name, d if name == "DeviceContext" else None) for name, d in want[1]]
        left_got = [(name, d if name == "DeviceContext" else None) for name, d in got[1]]
        assert left_got == left_want
        assert got[2:] == want[2:]
    return backend.graphs


def test_set_default_device_in_the_frame_leaves_eagers_stack():
    graphs = same_as_eager(sets_then_adds, lambda: (torch.ones(2),))
    assert len(graphs) == 1


def test_clearing_the_default_device_in_the_frame():
    graphs = same_as_eager(clears_then_adds, lambda: (torch.ones(2),), before="cpu")
    assert len(graphs) == 1


def test_set_default_device_under_the_users_modes_then_pop():
    """The mode's constructor hands `torch.device` to the user's modes, as in eager."""
    m, m1 = Recorder(), Recorder()
    compiled = kiln.compile(sets_then_pops, backend="eager", fullgraph=True)
    with m, m1:
        out = compiled(torch.ones(2))
        push_mode(m1)
        left = [_get_function_stack_at(i) for i in range(_len_torch_function_stack())]
    assert type(left[0]).__name__ == "DeviceContext" and left[0].device == torch.device("cpu")
    assert left[1] is m and left[2] is m1
    e, e1 = Recorder(), Recorder()
    torch.set_default_device(None)
    with e, e1:
        want = sets_then_pops(torch.ones(2))
        push_mode(e1)
    torch.testing.assert_close(out, want)
    assert (m.seen, m1.seen) == (e.seen, e1.seen)
    assert "device" in m1.seen


def test_users_modes_above_a_default_device_mode_compile():
    graphs = same_as_eager(clears_then_adds, lambda: (torch.ones(2),), n_modes=2, before="cpu")
    assert len(graphs) == 1


def makes_zeros(x):
    return torch.zeros(2) + x.sum()


def test_guard_tells_a_default_device_mode_under_the_users_modes_apart():
    backend = CountingBackend()
    compiled = kiln.compile(makes_zeros, backend=backend)
    for before, n_modes in (("cpu", 0), ("cpu", 1), (None, 1), ("cpu", 1), ("cpu", 0)):
        want = run(makes_zeros, (torch.ones(2),), [Recorder() for _ in range(n_modes)], before)
        got = run(compiled, (torch.ones(2),), [Recorder() for _ in range(n_modes)], before)
        torch.testing.assert_close(got[0], want[0])
        assert got[2] == want[2]  # (the mode saw eager's calls: not an entry compiled without it)
    assert backend.calls == 3  # (one per stack; the last two calls hit entries made before)


def meta_factory(x):
    torch.set_default_device("meta")
    z = torch.ones(2)
    torch.set_default_device(None)
    return x * 2, z.device


def test_factory_after_the_change_breaks_and_is_made_on_the_new_device():
    compiled = kiln.compile(meta_factory, backend="eager")
    for _ in range(2):
        out, device = compiled(torch.ones(2))
        assert device == torch.device("meta")
        torch.testing.assert_close(out, torch.full((2,), 2.0))
        assert torch.get_default_device() == torch.device("cpu")
    with pytest.raises(kiln.exc.Unsupported, match="after torch.set_default_device"):
        kiln.compile(meta_factory, backend="eager", fullgraph=True)(torch.ones(2))
