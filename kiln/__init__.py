"""kiln: a just-in-time compiler for PyTorch programs."""

import importlib

from kiln import api, config
from kiln.api import *  # noqa: F403  (the public API: api.__all__)
from kiln.logs import counters
from kiln.node_hooks import install as _install_node_hooks
from kiln.tools import hooks as _tool_hooks  # noqa: F401  (debug dir, minifier: kiln.hooks)
from kiln.tools.explain import explain

_install_node_hooks()  # Note [Compiled autograd: hooks on nodes]

_LAZY_SUBMODULES = (
    "compiled_autograd",
    "bytecode",
    "frontend",
    "autograd",
    "backend",
    "tools",
    "export",  # callable: kiln.export(model, args) (kiln/export/__init__.py)
)


def __getattr__(name):
    """`kiln.compiled_autograd.enable(...)` etc. without importing every stage with kiln."""
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f"kiln.{name}")
    if name in ("save", "load"):  # kiln.save(program, path) / kiln.load(path)
        return getattr(importlib.import_module("kiln.export.serialize"), name)
    raise AttributeError(f"module 'kiln' has no attribute {name!r}")


__all__ = [*api.__all__, "config", "counters", "explain", "export", "load", "save"]  # noqa: F405
