"""A tensor subclass input is a graph break, so its types and attributes are eager's
(Note [Tensors: subclass inputs are not traced])."""

import pytest
import torch
from torch.testing._internal.two_tensor import TwoTensor

import kiln
from kiln.exc import Unsupported


class Tagged(torch.Tensor):
    """A subclass with torch's default __torch_function__: results are Tagged too."""


def kinds(x):
    y = x.sin() + 1
    return type(x), type(y), isinstance(y, Tagged), y


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
def test_result_types_are_eager_ones(backend):
    x = torch.randn(3).as_subclass(Tagged)
    kiln.reset()
    got = kiln.compile(kinds, backend=backend)(x)
    want = kinds(x)
    assert got[:3] == want[:3] == (Tagged, Tagged, True)
    assert type(got[3]) is Tagged
    torch.testing.assert_close(got[3].as_subclass(torch.Tensor), want[3].as_subclass(torch.Tensor))


def test_wrapper_subclass_attributes_are_its_own():
    def inner(x):
        y = x * 2
        return type(y), y.a, y.b

    z = TwoTensor(torch.randn(3), torch.randn(3))
    kiln.reset()
    got, want = kiln.compile(inner, backend="eager")(z), inner(z)
    assert got[0] is want[0] is TwoTensor
    torch.testing.assert_close(got[1], want[1])
    torch.testing.assert_close(got[2], want[2])


def test_fullgraph_names_the_subclass():
    kiln.reset()
    with pytest.raises(Unsupported, match="tensor subclass input .Tagged."):
        kiln.compile(kinds, backend="eager", fullgraph=True)(torch.randn(3).as_subclass(Tagged))


def test_plain_tensors_and_parameters_still_one_graph():
    p = torch.nn.Parameter(torch.randn(3))

    def fn(x):
        return x * p

    kiln.reset()
    out = kiln.compile(fn, backend="eager", fullgraph=True)(torch.randn(3))
    assert type(out) is torch.Tensor
