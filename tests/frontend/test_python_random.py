"""Python `random` / `np.random` calls in compiled frames: results and RNG state as in eager.

`random.random` / `random.uniform` are graph inputs drawn at run time before the graph (as in
torch.compile); other calls break the graph and run eagerly. Either way the draws and the
generator state after the call must match eager exactly; under fullgraph a call kiln does not
capture is refused with a reason, never guessed.
"""

import random

import numpy as np
import pytest
import torch

import kiln
from kiln.exc import Unsupported
from tests.frontend.frontend_helpers import assert_same


def _eager_and_compiled(fn, args, seed):
    """fn run eagerly and compiled from the same seed: both results and both RNG states."""
    kiln.reset()
    compiled = kiln.compile(fn)
    random.seed(seed)
    np.random.seed(seed)
    expected = fn(*args)
    expected_state = (random.getstate(), np.random.get_state()[1].tolist())
    random.seed(seed)
    np.random.seed(seed)
    got = compiled(*args)
    got_state = (random.getstate(), np.random.get_state()[1].tolist())
    return expected, got, expected_state, got_state


def assert_same_run(fn, args, seed):
    """fn compiled returns what eager returns and leaves both RNGs where eager leaves them."""
    expected, got, expected_state, got_state = _eager_and_compiled(fn, args, seed)
    assert_same(expected, got)
    assert expected_state == got_state


def test_random_int_scales_a_tensor():
    def fn(n):
        torch.manual_seed(7)
        return torch.rand(n, 2) * random.randint(3, 90)

    for seed in (0, 1, 2):
        assert_same_run(fn, (3,), seed)


def test_random_draws_around_a_graph_break():
    def fn(x):
        first = random.random()
        y = x * random.uniform(2.0, 5.0)
        y.sum().item()
        second = random.randrange(1, 40)
        return y + first, second

    x = torch.arange(6.0).reshape(2, 3)
    assert_same_run(fn, (x,), 11)


def test_random_sizes_for_a_factory():
    def fn(x):
        a = random.randrange(0, 4)
        b = random.randrange(0, 4)
        return x - 1, torch.zeros(a, b, 2)

    for seed in (3, 4, 5):
        assert_same_run(fn, (torch.ones(3),), seed)


def test_loop_until_random_values_differ():
    def fn(x):
        first = random.randrange(0, 3)
        other = first
        while other == first:
            other = random.randrange(0, 3)
        return x + other

    for seed in (1, 10, 23):
        assert_same_run(fn, (torch.ones(2),), seed)


def test_numpy_random_before_a_tensor():
    def fn(x):
        noise = np.random.uniform(-1.0, 1.0, size=(3,))
        return x + torch.from_numpy(noise)

    assert_same_run(fn, (torch.zeros(3, dtype=torch.float64),), 5)


def test_each_call_draws_again():
    def fn(x):
        return (x + 1) * random.uniform(0.0, 1.0)

    kiln.reset()
    compiled = kiln.compile(fn)
    random.seed(2)
    expected = [fn(torch.ones(2)) for _ in range(4)]
    random.seed(2)
    got = [compiled(torch.ones(2)) for _ in range(4)]
    for e, g in zip(expected, got):
        assert_same(e, g)
    assert not torch.equal(got[0], got[1])


def test_fullgraph_refuses_random_ints():
    def fn(x):
        return x * random.randint(1, 9)

    kiln.reset()
    state = random.getstate()
    with pytest.raises(Unsupported):
        kiln.compile(fn, fullgraph=True)(torch.ones(2))
    random.setstate(state)


def _counting():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    return graphs, backend


def test_float_draws_stay_in_one_graph():
    def fn(x):
        y = (x + 1) * random.uniform(0.5, 2.0)
        return y - random.random(), random.uniform(1, b=3) * 2

    kiln.reset()
    graphs, backend = _counting()
    compiled = kiln.compile(fn, backend=backend, fullgraph=True)
    for seed in (0, 6):
        random.seed(seed)
        expected = [fn(torch.arange(3.0)) for _ in range(3)]
        state = random.getstate()
        random.seed(seed)
        got = [compiled(torch.arange(3.0)) for _ in range(3)]
        assert_same(expected, got)
        assert random.getstate() == state
    assert len(graphs) == 1
    assert not torch.equal(got[0][0], got[1][0])


def test_draw_read_as_a_constant_breaks():
    def fn(x):
        r = random.random()
        if r > 0.5:
            return x + 1, r
        return x - 1, int(r * 10)

    for seed in range(6):
        assert_same_run(fn, (torch.ones(2),), seed)


def _draw_then_break(x):
    y = x * random.random()
    kiln.graph_break()
    return y + random.random()


def test_draw_in_a_callee_that_breaks():
    def fn(x):
        return _draw_then_break(x) * 2

    for seed in (1, 2):
        assert_same_run(fn, (torch.ones(2),), seed)


def test_draws_in_a_loop_with_aot():
    def fn(x):
        total = x * 0
        for i in range(3):
            total = total + x * random.uniform(i, i + 1)
        return total, random.random() + 1

    kiln.reset()
    compiled = kiln.compile(fn, backend="aot_eager")
    for seed in (4, 9):
        random.seed(seed)
        expected = fn(torch.ones(2))
        state = random.getstate()
        random.seed(seed)
        assert_same(expected, compiled(torch.ones(2)))
        assert random.getstate() == state


def test_numpy_draws_stay_in_one_graph():
    def fn(x):
        a = np.random.uniform(low=-1, high=1, size=(4, 1))
        b = np.random.randn(4, 1)
        return x + torch.from_numpy(a + b), np.random.uniform(), torch.tensor([a, a])

    kiln.reset()
    graphs, backend = _counting()
    compiled = kiln.compile(fn, backend=backend, fullgraph=True)
    x = torch.ones(4, 1, dtype=torch.float64)
    for seed in (0, 8):
        np.random.seed(seed)
        expected = [fn(x) for _ in range(2)]
        state = np.random.get_state()[1].tolist()
        np.random.seed(seed)
        got = [compiled(x) for _ in range(2)]
        assert_same(expected, got)
        assert np.random.get_state()[1].tolist() == state
    assert len(graphs) == 1


def _maybe_shift(y):
    if random.random() < 0.5:  # a branch on a draw: a break inside this call
        return y + 1
    return y


def test_break_after_a_draw_inside_a_call():
    def fn(x):
        return _maybe_shift(x * 2) * 3

    kiln.reset()
    graphs, backend = _counting()
    compiled = kiln.compile(fn, backend=backend)
    for seed in range(4):
        random.seed(seed)
        expected = fn(torch.ones(2))
        state = random.getstate()
        random.seed(seed)
        assert_same(expected, compiled(torch.ones(2)))
        assert random.getstate() == state
    assert graphs  # the call runs in Python between graphs, not the whole frame
