"""A wrapper tensor subclass made inside the graph (an allow_in_graph function's result) and
returned: the AOT backends refuse the graph (its trace would hand out the subclass over its
inner tracing tensors) and it runs as the frontend made it; values as in eager."""

import pytest
import torch
from torch.testing._internal.two_tensor import TwoTensor

import kiln


@kiln.allow_in_graph
def to_subclass(x):
    return TwoTensor(x.clone(), x * 2)


def make_and_view(x):
    return to_subclass(x.sin()).view(-1)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_subclass_output_made_in_the_graph(backend):
    x = torch.randn(2, 2)
    expected = make_and_view(x)
    kiln.reset()
    got = kiln.compile(make_and_view, backend=backend, fullgraph=True)(x)
    assert type(got) is TwoTensor
    for name in ("a", "b"):
        inner = getattr(got, name)
        assert type(inner) is torch.Tensor  # (no tracing tensor leaks out)
        torch.testing.assert_close(inner, getattr(expected, name))
    assert kiln.counters["stats"]["unique_graphs"] == 1
