"""Grad mode switched by torch._C._set_grad_enabled (custom context managers) and grad-mode
managers used as decorators, compared with eager (values, requires_grad, the mode after)."""

import contextlib

import pytest
import torch
from frontend_helpers import run_and_compare


class _Manager:
    def __init__(self, mode):
        self.prev = torch.is_grad_enabled()
        self.mode = mode

    def __enter__(self):
        torch._C._set_grad_enabled(self.mode)

    def __exit__(self, *exc):
        torch._C._set_grad_enabled(self.prev)


@contextlib.contextmanager
def _manager(mode):
    prev = torch.is_grad_enabled()
    try:
        yield torch._C._set_grad_enabled(mode)
    finally:
        torch._C._set_grad_enabled(prev)


@pytest.mark.parametrize("make", [_Manager, _manager])
def test_set_grad_enabled_in_a_custom_manager(make):
    def fn(x):
        with make(False):
            y = x * 2
            inside = torch.is_grad_enabled()
        return y, y.requires_grad, inside, torch.is_grad_enabled()

    run_and_compare(fn, torch.randn(3, requires_grad=True), fullgraph=True, expected_breaks=0)


def test_set_grad_enabled_across_a_graph_break():
    def fn(x):
        torch._C._set_grad_enabled(False)
        y = x * 2
        print("a break")
        z = y * 3
        torch._C._set_grad_enabled(True)
        return z, z.requires_grad

    run_and_compare(fn, torch.randn(3, requires_grad=True))
    assert torch.is_grad_enabled()


@pytest.mark.parametrize("form", ["called", "class", "set_grad_enabled"])
def test_grad_mode_managers_as_decorators(form):
    def fn(x):
        def inner(v):
            return v.sin()

        with torch.enable_grad():
            if form == "called":
                inner = torch.no_grad()(inner)
            elif form == "class":
                inner = torch.no_grad(inner)
            else:
                inner = torch.set_grad_enabled(False)(inner)
            after = torch.is_grad_enabled()  # decorating switches nothing
        out = inner(x)
        return out, out.requires_grad, after, torch.is_grad_enabled()

    run_and_compare(fn, torch.randn(3, requires_grad=True), fullgraph=True, expected_breaks=0)


def _breaks_inside(x, log):
    x = x + 1
    print("a break inside the decorated function")
    log.append(torch.is_grad_enabled())
    return x * 2


@pytest.mark.parametrize("make", ["no_grad", "enable_grad", "set_grad_enabled"])
def test_break_inside_a_function_decorated_in_the_frame(make):
    # PyTorch's test_nested_graph_breaks.py: the break is placed inside the decorated function
    # (Note [Nested breaks: grad-mode decorated callees]): its rest and the caller's resume as
    # one compiled chain, the callee's under the decorator's mode
    decorate = {
        "no_grad": lambda f: torch.no_grad()(f),
        "enable_grad": lambda f: torch.enable_grad()(f),
        "set_grad_enabled": lambda f: torch.set_grad_enabled(False)(f),
    }[make]

    def fn(x, log):
        with torch.set_grad_enabled(make == "no_grad"):
            y = decorate(_breaks_inside)(x, log)
        log.append(torch.is_grad_enabled())
        return y.cos(), y.requires_grad

    x = torch.randn(3, requires_grad=True)
    run_and_compare(fn, x, [], expected_frames=2)
