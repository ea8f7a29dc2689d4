"""Loss functions compiled with their backward (the tail of every training step), kiln backend."""

import pytest
import torch
import torch.nn.functional as F

import kiln

LOSSES = {
    "cross_entropy": lambda x, t: F.cross_entropy(x, t),
    "cross_entropy_smooth": lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1),
    "cross_entropy_ignore": lambda x, t: F.cross_entropy(x, t, ignore_index=1),
    "nll_sum": lambda x, t: F.nll_loss(F.log_softmax(x, -1), t, reduction="sum"),
}


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_loss_and_grad_match_eager(name):
    kiln.reset()
    fn = LOSSES[name]
    x = torch.randn(6, 5, requires_grad=True)
    t = torch.tensor([0, 1, 4, 1, 2, 3])
    x2 = x.detach().clone().requires_grad_(True)
    got = kiln.compile(fn, backend="kiln")(x, t)
    ref = fn(x2, t)
    torch.testing.assert_close(got, ref)
    got.backward()
    ref.backward()
    torch.testing.assert_close(x.grad, x2.grad)
    assert kiln.counters["stats"]["backend_failures"] == 0
