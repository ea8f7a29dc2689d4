"""A break at a slice built from a value kiln cannot read while tracing (`x[t:]` with t a
tensor): the graph before it, Python builds the slice and indexes, the rest resumes (it was a
whole frame run in Python: no graph break possible at BUILD_SLICE)."""

import torch
from frontend_helpers import CountingBackend, assert_same

import kiln


def _compare(fn, *args):
    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(fn, backend=backend)
    for _ in range(2):
        eager_args = [a.clone() for a in args]
        comp_args = [a.clone() for a in args]
        assert_same(fn(*eager_args), compiled(*comp_args))
        assert_same(eager_args, comp_args, "args")
    return [str(n.target) for gm in backend.graphs for n in gm.graph.nodes]


def test_slice_start_from_tensor_data():
    # PyTorch's test_slicing_dynamic_shape
    def fn(y):
        x = torch.ones(8)
        idx = y[0]
        out = x[idx:]
        return (out + 3) * 5

    targets = _compare(fn, torch.ones(10, dtype=torch.long))
    assert any("ones" in t for t in targets) and any("mul" in t for t in targets)


def test_slice_with_step_from_tensor_data():
    def fn(x, y):
        z = x * 2
        out = z[y[0] : y[1] : y[2]]
        return out.sum() + 1

    targets = _compare(fn, torch.randn(10), torch.tensor([1, 9, 2]))
    assert any("mul" in t for t in targets)


def test_slice_store_from_tensor_data():
    def fn(x, y):
        z = x * 2
        z[y[0] :] = 0
        return z + 1

    targets = _compare(fn, torch.randn(6), torch.tensor([3]))
    assert any("mul" in t for t in targets)
