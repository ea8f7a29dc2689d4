"""How the wrapper calls C++ kernels: a Python entry point per kernel, else ctypes (Note [C++:
Python entry points])."""

import ctypes
import types

import pytest
import torch

from kiln import config
from kiln.backend import codecache
from kiln.backend.codegen.wrapper import rt
from tests.backend.helpers import check

aten = torch.ops.aten


def _fn(x, y):
    return (aten.add.Tensor(aten.sin.default(x), y), aten.sum.dim_IntList(x, [1]))


def test_kernels_are_called_through_their_python_entry():
    if not codecache.python_include():
        pytest.skip("no Python.h: kernels are called through ctypes")
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    c = check(_fn, [x, y])
    so = codecache.compile_cpp(c.cpp_src)
    lib = codecache.load_library(so)
    assert isinstance(lib.kiln_py, types.ModuleType)
    kernel = rt.bind(lib, "kernel0", 3)
    assert isinstance(kernel, types.BuiltinFunctionType)
    with pytest.raises(TypeError, match="takes"):
        kernel(1)


def test_without_the_python_entry_kernels_run_through_ctypes(monkeypatch):
    monkeypatch.setattr(config, "cpp_python_entry", False)
    x, y = torch.randn(8, 24), torch.randn(8, 24)
    c = check(_fn, [x, y])
    assert "KILN_PY_ENTRY" not in " ".join(codecache._flags())
    lib = codecache.load_library(codecache.compile_cpp(c.cpp_src))
    assert lib.kiln_py is None
    assert isinstance(rt.bind(lib, "kernel0", 3), ctypes._CFuncPtr)
