"""Tensor inputs that require grad and are no leaves (an activation an eager caller computed):
is_leaf as eager answers it, in-place ops on them traced with eager's gradients (Note [Tensors:
non-leaf inputs]), a leaf in the same place recompiles and raises as eager does."""

import pytest
import torch

import kiln


@pytest.fixture(autouse=True)
def _reset():
    kiln.reset()


def reads_leafness(x):
    return x.is_leaf, x * 2


def test_is_leaf_of_inputs_as_eager():
    compiled = kiln.compile(reads_leafness, backend="eager", fullgraph=True)
    w = torch.randn(3, requires_grad=True)
    for x in (w, w * 1, torch.randn(3), w * 2, w):
        assert compiled(x)[0] == x.is_leaf
    assert kiln.counters["stats"]["unique_graphs"] == 3  # leaf, non-leaf, no grad


def accumulates(buf, src, index):
    buf.index_add_(0, index, src)
    buf.mul_(2)
    return buf.sum() + buf[0].sum()


@pytest.mark.parametrize("backend", ["eager", "kiln"])
@pytest.mark.parametrize("dynamic", [False, True])
def test_in_place_ops_on_a_non_leaf_input_keep_eager_gradients(backend, dynamic):
    compiled = kiln.compile(accumulates, backend=backend, fullgraph=True, dynamic=dynamic)
    for n in (4, 5):
        w = torch.randn(n, 3, requires_grad=True)
        src = torch.randn(2, 3, requires_grad=True)
        index = torch.tensor([0, 2])
        grads = []
        for fn in (accumulates, compiled):
            buf = w * 3  # (a non-leaf that requires grad)
            out = fn(buf, src, index)
            grads.append((out.detach(), buf.detach(), *torch.autograd.grad(out, (w, src))))
        for e, g in zip(*grads, strict=True):
            torch.testing.assert_close(g, e)


def test_in_place_op_on_a_leaf_input_raises_as_eager():
    compiled = kiln.compile(accumulates)
    w = torch.randn(4, 3, requires_grad=True)
    src, index = torch.randn(2, 3), torch.tensor([0, 2])
    compiled(w * 1, src, index)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        accumulates(w, src, index)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        compiled(w, src, index)  # (the non-leaf's entry does not serve a leaf: guarded)
