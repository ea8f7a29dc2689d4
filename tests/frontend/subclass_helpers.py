"""Small traceable wrapper tensor subclasses for kiln's own tests (not PyTorch's TwoTensor)."""

import torch
from torch.utils import _pytree as pytree


def _wrapper(cls, like, size=None, stride=None, requires_grad=False):
    return torch.Tensor._make_wrapper_subclass(
        cls,
        size if size is not None else like.size(),
        strides=stride if stride is not None else like.stride(),
        dtype=like.dtype,
        device=like.device,
        requires_grad=requires_grad,
    )


class Pair(torch.Tensor):
    """Two tensors of one layout; every op runs on both halves."""

    @staticmethod
    def __new__(cls, left, right, size=None, stride=None, requires_grad=False):
        return _wrapper(cls, left, size, stride, requires_grad)

    def __init__(self, left, right, size=None, stride=None, requires_grad=False):
        self.left = left
        self.right = right

    def __tensor_flatten__(self):
        return ["left", "right"], None

    @staticmethod
    def __tensor_unflatten__(inners, ctx, size, stride):
        return Pair(inners["left"], inners["right"], size, stride)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        halves = []
        for side in (lambda p: p.left, lambda p: p.right):
            a, k = pytree.tree_map_only(Pair, side, (args, kwargs))
            halves.append(func(*a, **k))
        if not isinstance(halves[0], torch.Tensor):
            return halves[0]
        return Pair(halves[0], halves[1])

    def __repr__(self):
        return f"Pair({self.left!r}, {self.right!r})"


class Scaled(torch.Tensor):
    """`data * scale`, the scale a Python float in the flatten ctx; results keep the first
    Scaled argument's scale."""

    @staticmethod
    def __new__(cls, data, scale, size=None, stride=None):
        return _wrapper(cls, data, size, stride)

    def __init__(self, data, scale, size=None, stride=None):
        self.data_ = data
        self.scale = scale

    def __tensor_flatten__(self):
        return ["data_"], {"scale": self.scale}

    @staticmethod
    def __tensor_unflatten__(inners, ctx, size, stride):
        return Scaled(inners["data_"], ctx["scale"], size, stride)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        scales = [a.scale for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, Scaled)]
        a, k = pytree.tree_map_only(Scaled, lambda s: s.data_ * s.scale, (args, kwargs))
        out = func(*a, **k)
        if not isinstance(out, torch.Tensor):
            return out
        return Scaled(out / scales[0], scales[0])

    def value(self):
        """The plain tensor this stands for."""
        return self.data_ * self.scale


def pair(n=4, dtype=torch.float32):
    return Pair(torch.randn(n, dtype=dtype), torch.randn(n, dtype=dtype))


def halves(p):
    """The inner tensors of a Pair, a Scaled's value, a plain tensor itself: for comparisons."""
    if isinstance(p, Pair):
        return (p.left, p.right)
    if isinstance(p, Scaled):
        return (p.value(),)
    return (p,)
