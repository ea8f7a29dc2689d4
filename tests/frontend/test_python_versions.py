"""Constructs whose bytecode differs between Python 3.11, 3.12 and 3.13 (Note [Bytecode: version
differences]): each compiles the same way on every version, compared with eager."""

import pytest
import torch

import kiln
from tests.frontend.frontend_helpers import assert_same, run_and_compare


def t(*shape):
    return torch.randn(*shape)


def _no_impossible_breaks():
    """No break that could not be placed (those send the rest of the frame to eager)."""
    reasons = list(kiln.counters["graph_break"])
    assert not [r for r in reasons if "no graph break possible" in r], reasons


# --- loops: a break inside a for body resumes in the body and after the loop --------------------
def break_in_for_body(x, ws):
    x = x * 2
    for w in ws:
        print("step")
        x = x * w + 1
    return x - 1


def test_break_in_for_body_resumes_after_the_loop(capsys):
    """3.12: the loop's exit (after END_FOR) is a resume point like on 3.11 and 3.13."""
    run_and_compare(break_in_for_body, t(3), [t(3) for _ in range(3)], expected_graphs=3)
    _no_impossible_breaks()
    assert capsys.readouterr().out.count("step") == 9  # eager once, compiled twice


# --- yield from (SEND on every version, END_SEND on 3.12+) ---------------------------------------
def inner_gen(x):
    yield x + 1
    yield x * 2
    return x.sum()


def outer_gen(x):
    total = yield from inner_gen(x)
    yield x - total


def sum_yield_from(x):
    return sum(outer_gen(x))


def test_yield_from_in_one_graph():
    run_and_compare(sum_yield_from, t(3), expected_graphs=1, expected_breaks=0)


# --- closures: 3.13 MAKE_FUNCTION + SET_FUNCTION_ATTRIBUTE, LOAD_FAST of a cell ------------------
def lambda_closure(x):
    k = 3  # noqa: F841 (read by eval and vars)
    g = lambda y: y * k + x  # noqa: E731
    return g(x) + 1


def closure_with_defaults(x):
    scale = 2.0

    def g(y, shift=1.0, *, power=2):
        return (y * scale + shift) ** power

    return g(x), g(x, 0.5, power=3)


def recursive_local(x):
    def fact(k):  # its own cell is empty when the closure is built
        return 1 if k <= 1 else k * fact(k - 1)

    return x * fact(4)


def closure_defined_before_its_cell(x):
    def first(y):
        return second(y) + 1  # `second` is assigned after this closure is made

    def second(y):
        return y * 3

    return first(x)


def closure_over_argument_cell(x, n):
    def add(y):
        return y + n

    return add(x) * n


@pytest.mark.parametrize(
    "fn,args",
    [
        (lambda_closure, (t(3),)),
        (closure_with_defaults, (t(3),)),
        (recursive_local, (t(3),)),
        (closure_defined_before_its_cell, (t(3),)),
        (closure_over_argument_cell, (t(3), 2)),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_nested_function_closures(fn, args):
    run_and_compare(fn, *args, expected_graphs=1, expected_breaks=0)


# --- class bodies that build closures (the __class__ cell; a method over an outer local) --------
class Base:
    def scale(self, v):
        return v * 2


def local_class_zero_arg_super(x):
    class Child(Base):
        def scale(self, v):
            return super().scale(v) + 1

    return Child().scale(x)


def local_class_method_over_outer_local(x):
    k = 5

    class Holder:
        def get(self, v):
            return v * k

    return Holder().get(x)


@pytest.mark.parametrize(
    "fn",
    [local_class_zero_arg_super, local_class_method_over_outer_local],
    ids=lambda f: f.__name__,
)
def test_local_class_closure_cells(fn):
    run_and_compare(fn, t(3), expected_graphs=1, expected_breaks=0)


# --- a break while a call is pending inside `with torch.no_grad()` -------------------------------
def helper_prints(v):
    print("helper")
    return v + 1


def pending_call_in_no_grad(x):
    with torch.no_grad():
        out = torch.add(x * 2, helper_prints(x))  # the break is inside the call's arguments
    return out * 3


def pending_call_in_nested_with(x):
    with torch.no_grad():
        with torch.enable_grad():
            y = torch.mul(x + 1, helper_prints(x))
        z = y * 2
    return z, y.requires_grad, torch.is_grad_enabled()


@pytest.mark.parametrize(
    "fn", [pending_call_in_no_grad, pending_call_in_nested_with], ids=lambda f: f.__name__
)
def test_break_with_pending_call_in_with(fn, capsys):
    """3.13: the resume function is placed in the original code (its origin kept although
    encode() adds a NOP in front of the call); grad mode is the caller's afterwards."""
    assert torch.is_grad_enabled()
    run_and_compare(fn, t(3).requires_grad_())
    assert torch.is_grad_enabled()
    reasons = list(kiln.counters["graph_break"])
    assert not [r for r in reasons if "cleanup handler" in r or "UnboundLocalError" in r], reasons
    _no_impossible_breaks()


# --- an error raised in generated code never leaves grad mode changed ----------------------------
def lookup_in_no_grad(w, idx):
    with torch.no_grad():
        y = torch.nn.functional.embedding(idx, w) * 2
    return y + 1


def lookup_after_break_in_no_grad(w, idx):
    with torch.no_grad():
        print("inside")
        y = torch.nn.functional.embedding(idx, w) * 2
    return y + 1


def lookup_in_enable_grad(w, idx):
    with torch.enable_grad():
        y = torch.nn.functional.embedding(idx, w) * 2
    return y + 1


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
@pytest.mark.parametrize(
    "fn,grad_mode",
    [
        (lookup_in_no_grad, True),
        (lookup_after_break_in_no_grad, True),
        (lookup_in_enable_grad, False),
    ],
    ids=["no_grad", "no_grad_after_break", "enable_grad_under_no_grad"],
)
def test_error_in_generated_code_restores_grad_mode(fn, grad_mode, backend, capsys):
    """An op that raises at run time inside a traced `with` block (an index out of range):
    the same exception as eager, and grad mode as eager leaves it (the block's __exit__)."""
    w = t(4, 3).requires_grad_()
    good, bad = torch.tensor([0, 1]), torch.tensor([0, 9])
    kiln.reset()
    compiled = kiln.compile(fn, backend=backend)
    with torch.set_grad_enabled(grad_mode):
        assert compiled(w, good).requires_grad == fn(w, good).requires_grad
        with pytest.raises(IndexError) as eager_error:
            fn(w, bad)
        assert torch.is_grad_enabled() is grad_mode
        with pytest.raises(IndexError) as compiled_error:
            compiled(w, bad)
        if backend != "kiln":  # (kiln's kernels word their bounds check themselves)
            assert str(compiled_error.value) == str(eager_error.value)
        assert torch.is_grad_enabled() is grad_mode
    assert torch.is_grad_enabled()


# --- comprehensions: inlined into the frame on 3.12+ (PEP 709) ------------------------------------
def noisy_double(v):
    print("item")
    return v * 2


def list_comp_break_in_body(x):
    return [noisy_double(x + i) for i in range(3)]


def dict_comp_break_in_body(x):
    return {i: noisy_double(x + i) for i in range(3)}


def set_comp_break_in_body(x):
    return {noisy_double(i) for i in range(3)}, x + 1


def display_break_between_items(x, xs):
    return [*xs, noisy_double(x), *xs], {**{"a": x}, "b": noisy_double(x), **{"c": 1}}


@pytest.mark.parametrize(
    "fn,args",
    [
        (list_comp_break_in_body, (t(3),)),
        (dict_comp_break_in_body, (t(3),)),
        (set_comp_break_in_body, (t(3),)),
        (display_break_between_items, (t(3), [1, 2])),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_comprehension_with_break_in_body(fn, args, capsys):
    """3.12+: after a break in the body the list/dict/set being built is an argument of the resume
    function; the items added after the break are kept (they were lost: `[]` on 3.12). (The
    resume functions are specialised on the loop variable: recompiles are allowed here.)"""
    kiln.reset()
    compiled = kiln.compile(fn, backend="eager")
    expected = fn(*args)
    for _ in range(2):
        assert_same(expected, compiled(*args))


def comp_over_opaque_iterator(x, it):
    print("before")
    return [v * 2 for v in it], x + 1


def numbers(n):
    yield from range(n)


def test_comprehension_over_an_iterator_kiln_does_not_model(capsys):
    """Each step of a real generator is a graph break inside the inlined comprehension (3.12+):
    the items already appended survive every resume function."""
    kiln.reset()
    expected = comp_over_opaque_iterator(torch.ones(2), numbers(4))
    got = kiln.compile(comp_over_opaque_iterator, backend="eager")(torch.ones(2), numbers(4))
    assert got[0] == expected[0] == [0, 2, 4, 6]
    torch.testing.assert_close(got[1], expected[1])


# --- calls that read the running frame's locals are no place for a break -------------------------
def locals_in_match(w):
    match w:
        case x:
            out = locals()
            del out["w"]
            return out, x


def locals_after_tensor_work(x):
    y = x + 1
    names = sorted(locals())
    return y * 2, names


def eval_reads_locals(x):
    k = 3  # noqa: F841 (read by eval and vars)
    return eval("x * k"), vars()["k"], dir()


@pytest.mark.parametrize(
    "fn,args,runs_eagerly",
    [
        (locals_in_match, ((1, 2),), False),  # locals() answered from the traced locals
        (locals_after_tensor_work, (t(3),), False),
        (eval_reads_locals, (t(3),), True),  # eval/dir read the running frame itself
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_frame_reading_builtins_see_every_local(fn, args, runs_eagerly):
    """locals()/vars() are answered while tracing; dir() and eval/exec without a locals mapping
    read the running frame, whose locals the transformed code keeps elsewhere, so that frame runs
    eagerly (locals() gave {} after a break before either fix)."""
    run_and_compare(fn, *args)
    reasons = list(kiln.counters["graph_break"])
    if runs_eagerly:
        assert reasons and all("reads the frame's local variables" in r for r in reasons), reasons
    else:
        assert not reasons, reasons
