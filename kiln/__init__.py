"""kiln: a just-in-time compiler for PyTorch programs."""

from kiln import config
from kiln.api import list_backends, lookup_backend, register_backend
from kiln.logs import counters

__all__ = ["config", "counters", "list_backends", "lookup_backend", "register_backend"]
