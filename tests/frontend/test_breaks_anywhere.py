"""Graph breaks inside loops and inside traced `with` blocks: a graph for the code before the
break, the breaking instruction in Python, a resume function for the rest (compared with eager:
outputs, printed text, grad mode, graph counts)."""

import pytest
import torch
from frontend_helpers import CountingBackend, _clone, assert_same, run_and_compare

import kiln


def t(*shape):
    return torch.randn(*shape)


def compare(fn, *args, calls=1):
    """Eager vs compiled (recompiles allowed: loop counters are ints that change per step)."""
    kiln.reset()
    compiled = kiln.compile(fn, backend=CountingBackend())
    expected = fn(*_clone(args))
    for _ in range(calls):
        assert_same(expected, compiled(*_clone(args)))


def loop_print(x, ws):
    for w in ws:
        x = x * w
        print("step", w.shape)
        x = x + 1
    return x


def test_break_in_loop_body_graphs_and_prints(capsys):
    ws = [t(3), t(3), t(3)]
    # f: x*w0 | after print: x+1 (then FOR_ITER in Python) | loop body: x*w | exit: no op
    run_and_compare(loop_print, t(3), ws, expected_graphs=3, expected_breaks=3)
    out = capsys.readouterr().out
    assert out.count("step torch.Size([3])") == 9  # eager + two compiled calls


def test_break_in_loop_reuses_resume_functions():
    kiln.reset()
    backend = CountingBackend()
    f = kiln.compile(loop_print, backend=backend)
    ws = [t(3) for _ in range(6)]
    x = t(3)
    torch.testing.assert_close(f(x, ws), loop_print(x, ws))
    assert backend.calls == 3  # the same three graphs, whatever the number of iterations
    assert kiln.counters["stats"]["recompiles"] == 0


def long_loop(x, ws):
    for w in ws:
        x = x + w
        kiln.graph_break()
    return x


def test_break_in_long_loop_keeps_the_stack_flat():
    # Note [Resume: tail calls]: 3000 iterations, each two resume calls, no RecursionError
    kiln.reset()
    w = torch.ones(2)
    ws = [w] * 3000
    f = kiln.compile(long_loop, backend="eager")
    x = torch.zeros(2)
    torch.testing.assert_close(f(x, ws), torch.full((2,), 3000.0))


def while_with_break(x, n):
    i = 0
    while i < n:
        x = x + i
        print("i =", i)
        i += 1
    return x * 2


def test_break_in_while_loop(capsys):
    compare(while_with_break, t(3), 4)
    out = capsys.readouterr().out
    assert out == "".join(f"i = {i}\n" for i in range(4)) * 2
    assert kiln.counters["stats"]["unique_graphs"] >= 3
    assert kiln.counters["frames"]["ok"] >= 3  # the frame and its resume functions compiled


def data_dependent_in_loop(x):
    for _ in range(3):
        if x.sum() > 0:
            x = x - 1.5
        else:
            x = x + 1.0
    return x


def test_data_dependent_branch_in_loop():
    compare(data_dependent_in_loop, torch.tensor([2.0, 1.0]), calls=2)
    assert kiln.counters["stats"]["unique_graphs"] >= 2


def grow_while_iterating(x):
    xs = [1]
    for v in xs:
        if v < 3:
            xs.append(v + 1)
        x = x * v
    return x, xs


def test_list_appended_while_iterating():
    run_and_compare(grow_while_iterating, t(3), expected_graphs=1, expected_breaks=0)


def grow_with_break(x):
    xs = [1]
    for v in xs:
        if v < 3:
            xs.append(v + 1)
        x = x * v
        print("v", v)
    return x, xs


def test_list_appended_while_iterating_across_breaks(capsys):
    compare(grow_with_break, t(3))
    assert capsys.readouterr().out == "v 1\nv 2\nv 3\n" * 2


def iterate_argument(x, it):
    for v in it:
        x = x + v
        print("v", v)
    return x


def test_loop_over_an_iterator_argument(capsys):
    kiln.reset()
    f = kiln.compile(iterate_argument, backend="eager")
    x = t(2)
    got = f(x, iter([1, 2, 3]))
    torch.testing.assert_close(got, x + 6)
    gen = (i * 2 for i in range(3))
    torch.testing.assert_close(f(x, gen), x + 6)
    assert capsys.readouterr().out == "v 1\nv 2\nv 3\nv 0\nv 2\nv 4\n"
    assert kiln.counters["stats"]["unique_graphs"] >= 1


# --- with blocks -------------------------------------------------------------------------------


def break_in_no_grad(x):
    with torch.no_grad():
        y = x * 2
        print("inside", torch.is_grad_enabled())
        z = y + 1
    return z * x, torch.is_grad_enabled(), z.requires_grad


def test_break_inside_no_grad(capsys):
    x = t(3).requires_grad_()
    # graph 1: no_grad(mul) | print inside the re-entered no_grad | graph 2: no_grad(add), mul
    run_and_compare(break_in_no_grad, x, expected_graphs=2, expected_breaks=1)
    assert capsys.readouterr().out == "inside False\n" * 3
    assert torch.is_grad_enabled()


def nested_modes(x):
    with torch.no_grad():
        a = x * 2
        with torch.enable_grad():
            b = x * 3
            print("inner", torch.is_grad_enabled())
            c = b + a
        d = c * 2
        print("outer", torch.is_grad_enabled())
    return d, c.requires_grad, d.requires_grad, torch.is_grad_enabled()


def test_break_inside_nested_grad_modes(capsys):
    x = t(3).requires_grad_()
    # graph 1: both muls | graph 2: c and d | after the second print only the with block's
    # exits are left: a graph of grad switches only goes to no backend (the mode is still set)
    run_and_compare(nested_modes, x, expected_graphs=2, expected_breaks=2)
    assert capsys.readouterr().out == "inner True\nouter False\n" * 3


def set_grad_enabled_break(x, mode):
    with torch.set_grad_enabled(mode):
        y = x.sin()
        kiln.graph_break()
        z = y.cos()
    return z, z.requires_grad


@pytest.mark.parametrize("mode", [True, False])
def test_break_inside_set_grad_enabled(mode):
    x = t(3).requires_grad_()
    run_and_compare(set_grad_enabled_break, x, mode, expected_graphs=2, expected_breaks=1)


def with_in_loop(x):
    for _ in range(2):
        with torch.no_grad():
            x = x + 1
            print("in", torch.is_grad_enabled())
        x = x * 2
    return x, torch.is_grad_enabled()


def test_break_in_with_inside_loop(capsys):
    compare(with_in_loop, t(3).requires_grad_())
    assert capsys.readouterr().out == "in False\n" * 4
    assert torch.is_grad_enabled()


def raises_in_no_grad(x):
    with torch.no_grad():
        y = x * 2
        kiln.graph_break()
        raise ValueError("boom")
    return y


def test_exception_after_break_in_with_restores_mode():
    run_and_compare(raises_in_no_grad, t(3).requires_grad_())
    assert torch.is_grad_enabled()


def with_inside_try(x):
    try:
        with torch.no_grad():
            y = x * 2
            print("in try")
    except RuntimeError:
        y = x
    return y


def test_break_in_with_inside_try_runs_eagerly(capsys):
    # the except clause could catch what the break's instruction raises: no break placed
    run_and_compare(with_inside_try, t(3), calls=1, expected_graphs=0)
    assert capsys.readouterr().out == "in try\n" * 2


class Announce:
    def __init__(self, name):
        self.name = name

    def __enter__(self):
        print("enter", self.name)
        return self

    def __exit__(self, *exc):
        print("exit", self.name)
        return False


def unknown_context_manager(x):
    y = x * 2
    with Announce("a"):
        z = y + 1
    return z.sin()


def test_with_over_untraced_context_manager_keeps_the_graph_before(capsys):
    # the graph before the with; Python enters the manager (its __enter__ prints: a break at
    # BEFORE_WITH); a graph of the block, Python runs __exit__, a graph after it
    run_and_compare(unknown_context_manager, t(3), expected_graphs=3, expected_breaks=2)
    assert capsys.readouterr().out == "enter a\nexit a\n" * 3


def nullcontext_use(x, use_grad):
    import contextlib

    ctx = torch.no_grad() if not use_grad else contextlib.nullcontext()
    with ctx:
        y = x * 2
    with contextlib.nullcontext(x) as same:
        z = same + y
    return z, z.requires_grad


@pytest.mark.parametrize("use_grad", [True, False])
def test_nullcontext_traced(use_grad):
    run_and_compare(nullcontext_use, t(3).requires_grad_(), use_grad, expected_graphs=1)
    assert kiln.counters["stats"]["graph_breaks"] == 0


def break_in_nullcontext(x):
    import contextlib

    with contextlib.nullcontext():
        y = x * 2
        print("in nullcontext")
        z = y + 1
    return z


def test_break_inside_nullcontext(capsys):
    run_and_compare(break_in_nullcontext, t(3), expected_graphs=2, expected_breaks=1)
    assert capsys.readouterr().out == "in nullcontext\n" * 3


class WithHelper(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 3.0

    def helper(self, x):
        print("in helper")
        return x * self.scale

    def forward(self, x):
        return self.helper(x + 1) * 2


def test_break_inside_a_method_of_a_submodule_call(capsys):
    # the break is placed inside the method: the rest of it and of forward resume as one chain
    m = WithHelper()
    run_and_compare(m, t(3), expected_breaks=1, expected_graphs=2)
    assert capsys.readouterr().out == "in helper\n" * 3


def tensor_setitem(x, y):
    z = x.clone()
    z[..., 1:] = y[..., :-1]
    z[..., 0] = 7.0
    z[z > 100] = 0.0
    return z


def test_tensor_setitem_in_graph():
    run_and_compare(tensor_setitem, t(2, 4), t(2, 4), expected_graphs=1, expected_breaks=0)


def setitem_on_input(x):
    x[0] = 1.0
    return x * 2


def test_tensor_setitem_mutates_the_input():
    run_and_compare(setitem_on_input, t(3), expected_graphs=1, expected_breaks=0)


class Stack(torch.nn.Module):
    def __init__(self, n=4):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x).relu()
            kiln.graph_break()  # e.g. a logging call between layers
            x = x * 2
        return x


def test_break_in_loop_over_layers_compiles_each_piece_once():
    torch.manual_seed(0)
    m = Stack()
    x = t(2, 4)
    kiln.reset()
    backend = CountingBackend()
    opt = kiln.compile(m, backend=backend)
    for _ in range(3):
        torch.testing.assert_close(opt(x), m(x))
    # forward: layer 0 | after the break: *2 and the next layer (the resume function traces on
    # through the loop's iterator, Note [Iterators: inputs]) | after the last break: *2 alone
    # (the iterator is exhausted there: one recompile of the same resume function, not one
    # per layer)
    assert backend.calls == 3
    assert kiln.counters["stats"]["recompiles"] == 1


def branch_inside_no_grad(x):
    with torch.no_grad():
        y = x * 2
        if y.sum() > 0:
            z = y + 1
        else:
            z = y - 1
        w = z * 3
    return w, w.requires_grad, torch.is_grad_enabled()


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_data_dependent_branch_inside_no_grad(sign):
    x = (torch.ones(3) * sign).requires_grad_()
    run_and_compare(branch_inside_no_grad, x, expected_breaks=1)
    assert kiln.counters["stats"]["unique_graphs"] == 2
    assert torch.is_grad_enabled()


def untraced_manager_inside_no_grad(x):
    with torch.no_grad():
        y = x * 2
        with Announce("inner"):
            z = y + 1
        w = z * 3
    return w, w.requires_grad


def test_untraced_manager_inside_no_grad(capsys):
    run_and_compare(untraced_manager_inside_no_grad, t(3).requires_grad_())
    assert capsys.readouterr().out == "enter inner\nexit inner\n" * 3
    assert torch.is_grad_enabled()


def call_with_pending_stack_in_no_grad(x):
    with torch.no_grad():
        out = torch.add(x * 2, helper_prints(x))  # a break with items pending on the stack
    return out, out.requires_grad


def helper_prints(v):
    print("helper")
    return v + 1


def test_break_in_call_with_pending_stack_inside_no_grad(capsys):
    run_and_compare(call_with_pending_stack_in_no_grad, t(3).requires_grad_())
    assert capsys.readouterr().out == "helper\n" * 3
