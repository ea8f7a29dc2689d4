"""The functions users call: a guarded lookup over a frame cache's entries, else its miss.

Note [Cache: the hot path]
`make_wrapper` returns a closure over the entry list: `for guard, fn in entries: if guard(*args,
**kwargs): return fn(*args, **kwargs)`. Guards take the user function's own signature, so no
binding happens on a hit; everything else (tracing, logging, the recompile reason, the limit)
lives in `FrameCache.miss`, which runs only when no guard passes.

Note [Cache: most recent entry first]
The entry that passed moves to the front of the hot list, as a new entry starts there: a frame
with several entries (a prefill, a first decode step, then every later decode step) checks the
one it ran last first, and does not pay for the guards of the others on every call (two failing
guards cost a generation loop's decode step 110 us). Any entry whose guard passes is correct for
the call, so the order changes only speed. `entry_info` keeps the compile order (the recompile
log, explain, automatic dynamic's "last compile").

Note [Cache: frames under a trace function]
A trace function (`sys.settrace`: pdb, coverage, a program's own line tracer) sees the lines of
the frames Python runs; a compiled frame runs a graph and transformed code instead, and the
functions inlined into it run no frame at all. So while the calling thread has a trace function
(and `config.eager_under_trace`), a kiln wrapper runs its frame as written, uncompiled, and its
callees are the plain ones: the tracer sees every line eager runs (CPython's test_patma
TestTracing traces a function called after a `sys.settrace` in the compiled frame). Resume
functions run their code as written too. The check is one `sys.gettrace()` per call.
"""

import functools
import sys
import types

from kiln import config, logs
from kiln.exc import Unsupported
from kiln.frontend import stance
from kiln.frontend.dispatch_modes import (
    fullgraph_refusal,
    function_modes_on,
    guards_modes_off,
    modes_on,
    user_mode_active,
)
from kiln.frontend.markers import owns_markers
from kiln.frontend.resume import call_moving

__all__ = ["make_wrapper", "make_closure_wrapper", "make_box_wrapper", "module_eager"]


def _to_front(entries, entry):
    entries.remove(entry)
    entries.insert(0, entry)


def lookup_modes_off(entries, args, kwargs):
    """The code of the entry whose guard passes, the guards run with torch function dispatch
    off (a user's function mode must not see the guards' reads of tensors); None."""
    found = _entries_modes_off(entries, args, kwargs)
    return found[0][1] if found else None


def _entries_modes_off(entries, args, kwargs=None):
    """[the first entry whose guard passes] (moved to the front), the guards run with torch
    function dispatch off; []. (Note [Frames: tracing a user's torch function modes])"""
    kwargs = kwargs or {}
    with guards_modes_off():
        for entry in entries:
            if entry[0](*args, **kwargs):
                if entries[0] is not entry:  # Note [Cache: most recent entry first]
                    _to_front(entries, entry)
                return [entry]
    return []


def make_closure_wrapper(cache):
    """`entry(fn, *args)` for a ClosureFrameCache (Note [Cache: closures made per call])."""
    entries = cache.entries
    function = types.FunctionType
    gettrace = sys.gettrace

    def kiln_closure_entry(fn_obj, *args, **kwargs):
        if gettrace() is not None and config.eager_under_trace:
            return fn_obj(*args, **kwargs)  # Note [Cache: frames under a trace function]
        if ((fm := function_modes_on()) or modes_on()) and user_mode_active():
            # Note [Frames: under a user's dispatch mode]
            return fn_obj(*args, **kwargs)
        found = _entries_modes_off(entries, (fn_obj, *args), kwargs) if fm else None
        for entry in entries if found is None else found:
            guard, code = entry
            if found or guard(fn_obj, *args, **kwargs):
                if entries[0] is not entry:  # Note [Cache: most recent entry first]
                    _to_front(entries, entry)
                g = fn_obj.__globals__
                return function(code, g, fn_obj.__name__, None, fn_obj.__closure__)(*args, **kwargs)
        return cache.miss_with(fn_obj, args, kwargs)

    kiln_closure_entry._kiln_cache = cache
    return kiln_closure_entry


def make_box_wrapper(cache):
    """`entry(box)`: make_wrapper's or make_closure_wrapper's lookup with the arguments in a
    list that is emptied into the frame that runs (Note [Resume: arguments moved, not held])."""
    entries = cache.entries
    function = types.FunctionType
    closure = cache.dynamic_closure
    gettrace = sys.gettrace

    def kiln_box_entry(box):
        if (gettrace() is not None and config.eager_under_trace) or (
            ((fm := function_modes_on()) or modes_on()) and user_mode_active()
        ):
            # Notes [Cache: frames under a trace function], [Frames: under a user's dispatch mode]
            return call_moving(box.pop(0) if closure else cache.eager, box)
        found = _entries_modes_off(entries, box) if fm else None
        for entry in entries if found is None else found:
            guard, fn = entry
            if found or guard(*box):
                if entries[0] is not entry:  # Note [Cache: most recent entry first]
                    _to_front(entries, entry)
                if closure:
                    fn_obj = box.pop(0)
                    fn = function(fn, fn_obj.__globals__, fn_obj.__name__, None, fn_obj.__closure__)
                    fn_obj = None
                return call_moving(fn, box)
        if closure:
            cache.fn = cache.eager = box[0]  # (as miss_with: trace against this call's cells)
        return cache.miss(box, {})

    kiln_box_entry._kiln_cache = cache
    return kiln_box_entry


def module_eager(mod, *args, **kwargs):
    """Eager fallback of a module's compiled forward: the module's own __call__ (with hooks)."""
    return mod(*args, **kwargs)


def make_wrapper(cache):
    """The function users call: guarded lookup, else `cache.miss` (Note [Cache: the hot path])."""
    entries = cache.entries
    miss = cache.miss
    own_backend = cache.settings.backend
    gettrace = sys.gettrace

    def kiln_wrapper(*args, **kwargs):
        if gettrace() is not None and config.eager_under_trace:
            return cache.eager(*args, **kwargs)  # Note [Cache: frames under a trace function]
        if ((fm := function_modes_on()) or modes_on()) and user_mode_active():
            # Note [Frames: under a user's dispatch mode]
            if cache.settings.fullgraph and (reason := fullgraph_refusal()) is not None:
                raise Unsupported(f"{reason}: the frame would run eagerly (fullgraph=True)")
            return cache.eager(*args, **kwargs)
        state = stance.state
        if state.active and state.backend is not own_backend:  # force_eager, force_backend=
            return cache.under_stance(state, args, kwargs)
        if fm:  # Note [Frames: tracing a user's torch function modes]
            fn = lookup_modes_off(entries, args, kwargs)
            if fn is not None:
                return fn(*args, **kwargs)
        else:
            for entry in entries:
                guard, fn = entry
                if guard(*args, **kwargs):
                    if entries[0] is not entry:  # Note [Cache: most recent entry first]
                        _to_front(entries, entry)
                    return fn(*args, **kwargs)
        outer = logs.stderr_at_call is None  # Note [Logs: the stream a warning goes to]
        if outer:
            logs.stderr_at_call = sys.stderr
        try:
            return miss(args, kwargs)
        except Unsupported as e:
            if getattr(e, "kiln_trim", False):  # Note [Errors: what a fullgraph error shows]
                raise e.with_traceback(None) from None
            raise
        finally:
            if outer:
                logs.stderr_at_call = None

    functools.update_wrapper(kiln_wrapper, cache.fn)
    owns_markers(kiln_wrapper)  # Note [Markers: copied by functools.wraps]
    kiln_wrapper._kiln_cache = cache
    kiln_wrapper._kiln_orig_fn = cache.fn
    return kiln_wrapper
