"""Int inputs made dynamic are unspecialised int symbols (Note [Shapes: unspecialised ints]).

An int argument or closed-over int whose value changed (or any int argument under dynamic=True)
is traced as a symbol with the int's own range: 0, 1 and negative values are served by the same
graph, unlike size symbols (>= 2). Expected graph counts are torch.compile's for the same calls
(torch 2.13, CompileCounter; Dynamo is not imported here, see the Makefile).
"""

import pytest
import torch

import kiln
from tests.frontend.frontend_helpers import CountingBackend, assert_same

X = torch.randn(6, 4)
SWEEP = [0, 1, -1, 2, 5, 100]


def _run(fn, argsets, dynamic=None):
    """fn compiled, run on each argument set and compared with eager (errors included)."""
    kiln.reset()
    counting = CountingBackend()
    compiled = kiln.compile(fn, backend=counting, dynamic=dynamic)
    for args in argsets:
        try:
            expected = fn(*args)
        except Exception as e:  # noqa: BLE001 - eager's error is the oracle
            with pytest.raises(type(e)):
                compiled(*args)
            continue
        assert_same(expected, compiled(*args))
    return kiln.counters["stats"]["unique_graphs"], counting


def test_closed_over_int_compiles_twice():
    """torch's test_automatic_dynamic_on_closed_ints: 2 compiles for i in 0..9."""

    def f(i):
        def g(x):
            return x + i

        return g

    def h(x, g):
        return g(x)

    kiln.reset()
    counting = CountingBackend()
    compiled = kiln.compile(h, backend=counting)
    for i in range(10):
        assert_same(h(X, f(i)), compiled(X, f(i)))
    assert kiln.counters["stats"]["unique_graphs"] == 2


def test_int_argument_sweep_arithmetic():
    def fn(x, n):
        return x * n + (n * 3 - 1) + n // 2

    graphs, _ = _run(fn, [(X, n) for n in SWEEP])
    assert graphs == 2  # torch.compile: 2 (static, then one symbol for 0/1/-1/...)


def test_int_argument_sweep_branch():
    def fn(x, n):
        if n > 0:
            return x + n
        return x - n

    graphs, _ = _run(fn, [(X, n) for n in SWEEP])
    assert graphs == 3  # torch.compile: 3 (static; n > 0 symbolic; the n <= 0 branch)


SIZE_USES = {  # name: (function, torch.compile's graph count over SWEEP, kiln's)
    # (kiln asks fewer questions: a broadcast of one size with a number never asks `n == 1`)
    "zeros": (lambda x, n: torch.zeros(n) + 1, 3, 2),
    "slice_end": (lambda x, n: x[:n] * 2, 5, 4),
    "slice_start": (lambda x, n: x[n:] * 2, 5, 4),
    "new_ones": (lambda x, n: x.new_ones(n, 2).sum(0) + x.sum(), 2, 2),
    "range": (lambda x, n: sum(x[i] for i in range(n)) if n > 0 else x.sum(), 5, 5),
    "arange": (lambda x, n: torch.arange(n) * 2, 3, 2),
    "view": (lambda x, n: x.reshape(n, -1) * 2, 2, 1),
}


@pytest.mark.parametrize("name", list(SIZE_USES))
def test_int_argument_sweep_as_a_size(name):
    """A dynamic int used as a size: right for 0/1/negative values (a guard where needed)."""
    fn, torch_graphs, kiln_graphs = SIZE_USES[name]
    graphs, _ = _run(fn, [(X, n) for n in SWEEP])
    assert graphs == kiln_graphs <= torch_graphs


def test_user_backend_sees_a_symint_placeholder():
    def fn(x, n):
        return x * n

    graphs, backend = _run(fn, [(X, 0), (X, 1), (X, -4)])
    assert graphs == 2
    examples = backend.example_inputs[-1]
    assert examples[1] == 1 and type(examples[1]) is int
    placeholders = [n for n in backend.graphs[-1].graph.nodes if n.op == "placeholder"]
    assert isinstance(placeholders[1].meta["example_value"], torch.SymInt)


def test_dynamic_true_int_argument_is_unspecialised():
    def fn(x, n):
        return x + n * 2

    graphs, _ = _run(fn, [(X, n) for n in SWEEP], dynamic=True)
    assert graphs == 1  # torch.compile(dynamic=True): 1


@pytest.mark.parametrize("name", ["arith", "zeros", "new_ones", "view", "slice_end", "slice_start"])
def test_kiln_backend_narrows_int_symbols(name):
    """kiln's own AOT/codegen assumes symbols >= 2: an int symbol reaching it is guarded
    `n >= 2` or specialised (more graphs than torch's inductor, never a wrong result)."""
    fn = SIZE_USES[name][0] if name in SIZE_USES else lambda x, n: x * n + n // 4 - n % 3
    kiln.reset()
    compiled = kiln.compile(fn)
    for n in [*SWEEP, -3, 3]:
        try:
            expected = fn(X, n)
        except Exception as e:  # noqa: BLE001 - eager's error is the oracle
            with pytest.raises(type(e)):
                compiled(X, n)
            continue
        assert_same(expected, compiled(X, n))


def test_tensor_argument_that_becomes_an_int_is_dynamic_at_once():
    """torch's test_automatic_dynamic_tensor_scalar_change: 3 compiles with automatic dynamic."""

    def foo(x, y):
        return x * y

    calls = [(2, None), (3, 3), (4, None), (4, None), (5, 4), (5, 4), (6, None)]
    argsets = [(torch.randn(n), torch.randn(n) if y is None else y) for n, y in calls]
    graphs, _ = _run(foo, argsets)
    assert graphs == 3


def test_int_items_of_a_list_argument():
    def fn(x, sizes):
        a, b = sizes
        return x * a - b

    graphs, _ = _run(fn, [(X, [a, b]) for a, b in [(0, 1), (1, 0), (-2, 1), (7, -3), (1, 1)]])
    assert graphs == 2  # torch.compile: 2
