"""torch's parameter-free modules built inside compiled code (`CrossEntropyLoss()` in a forward):
built while tracing, their forward traced, rebuilt by the transformed code when they escape."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from frontend_helpers import run_and_compare

import kiln


def loss_in_forward(logits, target):
    loss_fct = nn.CrossEntropyLoss()
    return loss_fct(logits.view(-1, logits.size(-1)), target.view(-1))


def test_cross_entropy_built_in_forward_one_graph():
    logits = torch.randn(2, 3, 5, requires_grad=True)
    target = torch.randint(0, 5, (2, 3))
    run_and_compare(loss_in_forward, logits, target, expected_graphs=1, expected_breaks=0)


def loss_with_arguments(logits, target):
    loss = nn.CrossEntropyLoss(ignore_index=1, reduction="sum", label_smoothing=0.1)
    return loss(logits, target) + nn.MSELoss(reduction="none")(logits, logits * 2).sum()


def test_loss_with_constant_arguments():
    target = torch.tensor([0, 1, 2, 1])
    run_and_compare(
        loss_with_arguments, torch.randn(4, 3), target, expected_graphs=1, expected_breaks=0
    )


def activations(x):
    y = nn.GELU(approximate="tanh")(x)
    y = nn.Softmax(dim=-1)(y) + nn.Identity()(y)
    return nn.Flatten()(nn.MaxPool1d(2)(y))


def test_activations_pooling_identity_flatten():
    run_and_compare(activations, torch.randn(2, 3, 8), expected_graphs=1, expected_breaks=0)


def dropout_in_forward(x):
    return nn.Dropout(p=0.5)(x) * 2


def test_dropout_built_in_forward_advances_rng_like_eager():
    x = torch.randn(64)
    kiln.reset()
    compiled = kiln.compile(dropout_in_forward, backend="eager")
    torch.manual_seed(3)
    expected = dropout_in_forward(x)
    torch.manual_seed(3)
    got = compiled(x)
    torch.testing.assert_close(got, expected)
    assert kiln.counters["stats"]["graph_breaks"] == 0


def returns_module(x):
    act = nn.LeakyReLU(0.2)
    return act(x), act, act


def test_escaping_module_is_rebuilt_once_with_its_arguments():
    kiln.reset()
    compiled = kiln.compile(returns_module, backend="eager")
    x = torch.randn(5)
    y, m1, m2 = compiled(x)
    torch.testing.assert_close(y, F.leaky_relu(x, 0.2))
    assert type(m1) is nn.LeakyReLU and m1.negative_slope == 0.2 and m1 is m2
    assert kiln.counters["stats"]["graph_breaks"] == 0


def linear_in_forward(x):
    return nn.Linear(3, 3)(x)  # random weights: built in Python, never while tracing


def test_module_with_parameters_breaks_and_draws_rng_once():
    kiln.reset()
    compiled = kiln.compile(linear_in_forward, backend="eager")
    x = torch.randn(2, 3)
    torch.manual_seed(0)
    expected = linear_in_forward(x)
    torch.manual_seed(0)
    got = compiled(x)
    torch.testing.assert_close(got, expected)
    assert kiln.counters["stats"]["graph_breaks"] >= 1


def weighted_loss(logits, target, w):
    return nn.CrossEntropyLoss(weight=w)(logits, target)


def test_tensor_argument_breaks():
    run_and_compare(
        weighted_loss,
        torch.randn(4, 3),
        torch.tensor([0, 1, 2, 1]),
        torch.rand(3),
        expected_breaks=1,
    )


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x, labels):
        logits = self.lin(x)
        loss = nn.CrossEntropyLoss()(logits, labels)
        return loss, logits


def test_loss_in_module_forward_training_grads():
    torch.manual_seed(0)
    head = Head()
    x, labels = torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])
    loss, _ = head(x, labels)
    loss.backward()
    grads = [p.grad.clone() for p in head.parameters()]
    head.zero_grad()
    kiln.reset()
    got, _ = kiln.compile(head, backend="eager")(x, labels)
    got.backward()
    torch.testing.assert_close(got, loss)
    for g, p in zip(grads, head.parameters()):
        torch.testing.assert_close(p.grad, g)
    assert kiln.counters["stats"]["graph_breaks"] == 0
    assert kiln.counters["stats"]["unique_graphs"] == 1


def live_across_a_break(x, t):
    loss_fct = nn.CrossEntropyLoss(reduction="sum")
    y = x * 2
    kiln.graph_break()  # loss_fct is rebuilt for the resume function
    return loss_fct(y, t)


def test_module_live_across_a_break():
    run_and_compare(
        live_across_a_break,
        torch.randn(3, 4),
        torch.tensor([0, 1, 2]),
        expected_graphs=2,
        expected_breaks=1,
    )
