"""The engine that `.backward()` reaches under `kiln.compiled_autograd.enable(...)`: look up, capture,
compile, run — or hand the call to the eager engine with a logged reason.

Note [Compiled autograd: the interception point]
Every way into the C++ engine from Python (`Tensor.backward`, `torch.autograd.backward`,
`torch.autograd.grad`) ends in `torch.autograd.graph._engine_run_backward`, which calls
`Variable._execution_engine.run_backward(...)` (checked on torch 2.13). While a context is
active that attribute is a `_Engine`: one place catches all three; `queue_callback` and
`is_checkpoint_valid` go to the real engine except while a compiled graph runs, when callbacks
are queued here and run after it (as the engine runs them at the end of a backward).
"""

import contextlib
import re
import threading

import torch
import torch.autograd.variable

from kiln import config, logs
from kiln.compiled_autograd import hooks as H
from kiln.compiled_autograd.backward_cache import CacheNode, Entry, anti_unify, lookup
from kiln.compiled_autograd.capture import capture
from kiln.compiled_autograd.collect import collect
from kiln.compiled_autograd.split import (
    ChunkRunner,
    SplitRunner,
    count_calls,
    split_chunks,
    split_sinks,
)
from kiln.contracts import CompileSettings, GraphMeta
from kiln.exc import KilnError, Unsupported
from kiln.frontend.entry import compile_callable
from kiln.registry import resolve as resolve_backend
from kiln.symbolic.fake import ProxyTensor

__all__ = ["enable", "disable", "reset", "active", "maybe_enable"]

_Variable = torch.autograd.variable.Variable
_REAL = _Variable._execution_engine
_tls = threading.local()
_lock = threading.Lock()
_cache = CacheNode()
_depth = [0]  # enable() contexts open in any thread (the engine object is process-wide)


def _stack():
    """This thread's active compiler_fns, innermost last (other threads' backwards run eagerly)."""
    st = getattr(_tls, "stack", None)
    if st is None:
        st = _tls.stack = []
    return st


_SECOND_TIME = (
    "Trying to backward through the graph a second time (or directly access saved tensors after "
    "they have already been freed). Saved intermediate values of the graph are freed when you "
    "call .backward() or autograd.grad(). Specify retain_graph=True if you need to backward "
    "through the graph a second time or if you need to access saved tensors after calling "
    "backward."
)


class _Engine:
    """Stands in for the C++ engine object while compiled autograd is enabled."""

    def run_backward(
        self,
        tensors,
        grad_tensors,
        keep_graph,
        create_graph,
        inputs=(),
        allow_unreachable=True,
        accumulate_grad=True,
    ):
        args = (tensors, grad_tensors, keep_graph, create_graph, inputs, allow_unreachable)
        stack = _stack()
        if not stack or getattr(_tls, "running", False) or _traced(tensors):
            return _REAL.run_backward(*args, accumulate_grad)
        return _run(stack[-1], *args, accumulate_grad)

    def queue_callback(self, callback):
        pending = getattr(_tls, "callbacks", None)
        if pending is not None:
            pending.append(callback)
            return None
        return _REAL.queue_callback(callback)

    def is_checkpoint_valid(self):
        return _REAL.is_checkpoint_valid()


_ENGINE = _Engine()


def _traced(tensors):
    """Roots that are kiln's proxies: a trace differentiating (ahead-of-time autograd's joint
    graph), not a user's backward; it runs in the real engine, recorded by the trace."""
    return any(type(t) is ProxyTensor for t in tensors)


@contextlib.contextmanager
def enable(compiler_fn):
    """Run every backward inside through compiled autograd; `compiler_fn(gm) -> callable`.

    `compiler_fn` is e.g. `kiln.compile(backend="aot_eager", fullgraph=True)`; None runs the
    captured graph as it is.
    """
    H.install()
    stack = _stack()
    stack.append(compiler_fn)
    with _lock:
        _depth[0] += 1
        _Variable._execution_engine = _ENGINE
    try:
        yield
    finally:
        stack.pop()
        with _lock:
            _depth[0] -= 1
            if not _depth[0]:
                _Variable._execution_engine = _REAL


@contextlib.contextmanager
def disable():
    """Backward calls inside run in the eager engine even within `enable(...)`."""
    prev = getattr(_tls, "running", False)
    _tls.running = True
    try:
        yield
    finally:
        _tls.running = prev


def active():
    """Whether backward calls are routed through compiled autograd here."""
    return bool(_stack()) and not getattr(_tls, "running", False)


def maybe_enable(backend):
    """The context the frontend enters around a compiled frame: `enable` when
    `kiln.config.compiled_autograd` is on (the graph compiled with `backend`, fullgraph=True)."""
    if not config.compiled_autograd or _stack():
        return contextlib.nullcontext()
    return enable(_BackendCompiler(backend))


class _BackendCompiler:
    """compiler_fn for `config.compiled_autograd`: the graph compiled as by
    `kiln.compile(gm, backend=..., fullgraph=True)`."""

    def __init__(self, backend):
        self.backend = backend

    def __call__(self, gm):
        backend_fn, backend_name = resolve_backend(self.backend)
        return compile_callable(gm, CompileSettings(backend_fn, backend_name, fullgraph=True))


def reset():
    """Forget every compiled backward graph."""
    global _cache
    _cache = CacheNode()


# --- one backward call ---------------------------------------------------------------------------


def _fallback(reason, args, accumulate_grad):
    logs.log("compiled_autograd", "backward runs in the eager engine: %s", reason)
    logs.counters["compiled_autograd"]["fallbacks"] += 1
    return _REAL.run_backward(*args, accumulate_grad)


def _run(compiler_fn, tensors, grad_tensors, keep_graph, create_graph, inputs, allow_unreachable,
         accumulate_grad):  # fmt: skip
    args = (tensors, grad_tensors, keep_graph, create_graph, inputs, allow_unreachable)
    if create_graph:
        return _fallback("create_graph=True (a differentiable backward)", args, accumulate_grad)
    try:
        g = collect(tensors, grad_tensors, inputs, accumulate_grad)
    except Unsupported as e:
        return _fallback(str(e), args, accumulate_grad)
    except Exception as e:  # e.g. saved tensors already freed: the engine says it properly
        return _fallback(f"{type(e).__name__}: {e}", args, accumulate_grad)
    for k in g.consumed_check():
        raise RuntimeError(_SECOND_TIME + f" (node {g.names[k]})")
    leaf, dyn, entry = lookup(_cache, g)
    if entry is None:
        if leaf.failed is not None:  # this structure could not be captured before: eager is
            return _fallback(leaf.failed, args, accumulate_grad)  # always right, only slower
        try:
            entry = _compile(compiler_fn, g, leaf, dyn)
        except Unsupported as e:
            leaf.failed = f"{e} (cached: this graph's structure runs eagerly from now on)"
            return _fallback(str(e), args, accumulate_grad)
    flat = g.flat_sizes if entry.dyn else ()
    sizes = [flat[p] for p in entry.dyn]
    logs.counters["compiled_autograd"]["calls"] += 1
    out = _execute(entry, g, sizes)
    if not keep_graph:
        g.mark_consumed()
    if accumulate_grad:
        return ()
    return tuple(out)


def _execute(entry, g, sizes):
    prev_running = getattr(_tls, "running", False)
    prev_cbs = getattr(_tls, "callbacks", None)
    _tls.running = True
    _tls.callbacks = callbacks = []
    try:
        with torch.no_grad():
            out = entry.fn(g.inputs, sizes, [], g.hooks)
            # final callbacks (queued by hooks) run at the end, like the engine's
            while callbacks:
                callbacks.pop(0)()
    finally:
        _tls.running = prev_running
        _tls.callbacks = prev_cbs
    return out


def _compile(compiler_fn, g, leaf, dyn):
    try:
        gm = capture(g)
    except Unsupported:
        raise
    except Exception as e:  # the capture writes nothing real: the eager engine can run instead
        raise Unsupported(f"capture failed: {type(e).__name__}: {e}") from e
    logs.counters["compiled_autograd"]["captures"] += 1
    flat = g.flat_sizes
    generic, equal = None, ()
    if dyn and leaf.last is not None:
        res = anti_unify(leaf.last[0], leaf.last[1], gm, flat, dyn)
        if res is not None:
            generic, equal = res
        else:
            logs.log(
                "compiled_autograd_verbose",
                "no size-generic graph for this change; caching per exact sizes",
            )
    leaf.last = (gm, flat)
    final = generic if generic is not None else gm
    _log_graph(final)
    fn = _compile_fn(compiler_fn, final)
    if not dyn:
        entry = leaf.entry = Entry(fn, final, ())
    elif generic is not None:
        entry = leaf.entry = Entry(fn, final, dyn, equal)
    else:
        entry = leaf.static[tuple(flat)] = Entry(fn, final, dyn)
    return entry


def _compile_fn(compiler_fn, gm):
    logs.counters["compiled_autograd"]["compiles"] += 1
    if compiler_fn is None:
        return gm.forward
    parts = split_sinks(gm)  # Note [Compiled autograd: sinks]
    if parts is not None:
        prefix, suffix = parts
        logs.log(
            "compiled_autograd_verbose",
            "compiling the tensor work as one graph; %d Python calls run after it",
            count_calls(suffix),
        )
        return SplitRunner(_compile_whole(compiler_fn, prefix), suffix.forward)
    steps = split_chunks(gm)  # Note [Compiled autograd: chunks]
    if steps is not None:
        graphs = [s for s in steps if s[0] == "graph"]
        logs.log(
            "compiled_autograd_verbose",
            "Python calls feed tensor work: compiling %d graphs around %d calls",
            len(graphs),
            len(steps) - len(graphs),
        )
        logs.counters["compiled_autograd"]["chunked"] += 1
        steps = [
            (s[0], _compile_whole(compiler_fn, s[1]), s[2], s[3]) if s[0] == "graph" else s
            for s in steps
        ]
        return ChunkRunner(gm, steps)
    return _compile_whole(compiler_fn, gm)


def _compile_whole(compiler_fn, gm):
    # a size-generic graph (it reads `sizes`): kiln's frontend traces it with symbolic sizes
    # from the first call (Note [Shapes: size-generic graph modules] in kiln/frontend/frame_cache.py)
    GraphMeta.update(
        gm,
        kiln_dynamic=any(
            n.op == "placeholder" and n.name == "sizes" and n.users for n in gm.graph.nodes
        ),
    )
    try:
        compiled = compiler_fn(gm)
    except Exception as e:  # nothing has run yet: the captured graph itself is a safe answer
        logs.warn(
            "kiln compiled autograd: the compiler failed on the backward graph (%s: %s); "
            "running the captured graph uncompiled",
            type(e).__name__,
            e,
        )
        return gm.forward
    return _FirstCallGuard(compiled, gm)


class _FirstCallGuard:
    """Calls the compiled graph; if the compiler cannot take it (a kiln error on the first call,
    before anything ran), runs the captured graph itself from then on, with a warning."""

    __slots__ = ("fn", "gm", "checked")

    def __init__(self, fn, gm):
        self.fn = fn
        self.gm = gm
        self.checked = False

    def __call__(self, *args):
        if self.checked:
            return self.fn(*args)
        try:
            out = self.fn(*args)
        except KilnError as e:
            logs.warn(
                "kiln compiled autograd: the compiler failed on the backward graph (%s: %s); "
                "running the captured graph uncompiled",
                type(e).__name__,
                e,
            )
            self.fn = self.gm.forward
            out = self.fn(*args)
        self.checked = True
        return out


def _log_graph(gm):
    if not logs.enabled("compiled_autograd"):
        return
    verbose = logs.enabled("compiled_autograd_verbose")
    for n in gm.graph.nodes:
        origin = n.meta.get("kiln_origin")
        if origin and origin not in ("inputs", "hooks"):
            n.meta["stack_trace"] = (
                f'  File "kiln/compiled_autograd", line 0, in node_origin\n    {origin}\n'
            )
    text = gm.print_readable(print_output=False, include_stride=verbose, include_device=verbose)
    text = re.sub(r'"ProxyTensor\((.*?)\)"', r'"\1"', text)
    if verbose:
        logs.log("compiled_autograd_verbose", "TRACED GRAPH")
    logs.log("compiled_autograd", "===== Compiled autograd graph =====\n%s", text)
