"""The public API: compile(), OptimizedModule, the backend registry, reset(), explain()."""

import importlib

from kiln import modes
from kiln.exc import KilnError

# --- backend registry ---------------------------------------------------------------------------
# A backend is a callable (gm: torch.fx.GraphModule, example_inputs: list) -> callable, called once
# per captured graph; the callable it returns runs the graph in the transformed code. Built-in
# backends are named here as "module:attribute" and imported on first use, so that importing kiln
# stays cheap and the stages do not import each other.
_BUILTIN_BACKENDS = {
    "eager": "kiln.api:eager_backend",
    "aot_eager": "kiln.autograd.aot:aot_eager",
    "kiln": "kiln.backend.compile:kiln_backend",
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
        fn = getattr(importlib.import_module(module), attr)
        _BACKENDS[backend] = fn
        return fn
    raise KilnError(f"unknown backend {backend!r}; known backends: {', '.join(list_backends())}")


def list_mode_options(mode=None):
    """The options a compile mode sets (every mode's when mode is None)."""
    return modes.list_mode_options(mode)


def list_backends():
    """Names of every registered and built-in backend."""
    return sorted(set(_BUILTIN_BACKENDS) | set(_BACKENDS))


# --- compile ------------------------------------------------------------------------------------
def _resolve_backend(backend, mode, options):
    """The backend callable and its name; bad arguments raise naming the cause."""
    modes.resolve(mode, options)  # an unknown mode or option raises, listing the valid ones
    if mode is not None and options is not None:
        raise KilnError("kiln.compile: pass either mode or options, not both")
    if not callable(backend) and not isinstance(backend, str):
        raise TypeError(f"kiln.compile: backend must be a name or a callable, got {backend!r}")
    name = backend if isinstance(backend, str) else getattr(backend, "__name__", repr(backend))
    try:
        fn = lookup_backend(backend)
    except ImportError as e:
        raise KilnError(f"backend {name!r} is not available: {type(e).__name__}: {e}") from e
    if (mode is not None or options) and hasattr(fn, "with_options"):
        fn = fn.with_options(mode=mode, options=options or {})
    elif mode not in (None, "default") or options:
        modes.say_once(("mode", name), "kiln: backend %r ignores mode and options", name)
    return fn, name


def compile(model=None, *, backend="kiln", fullgraph=False, dynamic=None, mode=None, options=None):
    """Compile a function, method, lambda or nn.Module; usable as a decorator with or without args.

    `backend`: "eager" | "aot_eager" | "kiln" | a callable (gm, example_inputs) -> callable.
    `fullgraph=True` makes every graph break an error (kiln.exc.Unsupported).
    `dynamic`: None (sizes that change become symbolic), True (symbolic from the start), False.
    """
    if not isinstance(fullgraph, bool):
        raise TypeError(f"kiln.compile: fullgraph must be a bool, got {fullgraph!r}")
    if dynamic not in (None, True, False):
        raise TypeError(f"kiln.compile: dynamic must be None, True or False, got {dynamic!r}")
    backend_fn, backend_name = _resolve_backend(backend, mode, options)
    settings = dict(
        backend_fn=backend_fn, backend_name=backend_name, fullgraph=fullgraph, dynamic=dynamic
    )
    if model is None:
        return lambda m: _compile(m, **settings)
    return _compile(model, **settings)


def _compile(model, *, backend_fn, backend_name, fullgraph, dynamic=None):
    import types

    import torch

    from kiln.frontend.cache import FrameCache, make_wrapper

    if isinstance(model, OptimizedModule):
        model = model._orig_mod
    if isinstance(model, torch.nn.Module):
        return OptimizedModule(model, backend_fn, backend_name, fullgraph, dynamic)
    if not callable(model):
        raise TypeError(
            f"kiln.compile expects a function or an nn.Module, got {type(model).__name__}"
        )
    if _marker(model, "_kiln_disabled"):
        return model
    if _marker(model, "_kiln_orig_fn"):
        model = model._kiln_orig_fn
    if isinstance(model, types.MethodType):
        inner = _compile(
            model.__func__,
            backend_fn=backend_fn,
            backend_name=backend_name,
            fullgraph=fullgraph,
            dynamic=dynamic,
        )
        return types.MethodType(inner, model.__self__)
    if not isinstance(model, types.FunctionType):
        call = vars(type(model)).get("__call__")
        if isinstance(call, types.FunctionType):
            inner = _compile(
                call,
                backend_fn=backend_fn,
                backend_name=backend_name,
                fullgraph=fullgraph,
                dynamic=dynamic,
            )
            return types.MethodType(inner, model)
        raise TypeError(
            f"kiln.compile cannot compile {model!r}: not a Python function, method or nn.Module"
        )
    cache = FrameCache(model, backend_fn, backend_name, fullgraph=fullgraph, dynamic=dynamic)
    return make_wrapper(cache)


def _make_optimized_module_class():
    import torch

    from kiln.frontend.cache import FrameCache, make_wrapper, module_eager

    class OptimizedModule(torch.nn.Module):
        """A compiled nn.Module: calls run the compiled forward; everything else is `_orig_mod`'s.

        It holds no state of its own: attribute reads, writes and deletes, state_dict(),
        parameters(), train()/eval() ... act on the original module, so `torch.save(m._orig_mod)`
        and optimizers built from `m.parameters()` see the same objects.
        """

        def __init__(self, mod, backend_fn, backend_name, fullgraph, dynamic=None):
            import types

            d = self.__dict__
            d["_orig_mod"] = mod
            d["_kiln_settings"] = (backend_fn, backend_name, fullgraph, dynamic)
            forward = mod.forward
            if isinstance(forward, types.MethodType) and forward.__self__ is mod:
                cache = FrameCache(
                    forward.__func__,
                    backend_fn,
                    backend_name,
                    fullgraph=fullgraph,
                    eager=module_eager,
                    module_root=True,
                    dynamic=dynamic,
                )
                d["_kiln_call"] = types.MethodType(make_wrapper(cache), mod)
            else:
                d["_kiln_call"] = _compile(
                    forward,
                    backend_fn=backend_fn,
                    backend_name=backend_name,
                    fullgraph=fullgraph,
                    dynamic=dynamic,
                )
                cache = (
                    d["_kiln_call"]._kiln_cache if hasattr(d["_kiln_call"], "_kiln_cache") else None
                )
            d["_kiln_cache"] = cache

        def __call__(self, *args, **kwargs):
            return self.__dict__["_kiln_call"](*args, **kwargs)

        def forward(self, *args, **kwargs):
            return self.__dict__["_kiln_call"](*args, **kwargs)

        def __getattr__(self, name):
            return getattr(self.__dict__["_orig_mod"], name)

        def __setattr__(self, name, value):
            setattr(self.__dict__["_orig_mod"], name, value)

        def __delattr__(self, name):
            delattr(self.__dict__["_orig_mod"], name)

        def __dir__(self):
            return dir(self.__dict__["_orig_mod"])

        def __repr__(self):
            return f"OptimizedModule({self.__dict__['_orig_mod']!r})"

        def __getstate__(self):
            raise TypeError("pickle OptimizedModule._orig_mod instead of the compiled wrapper")

        def __deepcopy__(self, memo):
            """A compiled copy of a deep copy of the original (same compile settings)."""
            import copy

            d = self.__dict__
            return OptimizedModule(copy.deepcopy(d["_orig_mod"], memo), *d["_kiln_settings"])

    OptimizedModule.__module__ = __name__
    OptimizedModule.__qualname__ = "OptimizedModule"
    return OptimizedModule


OptimizedModule = _make_optimized_module_class()


# --- the rest of the public API -----------------------------------------------------------------
def reset():
    """Forget every compiled entry and clear kiln.counters."""
    from kiln.frontend.cache import reset_all
    from kiln.frontend.resume import clear_cache
    from kiln.logs import counters

    reset_all()
    clear_cache()
    counters.clear()
    import sys

    ca = sys.modules.get("kiln.compiled_autograd")
    if ca is not None and hasattr(ca, "reset"):
        ca.reset()  # compiled backward graphs go too


def mark_dynamic(t, dim):
    """Trace dimension(s) `dim` of tensor `t` with a size symbol from the next compilation on."""
    from kiln.frontend import shapes

    shapes.mark_dynamic(t, dim)


def mark_static(t, dim):
    """Never make dimension(s) `dim` of tensor `t` symbolic (not even under dynamic=True)."""
    from kiln.frontend import shapes

    shapes.mark_static(t, dim)


def graph_break():
    """Inside compiled code: end the graph here. Outside: does nothing."""


def disable(fn=None):
    """Keep a function out of capture (decorator); traced code calling it breaks the graph."""
    import functools

    if fn is None:
        return disable
    if _marker(fn, "_kiln_orig_fn"):
        fn = fn._kiln_orig_fn
    if isinstance(fn, OptimizedModule):
        return fn._orig_mod

    @functools.wraps(fn)
    def kiln_disabled(*args, **kwargs):
        return fn(*args, **kwargs)

    kiln_disabled._kiln_disabled = True
    return kiln_disabled


def explain(fn, **compile_kwargs):
    """`kiln.explain(fn)(*args)`: graphs, ops, graph breaks (reasons, user lines) and guards."""
    from kiln.tools.explain import explain as _explain

    return _explain(fn, **compile_kwargs)


def _marker(obj, name):
    from kiln.frontend.cache import kiln_marker

    return kiln_marker(obj, name)
