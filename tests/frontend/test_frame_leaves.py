"""Leaves made in the frame (`requires_grad_()` on a computed tensor) and `.backward()` traced
under config.trace_autograd_ops: gradients, `.grad` and metadata as eager gives them, one graph
(Note [Autograd: leaves made in the frame])."""

import pytest
import torch
import torch.nn.functional as F
from frontend_helpers import assert_same, run_and_compare

import kiln

BACKENDS = ["eager", "aot_eager", "kiln"]


@pytest.fixture(autouse=True)
def trace_backward(monkeypatch):
    monkeypatch.setattr(kiln.config, "trace_autograd_ops", True)


def grad_returned(x):
    y = x * 2
    y.requires_grad_()
    (y * 3).sum().backward()
    return y.grad


def grad_used_after(x):
    y = x * 2
    y.requires_grad_()
    (y**2).sum().backward()
    return y.grad * 2 + 1, y.requires_grad, y.is_leaf, y.grad_fn is None


def detached_output(x):
    y = x.sin().detach().requires_grad_()
    out = y * 3
    out.sum().backward()
    return y.grad, out.detach()


def metadata_in_branch(x):
    y = x * 2
    y.requires_grad_()
    if y.requires_grad and y.is_leaf:
        (y * 3).sum().backward()
        return y.grad
    return y


def two_backwards(x):
    y = x.cos().requires_grad_()
    (y * 2).sum().backward()
    first = y.grad
    (y * y).sum().backward()  # accumulated in place: `first` is the same tensor
    return first, y.grad, first is y.grad


def with_gradient(x):
    y = (x + 1).requires_grad_()
    out = y.exp()
    out.backward(torch.ones_like(out) * 0.5)
    return y.grad


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "fn",
    [
        grad_returned,
        grad_used_after,
        detached_output,
        metadata_in_branch,
        two_backwards,
        with_gradient,
    ],
)
def test_backward_into_a_frame_leaf(fn, backend):
    run_and_compare(fn, torch.randn(3, 4), backend=backend, fullgraph=True, expected_graphs=1)


saved = {}


def grad_stored_in_a_global(x):
    y = x * 2
    y.requires_grad_()
    (y**2).sum().backward()
    saved["grad"] = y.grad
    return y.grad.clone()


def test_grad_of_a_frame_leaf_stored_in_a_global():
    x = torch.randn(3)
    expected = grad_stored_in_a_global(x)
    expected_saved = saved.pop("grad")
    kiln.reset()
    got = kiln.compile(grad_stored_in_a_global, backend="aot_eager", fullgraph=True)(x)
    assert_same(expected, got)
    assert_same(expected_saved, saved.pop("grad"))


def chunked_loss(x, targets):
    h = x * 2 + 1
    leaf = h.detach().requires_grad_()
    total = torch.tensor(0.0)
    for start in range(0, leaf.shape[0], 2):
        logits = leaf[start : start + 2] @ torch.eye(leaf.shape[-1])
        loss = F.cross_entropy(logits, targets[start : start + 2])
        loss.backward()
        total = total + loss.detach()
    h.backward(leaf.grad)  # into x, an input leaf
    return x.grad, total


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("old_grad", [False, True])
def test_backward_into_an_input_leaf(backend, old_grad):
    x_eager = torch.randn(4, 8, requires_grad=True)
    targets = torch.randint(0, 8, (4,))
    x_compiled = x_eager.detach().clone().requires_grad_()
    if old_grad:
        x_eager.grad = torch.ones(4, 8)
        x_compiled.grad = torch.ones(4, 8)
    old = x_compiled.grad
    expected = chunked_loss(x_eager, targets)
    kiln.reset()
    got = kiln.compile(chunked_loss, backend=backend, fullgraph=True)(x_compiled, targets)
    assert_same(expected, got)
    assert_same(x_eager.grad, x_compiled.grad)
    assert (x_compiled.grad is old) == old_grad  # (an old grad is added to in place)
    assert kiln.counters["stats"]["unique_graphs"] == 1


def intermediate_grad(a):
    made = torch.ones(2, 2)
    b = a + made
    return made.grad, b.grad, b


def test_grad_of_a_tensor_made_in_the_frame_is_none():
    with pytest.warns(UserWarning):  # (eager warns on .grad of a non-leaf: b)
        run_and_compare(
            intermediate_grad,
            torch.ones(2, 2, requires_grad=True),
            fullgraph=True,
            expected_graphs=1,
        )


def leaf_returned(x):
    a = x.sin()
    b = a.cos()
    b.requires_grad_()
    return b


def test_a_leaf_that_leaves_the_frame_breaks_before_it():
    # traced again without frame leaves: the graph holds what comes before requires_grad_()
    with pytest.raises(kiln.exc.Unsupported, match=r"requires_grad_\(\)(.|\n)*\.detach\(\)"):
        kiln.compile(leaf_returned, fullgraph=True)(torch.randn(3))
    compiled = run_and_compare(leaf_returned, torch.randn(3), expected_breaks=1, expected_graphs=1)
    assert compiled(torch.randn(3)).is_leaf


def test_backward_breaks_without_trace_autograd_ops(monkeypatch):
    # the leaf is live at backward's break (a graph output): requires_grad_() breaks too
    monkeypatch.setattr(kiln.config, "trace_autograd_ops", False)
    run_and_compare(grad_returned, torch.randn(3), expected_breaks=2)


def backward_of_a_non_leaf_input(x):
    return (x * 2).sum().backward()


def test_backward_into_a_tensor_from_before_the_frame_breaks():
    w = torch.randn(3, requires_grad=True)
    with pytest.raises(kiln.exc.Unsupported, match="not a leaf"):
        kiln.reset()
        kiln.compile(backward_of_a_non_leaf_input, fullgraph=True)(w * 1)


weight = torch.randn(3, requires_grad=True)


def into_a_global_weight(x):
    y = x.detach().requires_grad_()
    (y * weight).sum().backward()
    return y.grad


@pytest.mark.parametrize("backend", BACKENDS)
def test_backward_reaches_a_global_leaf_too(backend):
    weight.grad = None
    expected = into_a_global_weight(torch.ones(3))
    expected_grad, weight.grad = weight.grad, None
    kiln.reset()
    got = kiln.compile(into_a_global_weight, backend=backend, fullgraph=True)(torch.ones(3))
    assert_same(expected, got)
    assert_same(expected_grad, weight.grad)
    weight.grad = None
