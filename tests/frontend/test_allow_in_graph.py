"""kiln.allow_in_graph: a marked function or autograd.Function is one opaque call in the graph
(Note [allow_in_graph: one opaque call]); outputs and gradients equal eager's."""

import pytest
import torch

import kiln


class Counting:
    """A backend that counts graphs and the calls of `target` in them."""

    def __init__(self, target=None):
        self.graphs, self.calls, self.target = 0, 0, target

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        self.calls += sum(
            n.op == "call_function" and n.target is self.target for n in gm.graph.nodes
        )
        return gm.forward


@kiln.allow_in_graph
class BreaksInside(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        kiln.graph_break()  # not traced at all: no break
        ctx.n = x.size(0)
        ctx.k = k
        return x * k + 1

    @staticmethod
    def backward(ctx, g):
        return g * ctx.k * ctx.n, None


@kiln.allow_in_graph
def scaled(x, y, alpha=2.0):
    kiln.graph_break()
    return x * alpha + y.sin(), y.shape[0]


@kiln.allow_in_graph
def in_place(x):
    return x.mul_(2)


def _leaf(t):
    return t.detach().clone().requires_grad_(True)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_allowed_function_class_is_one_call_in_one_graph(backend):
    def fn(x):
        return BreaksInside.apply(x.cos(), 3.0).sum()

    x = torch.randn(4, 2)
    x_ref, x_test = _leaf(x), _leaf(x)
    ref = fn(x_ref)
    ref.backward()
    res = kiln.compile(fn, backend=backend, fullgraph=True)(x_test)
    res.backward()
    torch.testing.assert_close(res, ref)
    torch.testing.assert_close(x_test.grad, x_ref.grad)


def test_allowed_function_class_node_and_no_grad():
    counter = Counting()

    def fn(x):
        return BreaksInside.apply(x, 0.5) * 2

    x = torch.randn(3)
    res = kiln.compile(fn, backend=counter, fullgraph=True)(x)
    torch.testing.assert_close(res, fn(x))
    assert counter.graphs == 1
    assert not res.requires_grad


def test_allowed_function_is_one_node():
    counter = Counting(scaled)

    def fn(x, y):
        out, n = scaled(x, y + 1, alpha=0.5)
        return out * n

    x, y = torch.randn(3), torch.randn(3)
    res = kiln.compile(fn, backend=counter, fullgraph=True)(x, y)
    torch.testing.assert_close(res, fn(x, y))
    assert (counter.graphs, counter.calls) == (1, 1)


def test_allowed_function_that_returns_its_input_breaks_and_matches_eager():
    def fn(x):
        y = in_place(x)
        return y is x, x + 1

    x = torch.randn(3)
    ref = fn(x.clone())
    with pytest.raises(kiln.exc.Unsupported, match="returned an argument itself"):
        kiln.compile(fn, backend="eager", fullgraph=True)(x.clone())
    res = kiln.compile(fn, backend="eager")(x.clone())
    assert res[0] is ref[0] is True
    torch.testing.assert_close(res[1], ref[1])


def test_allowed_function_without_tensor_arguments_is_traced():
    seen = []

    @kiln.allow_in_graph
    def note(v):
        seen.append(v)
        return v + 1

    def fn(x):
        return x * note(2)

    x = torch.randn(3)
    res = kiln.compile(fn, backend="eager")(x)
    torch.testing.assert_close(res, x * 3)
    assert seen == [2]


def _adds_and_subtracts(x):
    y = torch.add(x, 2)
    y = torch.sub(y, 1) * 3
    return torch.add(y, 1)


def test_disallow_in_graph_breaks_on_a_torch_function_until_allowed_again():
    be = Counting(torch.sub)
    kiln.disallow_in_graph(torch.sub)
    try:
        x = torch.randn(6)
        out = kiln.compile(_adds_and_subtracts, backend=be)(x)
        torch.testing.assert_close(out, _adds_and_subtracts(x))
        assert (be.graphs, be.calls) == (2, 0)  # one graph each side of the call run in Python
    finally:
        kiln.allow_in_graph(torch.sub)
    kiln.reset()
    be = Counting(torch.sub)
    torch.testing.assert_close(
        kiln.compile(_adds_and_subtracts, backend=be)(x), _adds_and_subtracts(x)
    )
    assert (be.graphs, be.calls) == (1, 1)


def _plus_one(x):
    return x + 1


def test_disallow_in_graph_undoes_allow_in_graph_and_refuses_user_functions():
    kiln.allow_in_graph(_plus_one)
    kiln.disallow_in_graph(_plus_one)

    def f(x):
        return _plus_one(x.cos()) * 2

    be = Counting(_plus_one)
    x = torch.randn(3)
    torch.testing.assert_close(kiln.compile(f, backend=be)(x), f(x))
    assert (be.graphs, be.calls) == (1, 0)  # traced again (inlined), not an opaque call
    with pytest.raises(RuntimeError, match="disallow_in_graph"):
        kiln.disallow_in_graph(_plus_one)  # neither marked nor a torch function
