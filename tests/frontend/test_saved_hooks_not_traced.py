"""The user's saved-tensor hooks run as often as in eager: not on the trace's meta examples."""

import pytest
import torch

import kiln


def _scale(a, b):
    return (a * b).sin()


def _count_hooks(fn, a, b):
    seen = {"pack": 0, "unpack": 0}

    def pack(t):
        seen["pack"] += 1
        return t

    def unpack(t):
        seen["unpack"] += 1
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        out = fn(a, b)
        packed_by_forward = seen["pack"]
        out.sum().backward()
    return packed_by_forward, seen["unpack"]


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
def test_pack_hook_count_matches_eager(backend):
    b = torch.full((3,), 2.0)
    expected = _count_hooks(_scale, torch.ones(3, requires_grad=True), b)
    got = _count_hooks(kiln.compile(_scale, backend=backend), torch.ones(3, requires_grad=True), b)
    if backend == "eager":  # the graph's ops run as torch ops: exactly eager's saves
        assert got == expected
    else:  # a compiled backward saves what its partition needs, but never on the trace
        assert got[0] <= expected[0] and got[1] >= 1
