"""Breaks inside callees made while tracing: nested functions over cells of the chain's frames
or of frames that returned, and functions decorated by a grad mode in the frame (Note [Nested
breaks: grad-mode decorated callees]). Eager results, two graphs, the rest compiled."""

import pytest
import torch
from frontend_helpers import CountingBackend, run_and_compare

import kiln


def ops(graph):
    return [n.target.__name__ for n in graph.graph.nodes if n.op == "call_function"]


def t(*shape):
    return torch.arange(float(torch.Size(shape).numel())).reshape(shape) + 1


def cells_three_deep(x1):
    cell1 = x1 + 1
    cell2 = x1 + 2

    def f2(x2, x3):
        nonlocal cell1
        cell3 = x2 + x3 + 4
        cell1 = cell1 + 8

        def f3(x4):
            nonlocal cell2, cell3
            cell2 = cell2 + 16
            cell3 = cell3 + 32
            print("break")
            cell2 = cell2 * 2  # (written after the break: the callers read the new value)
            return x4 + cell1 + cell2 + cell3

        return f3(x2 + x3), cell3

    return f2(x1 + 64, x1 + 128) + (cell1, cell2)


def test_nested_functions_over_the_chains_cells(capsys):
    backend = CountingBackend()
    run_and_compare(cells_three_deep, t(3), expected_graphs=2, backend=backend)
    assert capsys.readouterr().out == "break\n" * 3


def adds_twice(f):
    def wrapper(*args):  # (its cell `f` is of adds_twice's frame, returned before the call)
        return f(*args) * 2

    return wrapper


def over_a_returned_frames_cell(x):
    scale = x.sum()

    @adds_twice
    def h(y):
        y = y + scale
        print("break")
        return y + 1

    return h(x) + h(x * 3)


def test_a_wrapper_over_the_cell_of_a_frame_that_returned(capsys):
    backend = CountingBackend()
    run_and_compare(over_a_returned_frames_cell, t(4), expected_graphs=3, backend=backend)
    assert capsys.readouterr().out == "break\n" * 6
    # (h's and the wrapper's rest after each break is traced: `+ 1`, `* 2`)
    assert [ops(g) for g in backend.graphs[1:]] == [
        ["add", "mul", "mul", "add"],
        ["add", "mul", "add"],
    ]


def make_accumulator(x):
    total = x * 0

    def add(y):
        nonlocal total
        total = total + y
        print("break")
        return total

    def read():
        return total

    return add, read


def shares_a_cell_with_a_returned_closure(x):
    add, read = make_accumulator(x)
    a = add(x)
    b = add(x * 2)
    return a, b, read(), read


def test_closures_sharing_a_cell_see_writes_after_the_break(capsys):
    kiln.reset()
    got = kiln.compile(shares_a_cell_with_a_returned_closure)(t(3))
    expected = shares_a_cell_with_a_returned_closure(t(3))
    torch.testing.assert_close(got[:3], expected[:3])
    torch.testing.assert_close(got[3](), expected[3]())  # (the cell the returned closure reads)


def grad_mode_decorated(x):
    a = x * 2

    @torch.no_grad()
    def fn(y):
        y = y + a
        print("break", torch.is_grad_enabled())
        assert not torch.is_grad_enabled()
        return y * 3, torch.is_grad_enabled()

    out, inside = fn(x)
    return out + x, inside, torch.is_grad_enabled()


def test_a_break_inside_a_function_decorated_by_no_grad(capsys):
    x = t(3).requires_grad_()
    backend = CountingBackend()
    f = run_and_compare(grad_mode_decorated, x, expected_graphs=2, backend=backend)
    assert capsys.readouterr().out == "break False\n" * 3
    # (fn's rest runs in the second graph, under no_grad)
    assert ops(backend.graphs[1]) == ["_set_grad_enabled", "mul", "_set_grad_enabled", "add"]
    assert "recompiles" not in kiln.counters["stats"]  # (the decorator's wrapper: guarded by code)
    f(x)[0].sum().backward()  # (a's path runs under no_grad: only `+ x` has a gradient)
    torch.testing.assert_close(x.grad, torch.ones(3))


def enable_inside_no_grad(x):
    with torch.no_grad():
        y = x * 2

        def grows(z):
            z = z * y
            print("break")
            return z.sum(), torch.is_grad_enabled()

        s, inside = torch.enable_grad()(grows)(x)
        return s, inside, torch.is_grad_enabled()


def test_enable_grad_decorated_inside_a_no_grad_block(capsys):
    x = t(3).requires_grad_()
    f = run_and_compare(enable_inside_no_grad, x, expected_graphs=2)
    s, inside, after = f(x)
    assert inside and not after and s.requires_grad
    s.backward()
    torch.testing.assert_close(x.grad, t(3) * 2)


def breaks_twice_then_raises(x, fail):
    @torch.set_grad_enabled(False)
    def fn(y):
        y = y + 1
        print("first")
        y = y * 2
        print("second")
        if fail:
            raise ValueError("inside")
        return y

    try:
        return fn(x), torch.is_grad_enabled()
    finally:
        assert torch.is_grad_enabled()


@pytest.mark.parametrize("fail", [False, True])
def test_a_decorated_callee_breaking_twice_and_raising(fail, capsys):
    run_and_compare(breaks_twice_then_raises, t(2).requires_grad_(), fail)
    assert capsys.readouterr().out == "first\nsecond\n" * 3
    assert torch.is_grad_enabled()
