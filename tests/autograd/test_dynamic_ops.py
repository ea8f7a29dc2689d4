"""Ops with symbolic shape rules compile once for every size (dynamic=True): no size pinned, no
recompile, results and gradients equal eager (issue #8's known gaps)."""

import pytest
import torch
import torch.nn.functional as F

import kiln
from kiln import logs


def _pool_ceil(x):
    return F.max_pool2d(x, 3, 2, 1, ceil_mode=True) + F.avg_pool2d(x, 3, 2, ceil_mode=True).mean()


def _embedding_bag(w, idx):
    n = idx.shape[0]
    offsets = torch.arange(0, n, 2)
    return F.embedding_bag(idx, w, offsets, mode="mean") * n


CASES = {
    "diag_embed": (lambda x: torch.diag_embed(x.sin()).sum(-1) * 2, lambda n: [torch.randn(3, n)]),
    "pool_ceil_mode": (_pool_ceil, lambda n: [torch.randn(2, 3, n, n + 3)]),
    "embedding_bag": (
        _embedding_bag,
        lambda n: [torch.randn(10, 4), torch.randint(0, 10, (2 * n,))],
    ),
    "safe_softmax": (  # T5's attention in training
        lambda x: torch.ops.aten._safe_softmax(x * 2, -1),
        lambda n: [torch.randn(2, n, n + 1)],
    ),
    "upsample_linear1d": (
        lambda x: torch.ops.aten.upsample_linear1d(x, [2 * x.shape[-1]], False),
        lambda n: [torch.randn(2, 3, n)],
    ),
}


@pytest.fixture(autouse=True)
def _reset():
    kiln.reset()
    logs.counters.clear()
    yield
    kiln.reset()


@pytest.mark.parametrize("name", sorted(CASES))
def test_one_graph_for_every_size_with_grads(name):
    fn, make = CASES[name]
    compiled = kiln.compile(fn, backend="aot_eager", dynamic=True)
    for n in [5, 8, 13, 6]:
        args = make(n)
        ref = [a.clone().requires_grad_(a.is_floating_point()) for a in args]
        test = [a.clone().requires_grad_(a.is_floating_point()) for a in args]
        out_ref, out = fn(*ref), compiled(*test)
        torch.testing.assert_close(out, out_ref)
        out_ref.square().sum().backward()
        out.square().sum().backward()
        for a, b in zip(ref, test):
            if a.requires_grad:
                torch.testing.assert_close(b.grad, a.grad)
    frames = dict(logs.counters["frames"])
    assert frames.get("total") == 1 and kiln.counters["stats"].get("recompiles", 0) == 0, frames
