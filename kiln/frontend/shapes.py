"""Sizes while tracing: one place that turns a tensor dimension into the value the frontend sees.

This issue specialises every size: `size_of` returns the concrete hint as a Python int, and the
TENSOR_MATCH guard on the tensor pins the whole shape and stride. The dynamic-shapes work replaces
`SymSize` with a sympy-backed symbol and makes `size_of` return it for dynamic dimensions.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class SymSize:
    """One size of one traced tensor: where it came from and its concrete value (hint)."""

    hint: int
    tensor_source: object = None
    dim: int = 0

    def specialize(self):
        """The concrete int; the tensor's TENSOR_MATCH guard already pins it."""
        return self.hint


def size_of(example, dim, source=None):
    """The traced value of `example.size(dim)` (an int while every size is static)."""
    return SymSize(int(example.shape[dim]), source, dim).specialize()


def sizes_of(example, source=None):
    """The traced value of `example.shape` as a tuple."""
    return tuple(size_of(example, d, source) for d in range(example.dim()))


def strides_of(example):
    """The traced value of `example.stride()` as a tuple."""
    return tuple(int(s) for s in example.stride())


def numel_of(example):
    """The traced value of `example.numel()`."""
    n = 1
    for s in sizes_of(example):
        n *= s
    return n
