"""How the wrapper calls C++ kernels: kiln_fastcall.Kernel objects, else ctypes (Note [C++:
calling kernels])."""

import ctypes

import pytest
import torch

from kiln import config
from kiln.backend import codecache, fastcall
from kiln.backend.codegen.wrapper import rt
from tests.backend.helpers import check

aten = torch.ops.aten


def _fn(x, y):
    return (aten.add.Tensor(aten.sin.default(x), y), aten.sum.dim_IntList(x, [1]))


def test_kernels_are_called_through_kiln_fastcall():
    if fastcall.module() is None:
        pytest.skip("kiln_fastcall cannot be built here: kernels are called through ctypes")
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    c = check(_fn, [x, y])
    lib = codecache.load_library(codecache.compile_cpp(c.cpp_src))
    kernel = rt.bind(lib, "kernel0", 3)
    assert type(kernel).__name__ == "Kernel"
    with pytest.raises(TypeError):
        kernel(1, 2, key=3)
    with pytest.raises(TypeError):
        kernel("not an int")


def test_a_kernel_with_many_parameters_is_called_with_each_in_place():
    # 12 buffers: past the 6 argument registers, the rest on the stack
    xs = [torch.randn(5) * (i + 1) for i in range(11)]

    def f(*xs):
        total = xs[0]
        for i, x in enumerate(xs[1:]):
            total = aten.add.Tensor(total, aten.mul.Tensor(x, float(i + 2)))
        return (total,)

    check(f, xs, atol=1e-5, rtol=1e-5)


def test_without_fast_calls_kernels_run_through_ctypes(monkeypatch):
    monkeypatch.setattr(config, "fast_kernel_calls", False)
    x, y = torch.randn(8, 24), torch.randn(8, 24)
    c = check(_fn, [x, y])
    lib = codecache.load_library(codecache.compile_cpp(c.cpp_src))
    assert isinstance(rt.bind(lib, "kernel0", 3), ctypes._CFuncPtr)
