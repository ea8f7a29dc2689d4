"""A compiled frame that pushes or pops torch's function-mode stack itself (Note [Frames: the
function-mode stack pushed or popped by the frame]): the calls after the change go through the new
stack, and the stack the frame leaves is eager's."""

import pytest
import torch
from torch._C import _get_function_stack_at, _len_torch_function_stack
from torch._C import _pop_torch_function_stack as pop_mode
from torch._C import _push_on_torch_function_stack as push_mode
from torch.overrides import TorchFunctionMode

import kiln
from kiln.exc import Unsupported


class PlusOne(TorchFunctionMode):
    """Adds one to every mul's result; records what it saw."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.append(func.__name__)
        out = func(*args, **(kwargs or {}))
        return out + 1 if func is torch.Tensor.mul else out


def stack():
    return [_get_function_stack_at(i) for i in range(_len_torch_function_stack())]


def pops(x):
    a = x * 2
    m = pop_mode()
    b = x * 3
    return a, b, m


def pushes(x, m):
    a = x * 2
    push_mode(m)
    b = x * 3
    return a, b


def push_then_break(x, m):
    push_mode(m)
    a = x * 2
    kiln.graph_break()
    return a, x * 3


def run_under(fn, args, outer, fullgraph=True):
    """fn(*args) under `outer` (entered); what it returned, the stack it left, what outer saw."""
    with outer:
        out = fn(*args)
        left = stack()
        for _ in range(len(left) - 1):
            pop_mode()  # (back to `outer` alone, so its exit finds it)
        if not left:
            push_mode(outer)
    return out, left


def check(fn, make_args, fullgraph=True, graphs=None):
    kiln.reset()
    compiled = kiln.compile(fn, backend="eager", fullgraph=fullgraph)
    for _ in range(2):  # (compile, then the cached entry)
        runs = []
        for f in (fn, compiled):
            outer, args = PlusOne(), make_args()
            out, left = run_under(f, args, outer)
            runs.append((out, [type(m) for m in left], len(left), outer.seen, left))
        (want, want_types, want_n, want_seen, wl), (got, got_types, got_n, got_seen, gl) = runs
        tensors = [o for o in want if isinstance(o, torch.Tensor)]
        torch.testing.assert_close([o for o in got if isinstance(o, torch.Tensor)], tensors)
        assert (got_types, got_n, got_seen) == (want_types, want_n, want_seen)
        for w, g in zip(want, got):
            if isinstance(w, TorchFunctionMode):
                assert (w in wl) == (g in gl)  # (the popped mode is the one returned)


def test_pop_inside_the_frame():
    check(pops, lambda: (torch.ones(2),))


def test_push_inside_the_frame():
    check(pushes, lambda: (torch.ones(2), PlusOne()))


def test_push_then_a_graph_break_resumes_under_the_new_stack():
    check(push_then_break, lambda: (torch.ones(2), PlusOne()), fullgraph=False)


def test_the_popped_mode_is_returned():
    outer = PlusOne()
    kiln.reset()
    with outer:
        _, _, m = kiln.compile(pops, backend="eager", fullgraph=True)(torch.ones(2))
        push_mode(outer)
    assert m is outer


def push_inside_with(x, m, n):
    with m:
        push_mode(n)
        y = x * 2
        pop_mode()
    return y


def test_push_inside_a_with_block_of_a_mode_breaks_with_the_reason():
    kiln.reset()
    f = kiln.compile(push_inside_with, backend="eager", fullgraph=True)
    with pytest.raises(Unsupported, match="inside a `with` block"):
        f(torch.ones(2), PlusOne(), PlusOne())
    x = torch.ones(2)
    kiln.reset()
    got = kiln.compile(push_inside_with, backend="eager")(x, PlusOne(), PlusOne())
    torch.testing.assert_close(got, push_inside_with(x, PlusOne(), PlusOne()))
    assert _len_torch_function_stack() == 0


def test_default_device_mode_stays_at_the_bottom():
    torch.set_default_device("cpu")
    try:
        kiln.reset()
        m = PlusOne()
        a, b = kiln.compile(pushes, backend="eager", fullgraph=True)(torch.ones(2), m)
        left = stack()
        assert [type(x).__name__ for x in left] == ["DeviceContext", "PlusOne"] and left[1] is m
        pop_mode()
        torch.testing.assert_close((a, b), (torch.full((2,), 2.0), torch.full((2,), 4.0)))
    finally:
        torch.set_default_device(None)
    assert _len_torch_function_stack() == 0


def pop_empty_caught(x):
    try:
        pop_mode()
    except RuntimeError as e:
        return x - 1, str(e)
    return x, ""


def test_pop_of_an_empty_stack_raises_eagers_error():
    kiln.reset()
    compiled = kiln.compile(pop_empty_caught, backend="eager", fullgraph=True)
    x = torch.ones(2)
    got, expected = compiled(x), pop_empty_caught(x)
    torch.testing.assert_close(got[0], expected[0])
    assert got[1] == expected[1] == "trying to pop from empty mode stack"
