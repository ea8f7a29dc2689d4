"""torch's map and scan operators: unrolled into one graph (Note [Control flow: map and scan
unrolled]), with eager's values and gradients; what torch refuses is a graph break, and eager's
error."""

import pytest
import torch
import torch._higher_order_ops as hops
from frontend_helpers import assert_same, run_and_compare

import kiln


def linear_relu(x, w):
    return (x @ w).relu()


def map_one(xs, w):
    return hops.map(linear_relu, xs, w)


def map_pairs(a, b, scale):
    return hops.map(lambda t, k: (t[0] * k + t[1], t[0] - t[1]), (a, b), scale)


def carry_and_output(c, x):
    return (c[0] + x, c[1] * x.cos()), (x.sin(), c[0] * 1.0)


def scan_tuple_carry(xs, init):
    return hops.scan(carry_and_output, init, xs)


def scan_dim1_reverse(xs, init):
    return hops.scan(lambda c, x: (c + x.sum(0), (c * 2, x.exp())), init, xs, dim=1, reverse=True)


@pytest.mark.parametrize(
    "fn, args",
    [
        (map_one, (torch.randn(5, 2, 3), torch.randn(3, 3))),
        (map_pairs, (torch.randn(4, 3), torch.randn(4, 3), 2)),
        (scan_tuple_carry, (torch.randn(4, 3), (torch.zeros(3), torch.ones(3)))),
        (scan_dim1_reverse, (torch.randn(2, 4, 3), torch.zeros(3))),
    ],
)
def test_one_graph_equal_to_eager(fn, args):
    run_and_compare(fn, *args, expected_graphs=1, expected_breaks=0)


def test_gradients_equal_eager():
    def loss(xs, w, init):
        c, ys = hops.scan(lambda c, x: (torch.tanh(c @ w + x), c.sum()), init, xs)
        return c.sum() + ys.sum() + map_one(xs, w).sum()

    xs, w, init = torch.randn(6, 3), torch.randn(3, 3), torch.zeros(3)
    leaves = [t.clone().requires_grad_() for t in (xs, w, init)]
    eager_loss = loss(*leaves)
    eager_loss.backward()
    kiln.reset()
    mine = [t.clone().requires_grad_() for t in (xs, w, init)]
    got = kiln.compile(loss, backend="aot_eager")(*mine)
    got.backward()
    assert_same(eager_loss.detach(), got.detach())
    for a, b in zip(leaves, mine):
        torch.testing.assert_close(b.grad, a.grad)
    assert kiln.counters["stats"]["graph_breaks"] == 0


def returns_its_input(xs):
    return hops.map(lambda x: x, xs)


def appends(xs, log):
    return hops.map(lambda x: log.append(1) or x.sin(), xs)


def same_tensor_twice(xs):
    return hops.map(lambda t: t[0] + t[1], (xs, xs))


@pytest.mark.parametrize(
    "fn, args",
    [
        (returns_its_input, (torch.randn(3, 2),)),  # an alias of an input: torch raises
        (appends, (torch.randn(3, 2), [])),  # a side effect
        (same_tensor_twice, (torch.randn(3, 2),)),  # inputs sharing memory: torch raises
    ],
)
def test_what_torch_refuses_is_a_break_and_eager_behaviour(fn, args):
    run_and_compare(fn, *args, expected_breaks=1)
    assert any("torch map" in r for r in kiln.counters["graph_break"]), dict(kiln.counters)


def test_scan_carry_changing_shape_breaks():
    def grows(xs, init):
        return hops.scan(lambda c, x: (torch.cat([c, x]), x), init, xs)

    run_and_compare(grows, torch.randn(3, 2), torch.zeros(2), expected_breaks=1)


def linear_recurrence(left, right):
    """(a, b) pairs composing h -> a*h + b: associative, as a selective-scan model's."""
    return left[0] * right[0], right[0] * left[1] + right[1]


@pytest.mark.parametrize("n, dim, reverse", [(7, 2, False), (8, 1, True), (1, 0, False)])
def test_associative_scan_generic_is_one_graph_equal_to_eager(n, dim, reverse):
    def fn(a, b):
        return hops.associative_scan(
            linear_recurrence, (a, b), dim=dim, reverse=reverse, combine_mode="generic"
        )

    shape = [2, 3, 4]
    shape[dim] = n
    a, b = torch.rand(*shape), torch.randn(*shape)
    run_and_compare(fn, a, b, expected_graphs=1, expected_breaks=0, fullgraph=True)


def test_associative_scan_gradients_equal_eager():
    def loss(a, b):
        return hops.associative_scan(torch.add, b * a, dim=0, combine_mode="generic").pow(2).sum()

    a, b = torch.rand(5, 3), torch.randn(5, 3)
    leaves = [t.clone().requires_grad_() for t in (a, b)]
    loss(*leaves).backward()
    mine = [t.clone().requires_grad_() for t in (a, b)]
    kiln.reset()
    kiln.compile(loss, backend="aot_eager", fullgraph=True)(*mine).backward()
    for ref, got in zip(leaves, mine):
        torch.testing.assert_close(got.grad, ref.grad)


def test_associative_scan_pointwise_on_cpu_raises_as_eager():
    def fn(x):  # eager refuses combine_mode="pointwise" for CPU tensors (a ValueError)
        return hops.associative_scan(torch.add, x, dim=0)

    run_and_compare(fn, torch.randn(4, 2), expected_breaks=1)
