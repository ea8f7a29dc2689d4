"""PyTorch features inside compiled code (issue item 4): data-reading calls and data-dependent
shapes break and run in Python; autograd.grad, random ops, created tensors stay in the graph."""

import torch
import torch.nn.functional as F
from frontend_helpers import run_and_compare

import kiln


def t(*shape):
    return torch.randn(*shape)


def tolist_loop(x):
    y = x * 2
    return [v + 1 for v in y.tolist()]


def test_tolist_breaks_and_python_uses_the_values():
    run_and_compare(tolist_loop, t(4), expected_graphs=1, expected_breaks=1)


def boolean_mask(x):
    y = x * 2
    return y[y > 0].sum() + 1


def test_boolean_mask_is_a_break_with_graphs_around_it():
    run_and_compare(boolean_mask, torch.tensor([1.0, -2.0, 3.0]), expected_breaks=1)
    assert kiln.counters["stats"]["unique_graphs"] == 2


def nonzero_indices(x):
    idx = torch.nonzero(x > 0)
    return idx * 2


def test_nonzero_runs_in_python():
    run_and_compare(nonzero_indices, torch.tensor([1.0, -2.0, 3.0]), expected_breaks=1)


def numpy_call(x):
    n = (x * 2).numpy()
    return torch.from_numpy(n.copy()) + 1


def test_numpy_is_traced():
    # (Note [NumPy: arrays as tensors]: .numpy(), ndarray.copy and from_numpy were 3 breaks)
    run_and_compare(numpy_call, t(3), expected_breaks=0, expected_graphs=1)


def grad_inside(x):
    y = (x.sin() * x).sum()
    (g,) = torch.autograd.grad(y, x, create_graph=True)
    return g * 2


def test_autograd_grad_inside_the_function():
    x = t(3).requires_grad_()
    run_and_compare(grad_inside, x, expected_graphs=1, expected_breaks=0)


def random_in_graph(x):
    noise = torch.rand(3)
    return F.dropout(x, p=0.5, training=True) + noise


def test_random_ops_advance_the_rng_as_eager():
    kiln.reset()
    f = kiln.compile(random_in_graph, backend="eager")
    x = t(3)
    torch.manual_seed(5)
    expected = [random_in_graph(x) for _ in range(2)]
    torch.manual_seed(5)
    got = [f(x) for _ in range(2)]
    for a, b in zip(expected, got):
        torch.testing.assert_close(a, b)
    assert kiln.counters["stats"]["unique_graphs"] == 1


def inference_mode_block(x):
    y = x * 2
    with torch.inference_mode():
        z = y + 1
    return z, z.is_inference()


def test_inference_mode_runs_in_python_after_the_graph():
    # BEFORE_WITH of an untraced manager: the graph before it, Python enters it, a graph of
    # the block (run inside it), Python leaves it
    run_and_compare(inference_mode_block, t(3), expected_graphs=2)


def requires_grad_input(x, w):
    return (x @ w).relu().sum(dim=0)


def test_requires_grad_inputs_give_equal_gradients():
    kiln.reset()
    f = kiln.compile(requires_grad_input, backend="eager")
    x, w = t(4, 3), t(3, 2).requires_grad_()
    w2 = w.detach().clone().requires_grad_()
    f(x, w).sum().backward()
    requires_grad_input(x, w2).sum().backward()
    torch.testing.assert_close(w.grad, w2.grad)


def raise_after_ops(x):
    y = x * 2
    if y.dim() == 1:
        raise ValueError(f"bad rank {y.dim()}")
    return y


def test_raise_inside_compiled_code_raises_the_same():
    run_and_compare(raise_after_ops, t(3))
