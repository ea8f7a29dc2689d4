"""`t.requires_grad_()` on a tensor computed in the frame: a leaf that leaves the frame is a graph
break whose reason says how to make the leaf instead (the eager run after the break gives eager's
tensors and gradients); one used only inside the frame is traced (test_frame_leaves.py)."""

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln

_REASON = r"requires_grad_\(\) on a tensor computed in the compiled frame(.|\n)*\.detach\(\)"


def returned(x):
    y = x * 2
    y.requires_grad_()
    return y


def derived(x):
    y = x.sin()
    y.requires_grad_()
    return y * 3


def grad_inside(x):
    y = x * 2
    y.requires_grad_()
    (g,) = torch.autograd.grad((y**2).sum(), y)
    return g + 1, y.is_leaf


@pytest.mark.parametrize("fn", [returned, derived])
def test_requires_grad_on_intermediate_breaks_with_the_way_out(fn):
    kiln.reset()
    with pytest.raises(kiln.exc.Unsupported, match=_REASON):
        kiln.compile(fn, fullgraph=True)(torch.randn(3))
    run_and_compare(fn, torch.randn(3), expected_breaks=1)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
def test_a_leaf_used_only_inside_the_frame_is_traced(backend):
    run_and_compare(grad_inside, torch.randn(3), backend=backend, fullgraph=True, expected_graphs=1)


def detached_in_place(x):
    y = x * 2
    y.detach_()
    with torch.no_grad():
        z = x + 1
    return y + 1, y.requires_grad, y.grad_fn is None, z.grad_fn is None


@pytest.mark.parametrize("requires_grad", [True, False])
def test_grad_fn_of_a_tensor_that_needs_no_grad_is_none(requires_grad):
    run_and_compare(
        detached_in_place,
        torch.randn(3, requires_grad=requires_grad),
        expected_graphs=1,
        fullgraph=True,
    )


def grad_fn_of_a_graph_result(x):
    return x * 2, (x * 2).grad_fn is None


def test_grad_fn_of_a_tensor_that_needs_grad_is_still_a_break():
    with pytest.raises(kiln.exc.Unsupported, match="grad_fn inside the compiled frame"):
        kiln.compile(grad_fn_of_a_graph_result, fullgraph=True)(torch.randn(3, requires_grad=True))
