"""A kiln-compiled function called from compiled code is traced inline; the closure cells of
the function it wraps are read through the wrapper, so a compiled closure needs no break."""

import pytest
import torch
from frontend_helpers import CountingBackend

import kiln


def _scaled_adder(offset, scale):
    """A compiled closure over a tensor and a number (and a setter for the number)."""

    @kiln.compile(backend="eager")
    def add(x):
        return x + offset * scale

    def rescale(s):
        nonlocal scale
        scale = s

    return add, rescale


def test_compiled_closure_called_from_fullgraph_code():
    add, _ = _scaled_adder(torch.arange(3.0), 2)
    be = CountingBackend()

    def outer(x):
        return add(x.cos()) * 3

    x = torch.randn(3)
    torch.testing.assert_close(kiln.compile(outer, backend=be, fullgraph=True)(x), outer(x))
    assert be.calls == 1


def test_closure_cell_changes_are_seen():
    add, rescale = _scaled_adder(torch.ones(3), 2)
    be = CountingBackend()

    def outer(x):
        return add(x) - 1

    f = kiln.compile(outer, backend=be, fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(f(x), outer(x))
    rescale(5)  # the guard on the cell's number fails: traced again with 5
    torch.testing.assert_close(f(x), outer(x))
    torch.testing.assert_close(f(x), x + 4)
    assert be.calls == 2


def test_disabled_function_in_a_compiled_closure_names_itself():
    @kiln.disable
    def untraced(x):
        return torch.sin(x) * 10

    @kiln.compile(backend="eager")
    def middle(x):
        return untraced(x + 1) + 1

    def outer(x):
        return middle(x) * 2

    x = torch.randn(4)
    with pytest.raises(kiln.exc.Unsupported, match="call to .*untraced, kept out of compil"):
        kiln.compile(outer, backend="eager", fullgraph=True)(x)
    torch.testing.assert_close(kiln.compile(outer, backend="eager")(x), outer(x))
