"""A factory call with requires_grad=True inside a compiled frame makes the user's own leaf."""

import pytest
import torch

import kiln


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
def test_new_leaf_gets_its_gradient(backend):
    def make(x):
        w = torch.full((3,), 0.5, requires_grad=True)
        return w, (w * x).sum()

    x = torch.arange(3.0)
    w, loss = kiln.compile(make, backend=backend)(x)
    assert w.requires_grad and w.is_leaf
    loss.backward()
    torch.testing.assert_close(w.grad, x)


@pytest.mark.parametrize("backend", ["aot_eager", "kiln"])
def test_new_leaf_next_to_an_input_that_needs_grad(backend):
    def make(x):
        b = x.new_zeros(2, requires_grad=True)
        return b, (x.exp() + b).sum()

    x = torch.tensor([0.0, 1.0], requires_grad=True)
    b, loss = kiln.compile(make, backend=backend)(x)
    loss.backward()
    torch.testing.assert_close(b.grad, torch.ones(2))
    torch.testing.assert_close(x.grad, x.detach().exp())


def test_requires_grad_false_stays_in_the_graph():
    def make(x):
        return x + torch.tensor([1.0, 2.0], requires_grad=False)

    out = kiln.compile(make, fullgraph=True)(torch.ones(2))
    torch.testing.assert_close(out, torch.tensor([2.0, 3.0]))
