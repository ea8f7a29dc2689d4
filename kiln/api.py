"""The public API: compile(), disable(), reset(), mark_dynamic()/mark_static(), graph_break().

The backend registry is `kiln.registry`, the compiled module and function wrappers are made by
`kiln.frontend.entry`; both are re-exported here.
"""

import functools
import sys
import types

import torch

from kiln import config, hooks, modes
from kiln.contracts import CompileSettings
from kiln.exc import KilnError
from kiln.frontend import backward_scope, frame_cache, frame_shapes, markers
from kiln.frontend.break_policy import error_on_graph_break
from kiln.frontend.entry import DisabledModule, OptimizedModule, compile_callable
from kiln.frontend.markers import (
    allow_in_graph,
    graph_break,
    kiln_marker,
    leaf_function,
    nonstrict_trace,
    skip_frame,
    step_unsupported,
)
from kiln.frontend.resume import clear_cache
from kiln.frontend.stance import set_stance
from kiln.frontend.substitutes import substitute_in_graph
from kiln.frontend.variables.builder import is_torch_callable
from kiln.logs import counters
from kiln.registry import (  # noqa: F401 (re-exported: kiln.api.lookup_backend ...)
    eager_backend,
    list_backends,
    lookup_backend,
    register_backend,
    resolve_with_options,
)

__all__ = [
    "OptimizedModule",
    "allow_in_graph",
    "compile",
    "disable",
    "disallow_in_graph",
    "error_on_graph_break",
    "graph_break",
    "leaf_function",
    "nonstrict_trace",
    "skip_frame",
    "step_unsupported",
    "list_backends",
    "list_mode_options",
    "lookup_backend",
    "mark_dynamic",
    "mark_static",
    "on_compile_end",
    "on_compile_start",
    "register_backend",
    "remove_compile_callbacks",
    "reset",
    "set_stance",
    "substitute_in_graph",
]


# --- compile ------------------------------------------------------------------------------------
def list_mode_options(mode=None):
    """The options a compile mode sets (every mode's when mode is None)."""
    return modes.list_mode_options(mode)


def compile(
    model=None,
    *,
    backend="kiln",
    fullgraph=False,
    dynamic=None,
    mode=None,
    options=None,
    disable=False,
):
    """Compile a function, method, lambda or nn.Module; usable as a decorator with or without args.

    `backend`: "eager" | "aot_eager" | "kiln" | a callable (gm, example_inputs) -> callable.
    `fullgraph=True` makes every graph break an error (kiln.exc.Unsupported).
    `dynamic`: None (sizes that change become symbolic), True (symbolic from the start), False.
    `disable=True` (or config.disable, KILN_DISABLE=1) gives `model` back uncompiled.
    """
    if disable or config.disable:
        return model if model is not None else (lambda m: m)
    if not isinstance(fullgraph, bool):
        raise TypeError(f"kiln.compile: fullgraph must be a bool, got {fullgraph!r}")
    if dynamic not in (None, True, False):
        raise TypeError(f"kiln.compile: dynamic must be None, True or False, got {dynamic!r}")
    options, frontend_options = modes.split_options(options)
    backend_fn, backend_name = resolve_with_options(backend, mode, options)
    settings = CompileSettings(
        backend_fn,
        backend_name,
        fullgraph,
        dynamic,
        mode,
        options,
        guard_filter_fn=frontend_options.get("guard_filter_fn"),
    )
    if model is None:
        return lambda m: compile_callable(m, settings)
    return compile_callable(model, settings)


compile._kiln_traced_as = "compile"  # called in traced code: the function traced in the frame


# --- compiled autograd, registered with the frontend ----------------------------------------------
def _compiled_autograd_scope(backend):
    """`kiln.compiled_autograd.maybe_enable(backend)` (Note [Frontend: the backward scope])."""
    from kiln.compiled_autograd import maybe_enable

    return maybe_enable(backend)


backward_scope.register_backward_scope(_compiled_autograd_scope)


# --- the rest of the public API -----------------------------------------------------------------
def reset():
    """Forget every compiled entry and compile callback, and clear kiln.counters (as a fresh
    process would start; torch._dynamo.reset does the same)."""
    frame_cache.reset_all()
    clear_cache()
    counters.clear()
    remove_compile_callbacks()
    ca = sys.modules.get("kiln.compiled_autograd")
    if ca is not None and hasattr(ca, "reset"):
        ca.reset()  # compiled backward graphs go too


def on_compile_start(callback):
    """Call `callback(kiln.contracts.CompileEvent)` when a frame starts compiling (a decorator;
    `kiln.remove_compile_callbacks` and `kiln.reset` forget it). A graph break makes more frames
    to compile: each resume function's compile calls it too."""
    return hooks.register("compile_start", callback)


def on_compile_end(callback):
    """Call `callback(kiln.contracts.CompileEvent)` when a frame's compile ends; `event.compiled`
    is False when it raised (under fullgraph=True, an error; else the frame runs eagerly)."""
    return hooks.register("compile_end", callback)


def remove_compile_callbacks():
    """Forget every on_compile_start and on_compile_end callback."""
    for event in ("compile_start", "compile_end"):
        hooks.clear(event)


def mark_dynamic(t, dim, *, min=None, max=None):  # noqa: A002 (torch's keyword names)
    """Trace dimension(s) `dim` of tensor `t` with a size symbol from the next compilation on;
    a compile that specialises it, or a size outside [min, max], raises ConstraintViolation."""
    frame_shapes.mark_dynamic(t, dim, min, max)


mark_dynamic._kiln_traced_as = "mark_dynamic"  # called in traced code: ForbiddenInTrace


def mark_static(t, dim=None):
    """Never make dimension(s) `dim` of tensor `t` symbolic (not even under dynamic=True; every
    dimension when dim is None). Given an nn.Module class or instance: the ints read from its
    attributes stay constants (each value compiles its own entry). Returns `t` (a decorator)."""
    if (isinstance(t, type) and issubclass(t, torch.nn.Module)) or isinstance(t, torch.nn.Module):
        if dim is not None:
            raise TypeError("kiln.mark_static: a module takes no dim")
        frame_shapes.mark_static_module(t)
    else:
        frame_shapes.mark_static(t, dim)
    return t


mark_static._kiln_traced_as = "mark_static"  # called in traced code: sizes made static there


def disable(fn=None, recursive=True):
    """Keep a function out of capture (decorator); traced code calling it breaks the graph.

    A module comes back as a module that runs in Python (kiln.compile leaves it alone); a module
    class is marked so, for all its instances. With recursive=False only the function's (or bound
    method's) own code runs in Python: called from compiled code, the user functions it calls are
    compiled frames; a module so given comes back as a function calling it, which runs in Python
    while the module's call is compiled."""
    if fn is None:
        return functools.partial(disable, recursive=recursive)
    if kiln_marker(fn, "_kiln_orig_fn"):
        fn = fn._kiln_orig_fn
    if isinstance(fn, OptimizedModule):
        fn = fn._orig_mod
    if not recursive and isinstance(fn, torch.nn.Module):
        module = fn

        def call_module(*args, **kwargs):
            return module(*args, **kwargs)

        call_module.__name__ = call_module.__qualname__ = type(module).__name__
        fn = call_module
    plain = isinstance(fn, types.FunctionType) or (
        isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType)
    )
    if not recursive and not plain:
        raise TypeError(
            f"kiln.disable(recursive=False) takes a Python function, method or module, got {fn!r}"
        )
    if isinstance(fn, torch.nn.Module):
        return fn if markers.is_disabled_module(fn) else DisabledModule(fn)
    if isinstance(fn, type) and issubclass(fn, torch.nn.Module):
        fn._kiln_disabled_module = True
        return fn

    @functools.wraps(fn)
    def kiln_disabled(*args, **kwargs):
        return fn(*args, **kwargs)

    markers.owns_markers(kiln_disabled)  # Note [Markers: copied by functools.wraps]
    kiln_disabled._kiln_disabled = True
    if not recursive:
        kiln_disabled._kiln_shallow = fn  # (FrameCache._callee: its callees compiled)
    return kiln_disabled


def disallow_in_graph(fn):
    """Undo allow_in_graph on a function, or keep a torch function kiln puts in graphs (torch.sub)
    out of them: traced code calling it breaks the graph and the call runs in Python."""
    if markers.forget_allowed(fn):
        return fn
    if not is_torch_callable(fn) or isinstance(fn, type):
        raise KilnError(
            f"kiln.disallow_in_graph is expected to be used on a torch function kiln puts in "
            f"graphs or on a function marked by allow_in_graph, got "
            f"{getattr(fn, '__qualname__', fn)!r}"
        )
    markers.disallow(fn)
    return fn
