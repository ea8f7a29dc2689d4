"""`torch.Size()` made in the frame, and a `torch.Size` default argument of a function reached
without a source (torch.distributions' `batch_shape=torch.Size()`): a size of constant ints."""

import torch

import kiln


class Base:
    def __init__(self, shape=torch.Size()):  # noqa: B008 (the pattern under test)
        self.shape = shape


class Sub(Base):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale


def test_empty_torch_size_in_the_frame():
    def f(x):
        s = torch.Size()
        return x.new_ones(s) + x.sum(), len(s), s == ()

    x = torch.randn(3)
    kiln.reset()
    got = kiln.compile(f, backend="eager", fullgraph=True)(x)
    torch.testing.assert_close(got, f(x))


def test_torch_size_default_reached_without_a_source():
    def f(x):
        obj = Sub(2.0)
        return x.new_zeros(obj.shape) + obj.scale * x.sum(), obj.shape + (2,)

    x = torch.randn(3)
    kiln.reset()
    got = kiln.compile(f, backend="eager", fullgraph=True)(x)
    expected = f(x)
    torch.testing.assert_close(got, expected)
    assert type(got[1]) is torch.Size
