"""Float inputs not specialised per value (Note [Shapes: unspecialised floats]).

The expected graph counts are torch.compile's for the same functions and calls (measured with
torch._dynamo.testing.CompileCounter on torch 2.13; Dynamo is not imported here because it
changes torch.optim process-wide, see the Makefile).
"""

import math

import torch

import kiln
from tests.frontend.frontend_helpers import CountingBackend, assert_same

X = torch.randn(4)


def _calls(fn, argsets, backend="counting"):
    """fn compiled, run on each argument set and compared with eager; the graphs compiled."""
    kiln.reset()
    counting = CountingBackend() if backend == "counting" else backend
    compiled = kiln.compile(fn, backend=counting)
    for args in argsets:
        assert_same(fn(*args), compiled(*args))
    return kiln.counters["stats"]["unique_graphs"], counting


def test_item_float_after_break_is_not_specialised():
    """Repro 16: torch.compile makes 3 graphs (before the break, the resume function for the
    first value, then for any value); kiln used to make one per value up to the cache limit."""

    def step(x):
        scale = x.mean().item()
        return x * scale + 1

    graphs, backend = _calls(step, [(torch.randn(8) + i,) for i in range(12)])
    assert graphs == 3
    last = backend.graphs[-1]
    assert any(n.meta.get("example_value").__class__ is float for n in last.graph.nodes)


def test_float_argument_becomes_an_input_after_a_change():
    def lr_step(x, lr):
        return x - lr * (x * 2)

    graphs, backend = _calls(lr_step, [(X, 0.1 * i) for i in range(1, 6)])
    assert graphs == 2  # torch.compile: 2
    placeholders = [n for n in backend.graphs[-1].graph.nodes if n.op == "placeholder"]
    assert len(placeholders) == 2


def test_python_arithmetic_on_the_float_is_traced():
    def fn(x, lr):
        return x * (lr * 2 + 1) / (1 - lr) + lr**2

    graphs, _ = _calls(fn, [(X, 0.1 * i) for i in range(1, 6)])
    assert graphs == 2  # torch.compile: 2


def test_returned_float_is_computed_again():
    def fn(x, s):
        return x + s, s * 2, s

    graphs, _ = _calls(fn, [(X, 0.5 * i) for i in range(1, 5)])
    assert graphs == 2  # torch.compile: 2


def test_branch_on_the_float_is_guarded_by_the_comparison():
    def fn(x, lr):
        return x + 1 if lr > 0.25 else x - 1

    graphs, _ = _calls(fn, [(X, 0.1 * i) for i in range(1, 6)])
    assert graphs == 3  # torch.compile: 3 (the constant, then one per answer)


def test_equality_branch_and_nan():
    def fn(x, y):
        if y == 5.0:
            return x + 2
        return x + y

    graphs, _ = _calls(fn, [(X, 3.0), (X, 4.0), (X, 5.0), (X, float("nan")), (X, 6.0)])
    assert graphs == 3  # 3.0 (a constant), then `y == 5.0` False, then True


def test_specialising_use_still_guards_the_value():
    def fn(x, s):
        return x + int(s)  # int() specialises: each value its own entry

    _calls(fn, [(X, 1.5), (X, 2.5), (X, 2.5), (X, 3.5)])


def test_nan_argument_does_not_recompile():
    def fn(x, n):
        return x * 2 + n

    graphs, _ = _calls(fn, [(X, float("nan"))] * 3)
    assert graphs == 1  # torch.compile: 1


def test_inf_and_nan_values_after_becoming_dynamic():
    def fn(x, s):
        return x * s

    _calls(fn, [(X, 1.5), (X, 2.5), (X, math.inf), (X, float("nan")), (X, -0.0)])


def test_float_used_for_a_shape_is_specialised():
    def fn(x, s):
        return torch.arange(s) + x.sum()

    graphs, _ = _calls(fn, [(X, 3.0), (X, 4.0), (X, 5.0)])
    assert graphs == 3  # the result's shape follows the value


def test_aliased_inputs_recompile_like_torch():
    def fn(a, b):
        return a + b

    graphs, _ = _calls(fn, [(X, X), (X, X.clone()), (X, X)])
    assert graphs == 2  # torch.compile: 2


def test_closed_over_int_changes():
    def make():
        n = 1

        def f(x):
            return x + n

        def set_n(v):
            nonlocal n
            n = v

        return f, set_n

    f, set_n = make()
    kiln.reset()
    compiled = kiln.compile(f, backend="eager")
    for v in range(2, 7):
        set_n(v)
        assert_same(f(X), compiled(X))
    assert kiln.counters["stats"]["unique_graphs"] == 2  # torch.compile: 2


def test_kiln_backend_runs_the_float_graph():
    def lr_step(x, lr):
        return x - lr * (x * 2)

    _calls(lr_step, [(X, 0.1 * i) for i in range(1, 4)], backend="kiln")
