"""kiln: a just-in-time compiler for PyTorch programs."""

from kiln import config
from kiln.api import (
    OptimizedModule,
    compile,
    disable,
    explain,
    graph_break,
    list_backends,
    lookup_backend,
    register_backend,
    reset,
)
from kiln.logs import counters

__all__ = [
    "OptimizedModule",
    "compile",
    "config",
    "counters",
    "disable",
    "explain",
    "graph_break",
    "list_backends",
    "lookup_backend",
    "register_backend",
    "reset",
]
