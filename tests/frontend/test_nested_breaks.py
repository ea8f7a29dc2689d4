"""Breaks inside inlined calls placed where they happen (Note [Nested breaks: placing the break
in the callee]): eager results, the callers' work in the first graph, one chain after."""

import functools
import sys
import warnings

import pytest
import torch
from frontend_helpers import CountingBackend, run_and_compare

import kiln


def t(*shape):
    return torch.arange(float(torch.Size(shape).numel())).reshape(shape) + 1


def inner(x1):
    x1 = x1 + 1
    kiln.graph_break()
    return x1 + 2


def middle(x2):
    return inner(x2 + 4) + 8


def outer(x3):
    return middle(x3 + 16) + 32


def test_one_break_three_frames_deep_makes_two_graphs():
    backend = CountingBackend()
    run_and_compare(outer, t(3), expected_graphs=2, expected_breaks=1, backend=backend)
    first, rest = backend.graphs
    assert len([n for n in first.graph.nodes if n.op == "call_function"]) == 3
    assert len([n for n in rest.graph.nodes if n.op == "call_function"]) == 3


def test_switched_off_the_break_is_placed_at_the_roots_call(monkeypatch):
    monkeypatch.setattr(kiln.config, "nested_graph_breaks", False)
    run_and_compare(outer, t(3), expected_graphs=6, expected_breaks=3)


def twice_inner(x):
    y = x * 2
    print("first")
    y = y + 1
    print("second")
    return y * 3


def calls_twice_inner(x):
    a = twice_inner(x + 1)
    return a - 1, twice_inner(a)


def test_two_breaks_in_a_callee_called_twice(capsys):
    run_and_compare(calls_twice_inner, t(2, 3), expected_breaks=4)
    assert capsys.readouterr().out == "first\nsecond\n" * 6


def loop_inner(x, n):
    for i in range(n):
        x = x + i
        print("step", i)
    return x


def calls_loop(x):
    return loop_inner(x * 2, 3).sum()


def test_break_in_every_pass_of_a_callees_loop(capsys):
    kiln.reset()
    f = kiln.compile(calls_loop)
    for _ in range(2):
        torch.testing.assert_close(f(t(4)), calls_loop(t(4)))
    assert capsys.readouterr().out.count("step") == 12
    # (the loop's counter is an int of the resume function's box: dynamic after one change)
    assert kiln.counters["stats"]["recompiles"] <= 2


log = []


def stores_then_breaks(obj, xs, x):
    obj.count = obj.count + 1
    xs.append(x * 2)
    log.append("before")
    print("break")
    xs.append(x * 3)
    return x + obj.count


class Holder:
    def __init__(self):
        self.count = 1


def calls_with_side_effects(obj, xs, x):
    y = stores_then_breaks(obj, xs, x + 1)
    return y, len(xs)


def test_stores_made_in_the_callee_before_the_break_are_kept():
    log.clear()
    x = t(2)
    h_eager, xs_eager = Holder(), []
    expected = calls_with_side_effects(h_eager, xs_eager, x)
    f = kiln.compile(calls_with_side_effects)
    for _ in range(2):
        log.clear()
        h, xs = Holder(), []
        got = f(h, xs, x)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(xs, xs_eager)
        assert h.count == h_eager.count and log == ["before"]


def make_counter():
    total = torch.zeros(2)

    def bump(x):
        nonlocal total
        total = total + x
        print("break")
        return total * 2

    def read():
        return total

    return bump, read


def test_a_closure_writing_its_cell_before_the_break():
    bump, read = make_counter()

    def f(x):
        return bump(x + 1) + 1

    eager = [f(t(2)), f(t(2))]
    eager_total = read().clone()
    bump, read = make_counter()
    cf = kiln.compile(f)
    got = [cf(t(2)), cf(t(2))]
    torch.testing.assert_close(got, eager)
    torch.testing.assert_close(read(), eager_total)


class Noisy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        print("noisy")
        return h.relu()


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = torch.nn.Linear(4, 4)
        self.blocks = torch.nn.ModuleList([Noisy(), Noisy()])

    def forward(self, x):
        x = self.pre(x)
        for block in self.blocks:
            x = block(x) + x
        return x.sum()


def test_submodule_breaks_keep_gradients(capsys):
    torch.manual_seed(0)
    model = Model()
    x = torch.randn(3, 4, requires_grad=True)
    model(x).backward()
    eager_grads = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
    model.zero_grad()
    x.grad = None
    backend = CountingBackend()
    kiln.reset()
    cm = kiln.compile(model, backend=backend)
    cm(x).backward()
    got = [p.grad for p in model.parameters()] + [x.grad]
    torch.testing.assert_close(got, eager_grads)
    assert backend.calls == 3  # pre, lin | relu, +, lin | relu, +, sum


def raises_after_break(x):
    print("break")
    raise ValueError("from the callee")


def catches_nothing(x):
    return raises_after_break(x + 1)


def breaks_in_callee_inside_try(x):
    try:
        return raises_after_break(x)
    except ValueError as e:
        return x - 1, str(e)


def test_an_exception_from_the_chain_reaches_the_caller():
    run_and_compare(catches_nothing, t(2))
    run_and_compare(breaks_in_callee_inside_try, t(2))


def inner_with_try(x):
    try:
        print("break")
        y = x + 1
    except RuntimeError:
        y = x
    return y


def inner_with_no_grad(x):
    with torch.no_grad():
        y = x * 2
        print("break")
    return y + x


def outer_of_blocks(x):
    return inner_with_try(x * 2) + inner_with_no_grad(x)


def test_callees_with_open_blocks_break_at_the_roots_call():
    # (the try block keeps its break at the root's call; the no_grad block's is nested)
    run_and_compare(outer_of_blocks, t(3).requires_grad_())


def grad_mode_inner(x):
    with torch.no_grad():
        x = x + 1
        print("inner", torch.is_grad_enabled())
        return x + 2


def grad_mode_middle(x):
    with torch.enable_grad():
        x = x * 4
        print("middle", torch.is_grad_enabled())
        return grad_mode_inner(x) * x + 8


def grad_mode_outer(x):
    with torch.no_grad():
        h = x + 16
        y = grad_mode_middle(x)
    return y * h + 32, torch.is_grad_enabled(), y.requires_grad


def test_breaks_inside_callees_grad_mode_blocks(capsys):
    # Note [Nested breaks: with blocks]: each print runs in the mode its blocks set, the graphs
    # hold every op, the rest after each break in a chain
    x = t(3).requires_grad_()
    compiled = run_and_compare(grad_mode_outer, x, expected_graphs=3)
    assert capsys.readouterr().out == "middle True\ninner False\n" * 3
    got = compiled(x)[0]
    (grad,) = torch.autograd.grad(got.sum(), x)
    (expected,) = torch.autograd.grad(grad_mode_outer(x)[0].sum(), x)
    torch.testing.assert_close(grad, expected)


class Refused(Exception):
    pass


def raises_in_no_grad(x, fail):
    with torch.no_grad():
        x = x * 2
        print("before")
        if fail:
            raise Refused(torch.is_grad_enabled())
        return x


def calls_raiser(x, fail):
    with torch.autocast("cpu", enabled=False):
        y = raises_in_no_grad(x + 1, fail)
    return y + 1, torch.is_grad_enabled()


@kiln.disable
def refuses(x):
    raise Refused(torch.is_grad_enabled(), x.requires_grad)


def breaks_at_a_raising_call(x):
    with torch.no_grad():
        y = x * 2
        refuses(y)
        return y


def calls_breaker(x):
    return breaks_at_a_raising_call(x + 1) + 1


def test_the_instruction_run_at_the_break_raises_inside_the_blocks():
    # the call run by Python sees the blocks' mode; their exits restore it
    run_and_compare(calls_breaker, t(2).requires_grad_())
    assert torch.is_grad_enabled()


@pytest.mark.parametrize("fail", [False, True])
def test_an_exception_after_a_break_leaves_the_callees_blocks(fail, capsys):
    # (the raise: its resume functions run in Python, through the blocks' exits)
    run_and_compare(calls_raiser, t(2).requires_grad_(), fail, expected_graphs=1 if fail else 2)
    assert torch.is_grad_enabled()
    assert capsys.readouterr().out == "before\n" * 3


def reads_frame():
    print("break")
    return sys._getframe(1).f_code.co_name


def calls_frame_reader(x):
    return x + 1, reads_frame()


def warns_after_break(x):
    print("break")
    warnings.warn("careful", stacklevel=2)
    return x


def calls_warner(x):
    return warns_after_break(x + 1)


def test_callees_that_read_frames_see_the_callers_frame():
    run_and_compare(calls_frame_reader, t(2))
    with warnings.catch_warnings(record=True) as eager:
        warnings.simplefilter("always")
        calls_warner(t(2))
    kiln.reset()
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        kiln.compile(calls_warner)(t(2))
    assert [(w.lineno, w.filename) for w in got] == [(w.lineno, w.filename) for w in eager]


OTHER = {"__name__": "other_module", "kiln": kiln, "SCALE": 3.0}
exec(
    "def scaled(x):\n    y = x * SCALE\n    print('break')\n    return y + SCALE\n",
    OTHER,
)


def calls_other_module(x):
    return OTHER["scaled"](x - 1) * 2


def test_a_callee_of_another_module_resumes_with_its_globals():
    run_and_compare(calls_other_module, t(3), expected_graphs=2)


def branch_on_data(x):
    if x.sum() > 0:
        return x + 1
    return x - 1


def calls_branch(x):
    return branch_on_data(x * 2) * 3


@pytest.mark.parametrize("sign", [1, -1])
def test_a_data_dependent_branch_in_a_callee(sign):
    # x*2, sum, gt | the side taken: +-1, *3 (Note [Nested breaks: a branch on tensor data])
    run_and_compare(calls_branch, t(3) * sign, expected_graphs=2, expected_breaks=1)


def loop_on_data(x):
    while x.sum() < 100:
        x = x * 2
    return x


def calls_data_loop(x):
    return loop_on_data(x + 1) - 1


def test_a_loop_on_tensor_data_in_a_callee():
    kiln.reset()
    f = kiln.compile(calls_data_loop)
    for x in (t(3), t(3) * 5, t(3) * 100):
        torch.testing.assert_close(f(x), calls_data_loop(x))


def gen_inner(x):
    yield x + 1
    print("break")
    yield x + 2


def calls_generator(x):
    return [y * 2 for y in gen_inner(x)]


def test_a_break_in_a_generator_body():
    run_and_compare(calls_generator, t(2))


def store_local_break(x):
    y = x + 1
    print("break")
    return y


def method_user(x):
    class Box:
        def get(self, v):
            return store_local_break(v) * 2

    return Box().get(x) + 1


def test_a_method_of_a_class_made_in_the_frame():
    run_and_compare(method_user, t(2))


def deep(x, n):
    if n == 0:
        print("bottom")
        return x
    return deep(x + 1, n - 1) * 2


def test_recursion_breaks_at_the_bottom(capsys):
    run_and_compare(deep, t(2), 4)
    assert capsys.readouterr().out == "bottom\n" * 3


def break_then_try(x):
    y = x + 1
    print("a")
    try:
        print("b")
        y = y * 2
    except ValueError:
        pass
    return y + 1


def calls_break_then_try(x):
    return break_then_try(x * 2) * 3


def test_a_second_break_in_the_callee_that_cannot_nest(capsys):
    # the chain's trace meets a break inside a try block of the callee: its call of the
    # callee's resume function runs in Python, the rest of the root's is compiled
    run_and_compare(calls_break_then_try, t(2), expected_graphs=2)
    assert capsys.readouterr().out == "a\nb\n" * 3


class Base(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        h = self.lin(x)
        print("base")
        return h * 2


class Derived(Base):
    def forward(self, x):
        return super().forward(x + 1).relu() - 1


class Wrapper(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Derived()

    def forward(self, x):
        return self.inner(x).sum()


def test_a_method_calling_super_in_the_chain(capsys):
    # (Derived.forward closes over its class's __class__ cell: its resume function too)
    torch.manual_seed(0)
    run_and_compare(Wrapper(), torch.randn(2, 3), expected_graphs=2)
    assert capsys.readouterr().out == "base\n" * 3


def passes_through(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)

    return wrapper


class DecoratedLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    @passes_through
    def forward(self, x):
        x = self.lin(x)
        return x * int((x > 0).sum())


class DecoratedStack(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([DecoratedLayer() for _ in range(3)])

    @passes_through
    def forward(self, x):
        x = x + 1
        for layer in tuple(self.layers):
            x = layer(x)
        return x


def test_decorated_layers_in_a_loop_under_a_decorated_forward():
    # every chain goes through wrappers closing over cells of functions from outside; the
    # resume of the loop reaches the next layer's cells through the items the tuple's iterator
    # has left, which the replay advances: they are read before it (_pin_outside_cells)
    # (each layer's break recompiles the loop's resume function: the iterator has moved on)
    torch.manual_seed(0)
    kiln.reset()
    model, x = DecoratedStack(), torch.randn(2, 4)
    expected = model(x)
    expected_grads = torch.autograd.grad(expected.sum(), list(model.parameters()))
    compiled = kiln.compile(model)
    for _ in range(2):
        got = compiled(x)
        torch.testing.assert_close(got, expected)
        grads = torch.autograd.grad(got.sum(), list(model.parameters()))
        torch.testing.assert_close(grads, expected_grads)
    assert kiln.counters["stats"]["graph_breaks"] == 3, dict(kiln.counters)


def prints_with_keywords(x, *, sep):
    y = x * 2
    print("a", "b", sep=sep)
    return y


def star_called(*args, **kwargs):
    return prints_with_keywords(*args, **kwargs) + 1


def calls_with_star(x):
    parts = (x + 1,)
    return star_called(*parts, sep="-") * 3, star_called(x, sep="+")


def test_calls_with_keywords_and_star_arguments(capsys):
    run_and_compare(calls_with_star, t(2))
    assert capsys.readouterr().out == "a-b\na+b\n" * 3


def helper_breaks(x):
    y = x + 1
    print("break")
    return y * 2


def root_with_cells(x):
    scale = x.sum()

    def scaled(v):
        return v * scale

    y = helper_breaks(scaled(x))
    scale = scale + 1
    return scaled(y)


def test_a_root_with_cells_resumes_with_them(capsys):
    run_and_compare(root_with_cells, t(3), expected_graphs=2)
    assert capsys.readouterr().out == "break\n" * 3


def checked_call(*args):
    print("break")
    if not eval("args[1] is not None", None, None):  # (the running frame's locals)
        raise ValueError(args)
    return args[0] + 1


def calls_checked(x):
    return checked_call(x, 1) * 2, globals()["__name__"]


def test_eval_with_the_frames_own_mappings_sees_the_callees_locals():
    run_and_compare(calls_checked, t(2))


def callee_over_cells(a, h):
    b = h(a)
    print("break")
    return b * 2 + h(a)


def frame_with_cells(x):
    scale = x.sum()
    ys = [y * scale for y in (x, x + 1)]  # (3.11: a comprehension over the cell)

    def helper(v):
        nonlocal scale
        scale = scale + 1
        return v * scale

    z = callee_over_cells(ys[0], helper)
    return z + scale + helper(x)


def calls_frame_with_cells(x):
    return frame_with_cells(x + 1) - 1


def test_callees_with_cells_and_closures_writing_them(capsys):
    # the callee's cells are made by the transformed code and shared by the closure it rebuilds
    run_and_compare(calls_frame_with_cells, t(3), expected_graphs=2)
    assert capsys.readouterr().out == "break\n" * 3


def loops_over_opaque(x, items):
    for i, k in enumerate(items):
        x = x * k + i
    return x - 1


def calls_opaque_loop(x, items):
    return loops_over_opaque(x + 1, items) * 2


def test_a_loop_over_an_iterator_kiln_cannot_see_into_in_a_callee():
    # (a generator from outside: each FOR_ITER runs in Python, the body and the rest as chains)
    expected = calls_opaque_loop(t(3), (v for v in [1.0, 2.0, 3.0]))
    kiln.reset()
    f = kiln.compile(calls_opaque_loop)
    for _ in range(2):
        torch.testing.assert_close(f(t(3), (v for v in [1.0, 2.0, 3.0])), expected)
    empty = kiln.compile(calls_opaque_loop)(t(3), (v for v in []))
    torch.testing.assert_close(empty, calls_opaque_loop(t(3), (v for v in [])))


@torch.no_grad()
def decorated_no_grad(x):
    x = x + 1
    print("grad", torch.is_grad_enabled())
    return x * 3


def calls_decorated_no_grad(x):
    return decorated_no_grad(x * 2) + x


def test_a_break_under_torchs_grad_mode_decorator(capsys):
    # the chain goes through torch's decorate_context (its with block: Note [Nested breaks:
    # with blocks]); its resume function, in torch's module, is traced all the same
    run_and_compare(calls_decorated_no_grad, t(3).requires_grad_(), expected_graphs=2)
    assert capsys.readouterr().out == "grad False\n" * 3
