"""kiln: a just-in-time compiler for PyTorch programs."""

import importlib

from kiln import config
from kiln.api import (
    OptimizedModule,
    compile,
    disable,
    graph_break,
    list_backends,
    list_mode_options,
    lookup_backend,
    mark_dynamic,
    mark_static,
    register_backend,
    reset,
)
from kiln.logs import counters
from kiln.tools.explain import explain

_LAZY_SUBMODULES = ("compiled_autograd", "bytecode", "frontend", "autograd", "backend", "tools")


def __getattr__(name):
    """`kiln.compiled_autograd.enable(...)` etc. without importing every stage with kiln."""
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f"kiln.{name}")
    raise AttributeError(f"module 'kiln' has no attribute {name!r}")


__all__ = [
    "OptimizedModule",
    "compile",
    "config",
    "counters",
    "disable",
    "explain",
    "graph_break",
    "list_backends",
    "list_mode_options",
    "lookup_backend",
    "mark_dynamic",
    "mark_static",
    "register_backend",
    "reset",
]
