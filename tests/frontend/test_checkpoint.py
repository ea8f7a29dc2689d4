"""torch.utils.checkpoint inside compiled code: traced as a plain call of the function
(Note [Checkpoint: traced as a plain call]); values, gradients and the RNG as in eager."""

import functools

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

import kiln


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x, scale=1.0):
        return self.drop(torch.tanh(self.lin(x))) * scale


class Net(nn.Module):
    def __init__(self, reentrant=False):
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.ckpt = functools.partial(checkpoint, use_reentrant=reentrant)

    def forward(self, x):
        x = x.requires_grad_(True) if x.requires_grad else x  # a no-op here
        for b in self.blocks:
            x = self.ckpt(functools.partial(b.forward, scale=2.0), x)
        return checkpoint(torch.sin, x, use_reentrant=False).sum()


def step(model, x, compiled):
    torch.manual_seed(1)
    run = kiln.compile(model, backend="eager") if compiled else model
    loss = run(x)
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return loss, grads, torch.rand(1)  # (the RNG after the step)


def test_checkpoint_traced_like_a_plain_call():
    torch.manual_seed(0)
    model, x = Net(), torch.randn(3, 4, requires_grad=True)
    expected = step(model, x, False)
    kiln.reset()
    got = step(model, x, True)
    torch.testing.assert_close(got, expected)
    assert kiln.counters["stats"]["graph_breaks"] == 0
    assert kiln.counters["stats"]["unique_graphs"] == 1


def test_reentrant_checkpoint_breaks_and_stays_right():
    torch.manual_seed(0)
    model, x = Net(reentrant=True), torch.randn(3, 4, requires_grad=True)
    expected = step(model, x, False)
    kiln.reset()
    got = step(model, x, True)
    torch.testing.assert_close(got, expected)
    assert kiln.counters["stats"]["graph_breaks"] >= 1
