"""Grad mode inside compiled code: traced `with` blocks, guards, breaks around them."""

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln


def no_grad_block(x):
    with torch.no_grad():
        y = x * 2
    z = y + x
    with torch.enable_grad():
        w = z * 3
    with torch.set_grad_enabled(False):
        v = w.sin()
    return y, z, w, v


def nested_blocks(x):
    with torch.no_grad():
        a = x + 1
        with torch.enable_grad():
            b = x * a
        c = b * 2
    return a, b, c


def return_inside_with(x):
    with torch.no_grad():
        return x.exp()


def break_inside_with(x):
    with torch.no_grad():
        y = x * 2
        print("inside")
    return y + 1


@torch.no_grad()
def decorated(x):
    return x * 5


def calls_decorated(x):
    return decorated(x) + x


def test_grad_mode_blocks_one_graph():
    x = torch.randn(3, requires_grad=True)
    run_and_compare(no_grad_block, x, expected_graphs=1, expected_breaks=0)
    run_and_compare(nested_blocks, x, expected_graphs=1, expected_breaks=0)
    run_and_compare(return_inside_with, x, expected_graphs=1, expected_breaks=0)
    assert torch.is_grad_enabled()


def test_grad_mode_block_under_outer_no_grad_recompiles():
    x = torch.randn(3, requires_grad=True)
    kiln.reset()
    f = kiln.compile(no_grad_block, backend="eager")
    f(x)
    with torch.no_grad():
        outs, expected = f(x), no_grad_block(x)
    assert [o.requires_grad for o in outs] == [o.requires_grad for o in expected]
    with torch.no_grad():
        assert [o.requires_grad for o in f(x)] == [False, False, False, False]
    assert kiln.counters["stats"]["recompiles"] == 1
    assert torch.is_grad_enabled()


def test_break_inside_with_leaves_and_reenters_it():
    x = torch.randn(3, requires_grad=True)
    # Note [Graph breaks: with blocks]: the graph before, the print under no_grad, the rest
    run_and_compare(break_inside_with, x, expected_graphs=2, expected_breaks=1)
    assert torch.is_grad_enabled()


def test_function_decorated_with_no_grad_is_traced_through_its_wrapper():
    x = torch.randn(3, requires_grad=True)
    run_and_compare(calls_decorated, x, expected_graphs=1, expected_breaks=0)
    assert torch.is_grad_enabled()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_called_under_autocast_compiles_one_entry_per_state(backend):
    # Note [Autocast: frames called under autocast]: the entry state is guarded, so a call under
    # autocast compiles once and every later call under the same state hits that entry.
    kiln.reset()
    f = kiln.compile(lambda a, b: a @ b, backend=backend)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    assert f(a, b).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(3):
            out = f(a, b)
            assert out.dtype == torch.bfloat16
            torch.testing.assert_close(out, a @ b)  # eager under the same autocast
    assert f(a, b).dtype == torch.float32
    assert kiln.counters["stats"]["recompiles"] == 1
    assert kiln.counters["stats"]["unique_graphs"] == 2
