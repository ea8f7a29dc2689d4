"""The backend registry: backends by name, user-registered ones and the built-ins.

A backend is a callable (gm: torch.fx.GraphModule, example_inputs: list) -> callable, called once
per captured graph; the callable it returns runs the graph in the transformed code. Built-in
backends are named here as "module:attribute" and imported on first use, so that importing kiln
stays cheap and the stages do not import each other (docs/ARCHITECTURE.md, "Layers").
"""

import importlib

import torch

from kiln import modes
from kiln.exc import KilnError

_BUILTIN_BACKENDS = {
    "eager": "kiln.registry:eager_backend",
    "aot_eager": "kiln.autograd.aot:aot_eager",
    "kiln": "kiln.backend.compile_fx:kiln_backend",
}
_BACKENDS = {}


def eager_backend(gm, example_inputs):
    """Run the captured FX graph as it is (frontend only)."""
    return gm.forward


def register_backend(name=None, fn=None):
    """Register a backend under a name; usable as `@register_backend` or `@register_backend("x")`."""
    if callable(name) and fn is None:
        fn, name = name, name.__name__
    if fn is None:
        return lambda f: register_backend(name, f)
    if not isinstance(name, str) or not name:
        raise KilnError(f"register_backend: a backend name must be a non-empty str, got {name!r}")
    _BACKENDS[name] = fn
    return fn


def lookup_backend(backend):
    """Resolve a backend given by name or as a callable."""
    if callable(backend):
        return backend
    if backend in _BACKENDS:
        return _BACKENDS[backend]
    if backend in _BUILTIN_BACKENDS:
        module, attr = _BUILTIN_BACKENDS[backend].split(":")
        with torch._C.DisableTorchFunction():  # (its import-time torch calls: no user mode's)
            fn = getattr(importlib.import_module(module), attr)
        _BACKENDS[backend] = fn
        return fn
    raise KilnError(f"unknown backend {backend!r}; known backends: {', '.join(list_backends())}")


def list_backends():
    """Names of every registered and built-in backend."""
    return sorted(set(_BUILTIN_BACKENDS) | set(_BACKENDS))


def backend_name(backend):
    """The name a backend is reported by: its registry name, else the callable's __name__."""
    return backend if isinstance(backend, str) else getattr(backend, "__name__", repr(backend))


def resolve(backend):
    """(callable, name) of a backend given by name or callable; a backend that fails to import
    raises KilnError naming the cause."""
    name = backend_name(backend)
    try:
        fn = lookup_backend(backend)
    except ImportError as e:
        raise KilnError(f"backend {name!r} is not available: {type(e).__name__}: {e}") from e
    return fn, name


def resolve_with_options(backend, mode, options):
    """(callable, name) of a backend as kiln.compile(backend=, mode=, options=) gives them; bad
    arguments raise naming the cause."""
    modes.resolve(mode, options)  # an unknown mode or option raises, listing the valid ones
    if mode is not None and options is not None:
        raise KilnError("kiln.compile: pass either mode or options, not both")
    if not callable(backend) and not isinstance(backend, str):
        raise TypeError(f"kiln.compile: backend must be a name or a callable, got {backend!r}")
    fn, name = resolve(backend)
    if (mode is not None or options) and hasattr(fn, "with_options"):
        fn = fn.with_options(mode=mode, options=options or {})
    elif mode not in (None, "default") or options:
        modes.say_once(("mode", name), "kiln: backend %r ignores mode and options", name)
    return fn, name
