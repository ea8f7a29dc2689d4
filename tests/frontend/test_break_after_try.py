"""A graph break after a try statement that ended inside an open with block is placed where it
is (Note [Blocks: rewinding to a try block]): the try is closed, nothing rewinds to it."""

import torch

import kiln
from tests.frontend.frontend_helpers import assert_same, counted_compile


def after_try_in_resumed_with(x, n):
    with torch.set_grad_enabled(True):
        with torch.set_grad_enabled(False):
            x = x + 1
            kiln.graph_break()
        try:
            with torch.set_grad_enabled(False):
                x = x + 1
                if n == 0:
                    kiln.graph_break()  # (inside the try: the resume function runs in Python)
        except Exception:
            pass
        with torch.set_grad_enabled(False):
            x = x * 3
            kiln.graph_break()
        x = x + 1
    return x, torch.is_grad_enabled()


def after_try_in_with(x):
    with torch.no_grad():
        try:
            x = x + 1
        except Exception:
            pass
        x = x * 2
        kiln.graph_break()
        x = x - 1
    return x, torch.is_grad_enabled()


def test_break_after_a_try_in_a_resumed_with_block():
    for n, count in ((0, 1), (1, 3)):
        compiled, graphs = counted_compile(after_try_in_resumed_with)
        x = torch.ones(2, requires_grad=True)
        assert_same(after_try_in_resumed_with(x, n), compiled(x, n))
        assert len(graphs) == count  # (as torch.compile: 1 for n == 0, 3 for n == 1)


def test_break_after_a_try_in_a_with_block():
    compiled, graphs = counted_compile(after_try_in_with)
    x = torch.ones(3, requires_grad=True)
    assert_same(after_try_in_with(x), compiled(x))
    assert_same(after_try_in_with(x), compiled(x))
    assert len(graphs) == 2
