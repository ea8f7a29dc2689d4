"""Per code object: the guarded entries [(guard_fn, transformed_fn)], misses, and the limit (the
functions users call are made in `cache_wrappers`)."""

import builtins
import dataclasses
import dis
import functools
import gc
import inspect
import io
import os
import re
import types
import weakref

import torch
import torch.fx

from kiln import config, faults, hooks, logs
from kiln.contracts import CompileEvent, GraphMeta
from kiln.exc import (
    CompiledAutogradCall,
    RecompileError,
    RestartTrace,
    Unsupported,
    UserError,
    unimplemented,
)
from kiln.frontend import (
    break_policy,
    fallback,
    installed_globals,
    nested_breaks,
    stance,
    transforms,
)
from kiln.frontend.backward_scope import (
    backward_scope,
    with_backward_scope,
)
from kiln.frontend.break_codegen import NoBreakHere, transformed_code_at_break
from kiln.frontend.bytecode_gen import transformed_code
from kiln.frontend.cache_wrappers import (
    make_box_wrapper,
    make_closure_wrapper,
    make_wrapper,
    module_eager,
)
from kiln.frontend.call_through import Router, is_plain, reads_caller_frame, routed_code
from kiln.frontend.dispatch_modes import modes_off_for_compile
from kiln.frontend.distributed import HookedModuleCall
from kiln.frontend.frame_shapes import FrameShapes, changed_floats, changed_values
from kiln.frontend.guard_filter import filter_guards
from kiln.frontend.guards import GuardKind, build_guard_fn, eval_sources, first_failure
from kiln.frontend.loop_breaks import driver_loop_break
from kiln.frontend.markers import kiln_marker
from kiln.frontend.module_hooks import global_module_hooks, has_hooks, hooks_run_around
from kiln.frontend.output_graph import OutputGraph
from kiln.frontend.resume import call_moving
from kiln.frontend.source import GetItemSource, LocalSource
from kiln.frontend.translator import InstructionTranslator, user_location
from kiln.frontend.user_errors import fullgraph_error, warn_graph_breaks
from kiln.frontend.variables.classes import detach_made_classes
from kiln.frontend.variables.lists import _ITER_UNDO as ITER_UNDO
from kiln.symbolic import autocast_state as amp
from kiln.symbolic import marked_dims

_all_caches = weakref.WeakSet()
_module_compiler = []  # [compile_callable(model, settings)]: entry.py registers it (it builds on us)
_logged_breaks = set()  # (reason, user location) already printed on the graph_breaks channel
_recorders = []  # explain(): objects with on_graph(gm, fn), on_break(record), on_entry(entry)


def _first_arg_source(code):
    """Where the frame's first positional argument (the module) is: its own name, or item 0 of
    `*args` in a decorator's `wrapper(*args, **kwargs)`."""
    if code.co_argcount == 0 and code.co_flags & inspect.CO_VARARGS:
        return GetItemSource(LocalSource(code.co_varnames[code.co_kwonlyargcount]), 0)
    return LocalSource(code.co_varnames[0])


class CacheEntry:
    """One compiled entry: its guard function (with `.source`), transformed function and graph."""

    def __init__(self, guard, fn, code, gm):
        self.guard = guard
        self.fn = fn
        self.code = code
        self.gm = gm

    @property
    def guard_source(self):
        return self.guard.source


# Note [Cache: entries of objects that died]
# An identity guard holds its object weakly (Note [Guards: identity without ownership]): once the
# object is gone the entry can never pass again, yet it would stay in the cache, counted against
# config.cache_size_limit, so a function called with a new class each call (a class made per
# call, a module made per model) ran eagerly for good after a few calls. Each such object gets a
# weak reference whose callback drops the entry from its cache (as torch.compile invalidates
# entries); the references live on the entry, so a dropped entry watches nothing. A class dies
# in a collection (it is in reference cycles of its own): a cache at its limit collects once
# before it gives up.
def _drop_when_pinned_objects_die(cache, entry):
    cache_ref, entry_ref = weakref.ref(cache), weakref.ref(entry)

    def died(_):
        c, e = cache_ref(), entry_ref()
        if c is not None and e is not None and e in c.entry_info:
            c._drop(e)
            counters = getattr(logs, "counters", None)  # (None at interpreter shutdown)
            if counters is not None:
                counters["frames"]["entries_dropped_dead_objects"] += 1

    watched = []
    for ref in getattr(entry.guard, "weak_values", ()):
        obj = ref()
        if obj is not None:
            watched.append(weakref.ref(obj, died))
    entry.watching = watched


class BreakRecord:
    """A graph break: why, and where in the user's code."""

    def __init__(self, fn, reason, user_location):
        self.fn = fn
        self.reason = reason
        self.user_location = user_location

    def __str__(self):
        return f"{self.reason}\n    at {self.user_location}"


_RESTARTS = 256  # traces of one frame started again (each initialized a lazy module) at most


class FrameCache:
    """The compiled entries of one function under one compile() configuration."""

    def __init__(self, fn, settings, *, eager=None, module_root=False):
        self.fn = fn
        self.eager = eager or fn
        self.settings = settings  # kiln.contracts.CompileSettings, shared by the whole compile
        self.module_root = module_root
        self.entries = []  # [(guard, transformed_fn)]: the hot path reads only this
        self.entry_info = []  # [CacheEntry], parallel to entries
        self.skip = False  # run eagerly from now on (a whole-frame break or the limit)
        self.shallow = False  # kiln.disable(recursive=False): always in Python, callees compiled
        self.route_calls = False  # while skipped: callees through kiln (Note [Frames: callees...])
        self._routed = None  # (function run eagerly, its routed copy)
        self._routed_code = None
        self.breaks = []
        self._global_hooks_noted = False  # (Note [Modules: global hooks] in module_hooks)
        self._limit_warned = False
        self._children = {}  # (the root's: `children`)
        self.dynamic_closure = False
        self.frame_shapes = FrameShapes()  # sizes seen and dims made dynamic (automatic dynamic)
        self._shape_kinds = {}  # source name -> "tensor" | "int" (what FrameShapes tracks)
        self.root = self  # the cache of the function the user compiled (children point to it)
        # a callee compiled because its caller runs in Python (or broke around the call): when
        # its trace made no tensor op and asked is_compiling(), it runs in Python too
        # Note [Frames: a callee that only asks whether it is compiled]
        # transformers' `is_torchdynamo_compiling()` called from a frame that runs in Python
        # (a whole-frame break) answered the True of its trace at run time, so that frame took
        # the compiled-only path in Python (Switch Transformers indexed a None attention mask).
        # Such a callee computes nothing a graph would hold: it runs as written, answering False,
        # as torch.compile, which skips frames without tensors, answers.
        self.graphless_in_python = False
        self.tree_breaks = []  # root only: breaks of the root and its children, for the warning
        self.breaks_warned = False
        self._forced = {}  # forced backend -> wrapper of this frame's cache under it
        _all_caches.add(self)

    @property
    def root(self):
        """The cache of the function the user compiled (held weakly by its children: the
        transformed code's globals hold the children, Note [Globals: installed for as long as
        the code that loads them])."""
        root = self._root()
        return self if root is None else root

    @root.setter
    def root(self, cache):
        # (a root points to itself strongly, as before: a cycle, collected with the rest)
        self._root = (lambda: cache) if cache is self else weakref.ref(cache)

    @property
    def children(self):
        """Resume functions and callees that broke: their own frame caches, one table per
        root (a loop's resume functions are compiled once), reached through the root."""
        return self.root._children

    def _child(self, key, fn, **kw):
        wrapper = self.children.get(key)
        if wrapper is None:
            cache = FrameCache(fn, self.settings, **kw)
            cache.root = self.root
            wrapper = self.children[key] = make_wrapper(cache)  # are compiled once
        return wrapper

    def _closure_child(self, key, fn):
        """The `entry(fn, *args)` wrapper of fn's code under fn's globals, made once per key:
        a callee whose function is made per call (Note [Cache: closures made per call])."""
        wrapper = self.children.get(key)
        if wrapper is None:
            cache = ClosureFrameCache(fn.__code__, fn.__globals__, self.settings)
            cache.root = self.root
            cache.graphless_in_python = True
            wrapper = self.children[key] = make_closure_wrapper(cache)
        return wrapper

    def _resume_wrapper(self, code, box=False):
        """The kiln-compiled function of a resume code object.

        With cells or free variables it is `entry(fn, *args)`: the transformed code builds the
        resume function with its own cells (MAKE_FUNCTION) and passes it first. With `box`, the
        function that takes the arguments as one list (Note [Resume: arguments moved, not held]).
        """
        if code.co_freevars:
            wrapper = self.children.get(code)
            if wrapper is None:
                cache = ClosureFrameCache(code, self.fn.__globals__, self.settings)
                cache.root = self.root
                wrapper = self.children[code] = make_closure_wrapper(cache)
        else:
            fn = types.FunctionType(code, self.fn.__globals__, code.co_name)
            wrapper = self._child(code, fn)
        if not box:
            return wrapper
        boxed = self.children.get((code, "box"))
        if boxed is None:
            boxed = self.children[(code, "box")] = make_box_wrapper(wrapper._kiln_cache)
        return boxed

    def _callee(self, fn, module_root=False, cells_per_call=False):
        """A user function (or module forward) that broke inside: compiled as its own frame.
        `cells_per_call`: fn is a closure whose code is compiled with its own globals, and the
        entry is called as `entry(fn, *args)` with the function of the call (Note [Cache:
        closures made per call])."""
        if cells_per_call:
            return self._closure_child(("closure", fn.__code__, id(fn.__globals__)), fn)
        inner = kiln_marker(fn, "_kiln_shallow")
        if inner is not None:  # kiln.disable(fn, recursive=False): fn in Python, callees compiled
            func = inner.__func__ if isinstance(inner, types.MethodType) else inner
            wrapper = self._child(("shallow", func), func)
            shallow_frame(wrapper._kiln_cache)
            if isinstance(inner, types.MethodType):  # (a bound method: its object bound again)
                return types.MethodType(wrapper, inner.__self__)
            return wrapper
        if module_root:
            return self._child((fn, True), fn, eager=module_eager, module_root=True)
        if reads_caller_frame(fn):
            # it reads its caller's frame (namedtuple's __module__): a wrapper would be that caller
            return fn
        wrapper = self._child((fn, False), fn)
        wrapper._kiln_cache.graphless_in_python = True
        return wrapper

    def clear(self):
        self.entries.clear()
        self.entry_info.clear()
        self.skip = self.route_calls = False
        if self.shallow:
            shallow_frame(self)
        self.breaks.clear()
        self.tree_breaks.clear()
        self.breaks_warned = False
        self._limit_warned = False
        self.frame_shapes = FrameShapes()
        self._shape_kinds.clear()

    def observe_shapes(self, args, kwargs):
        """Automatic dynamic: compare this call's sizes with the last compile's, before tracing.

        Note [Shapes: automatic dynamic]
        On a miss, the sources whose sizes the last entry traced are read from this call's
        arguments; dimensions whose value changed to a size of 2 or more (from any size: 1 -> 2
        too, as torch, or a size sequence 1, 2, 3 compiles three times), and int inputs whose
        value changed at all (Note [Shapes: unspecialised ints]) become dynamic for this frame from
        now on (`FrameShapes.update` logs them on `recompiles`), so
        the next entry is traced with size symbols and serves every later size. dynamic=False
        never does this; config.automatic_dynamic_shapes=False turns it off.
        """
        if (
            not self.entry_info
            or self.settings.dynamic is False
            or not config.automatic_dynamic_shapes
        ):
            return
        names = list(self.frame_shapes.sizes)
        values = eval_sources(self.entry_info[-1].guard, args, kwargs, names)
        new = {}
        for name, v in values.items():
            kind = self._shape_kinds.get(name)
            if kind == "tensor" and isinstance(v, torch.Tensor):
                new[name] = tuple(v.shape)
            elif kind in ("int", "float") and type(v) is (int if kind == "int" else float):
                new[name] = (v,)
            elif kind == "tensor" and type(v) is int and name not in self.frame_shapes.dynamic:
                # a tensor input that is now an int: the int is dynamic at once (torch's
                # automatic dynamic: a changed kind is a change)
                self.frame_shapes.dynamic[name] = {0}
                logs.log("recompiles", f"{name} became dynamic (an int input): was a tensor")
        self._update_shapes(new)

    def _update_shapes(self, new):
        """FrameShapes.update, with int inputs logged as values (`n became dynamic: 2 -> 3`)."""
        fs = self.frame_shapes
        floats = {n: v for n, v in new.items() if self._shape_kinds.get(n) == "float"}
        for name in changed_floats(fs.sizes, {n: v[0] for n, v in floats.items()}):
            if name not in fs.dynamic:  # Note [Shapes: unspecialised floats]
                fs.dynamic[name] = {0}
                logs.log("recompiles", f"{name} became dynamic (a float input)")
        fs.sizes.update(floats)
        new = {n: v for n, v in new.items() if n not in floats}
        ints = {n: v for n, v in new.items() if self._shape_kinds.get(n) == "int"}
        for name in changed_values(fs.sizes, {n: v[0] for n, v in ints.items()}):
            if name not in fs.dynamic:  # any change, 0/1/negative too (unspecialised ints)
                fs.dynamic[name] = {0}
                logs.log(
                    "recompiles",
                    f"{name} became dynamic (an int input): {fs.sizes[name][0]} -> {ints[name][0]}",
                )
        fs.sizes.update(ints)
        fs.update({n: v for n, v in new.items() if n not in ints})

    def _has_marked_dims(self, args, kwargs):
        def marked(v):
            return issubclass(type(v), torch.Tensor) and bool(
                getattr(v, "_kiln_dynamic_dims", None)
            )

        for v in (*args, *kwargs.values()):
            t = type(v)  # (not isinstance: a proxy's __class__ would run its code)
            # (the C methods: a subclass's own values() / __iter__ is user code, run once per call)
            if issubclass(t, dict):
                items = dict.values(v)
            elif issubclass(t, list | tuple):
                items = (list if issubclass(t, list) else tuple).__iter__(v)
            else:
                items = [v]
            if any(marked(i) for i in items):
                return True
        return False

    def run_eager(self, args, kwargs):
        """The frame as plain Python (inside compiled autograd when config asks for it); one kiln
        gave up on calls its callees through kiln (Note [Frames: callees of a frame run in
        Python])."""
        fn = self._routed_eager(args) if self.route_calls else self.eager
        if config.compiled_autograd:
            with backward_scope(self.settings.backend):
                return _call(fn, args, kwargs)
        return _call(fn, args, kwargs)

    def give_up(self, route_calls=True):
        """Run this frame eagerly from now on (with its callees through kiln, or not)."""
        self.skip = True
        self.route_calls = route_calls and config.route_calls_of_eager_frames

    def _routed_eager(self, args):
        """self.eager with its calls routed (call_through.routed_code); self.eager where the
        copy cannot be made, or for a module with hooks (its own __call__ runs them)."""
        base = self.fn if self.module_root else self.eager
        if self.module_root and (not args or has_hooks(args[0])):
            return self.eager
        if not is_plain(base.__code__):  # (a generator or coroutine function: run as written)
            return self.eager
        if self._routed is not None and self._routed[0] is base:
            return self._routed[1]
        if self._routed_code is None:
            try:
                self._routed_code = routed_code(base.__code__, Router(self))
            except Exception as e:  # (a shape of bytecode the copy does not handle: plain eager)
                logs.log("graph_breaks", f"{base.__qualname__}: its callees run eagerly ({e})")
                self.route_calls = False
                return self.eager
        code = self._routed_code
        fn = types.FunctionType(
            code, base.__globals__, base.__name__, base.__defaults__, base.__closure__
        )
        fn.__kwdefaults__ = base.__kwdefaults__
        fn.__qualname__ = base.__qualname__
        if not self.dynamic_closure:
            self._routed = (base, fn)
        return fn

    def closure_callee(self, fn):
        """A function made in a frame, compiled by its code: `entry(fn, *args)` with fn bound."""
        entry = self._closure_child(("routed", fn.__code__), fn)
        if entry._kiln_cache.fn.__globals__ is not fn.__globals__:
            return fn
        return functools.partial(entry, fn)

    def compiled_module(self, mod):
        """A module called from a frame run in Python: its forward compiled, hooks kept."""
        return _module_compiler[0](mod, self.settings)

    def under_stance(self, state, args, kwargs):
        """A call under a stance that changes what a hit runs (Note [Stance: what each one
        does]): the plain frame, or this frame's cache under the forced backend."""
        if state.name == "force_eager":
            return self.run_eager(args, kwargs)
        wrapper = self._forced.get(state.backend)
        if wrapper is None:
            settings = dataclasses.replace(
                self.settings, backend=state.backend, backend_name=state.backend_name
            )
            cache = FrameCache(self.fn, settings, eager=self.eager, module_root=self.module_root)
            wrapper = self._forced[state.backend] = make_wrapper(cache)
        return wrapper(*args, **kwargs)

    def miss(self, args, kwargs):
        """No guard passed: compile a new entry (or run eagerly), then run it."""
        replaced = _replaced_builtin()
        if replaced is not None:  # Note [Frames: builtins the program replaced]
            logs.counters["graph_break"][f"builtins.{replaced} replaced by the program"] += 1
            return self.run_eager(args, kwargs)
        try:
            return self._miss(args, kwargs)
        finally:
            root = self.root
            if root.tree_breaks and not root.breaks_warned:
                root.breaks_warned = True
                if config.warn_graph_breaks and not logs.enabled("graph_breaks") and not _recorders:
                    warn_graph_breaks(root.fn, root.tree_breaks, root.module_root)

    def _miss(self, args, kwargs):
        if self.skip:
            return self.run_eager(args, kwargs)
        if transforms.active() is not None:  # Note [Frames: under torch.func transforms]
            return transforms.run_under_transform(self, args, kwargs)
        if self.module_root and args and hooks_run_around(args[0]):
            return self._hooked_call(args, kwargs)  # (its forward's own cache compiles, or not)
        if self.module_root and global_module_hooks():
            return self._with_global_hooks(args, kwargs)
        if stance.state.name == "eager_on_recompile":
            return self.run_eager(args, kwargs)
        if stance.state.name == "fail_on_recompile":
            stance.fail_on_recompile(self.fn, [e.guard for e in self.entry_info], args, kwargs)
        if self.entries and config.error_on_recompile:
            guards = [e.guard for e in self.entry_info]
            why = "config.error_on_recompile"
            stance.fail_on_recompile(self.fn, guards, args, kwargs, why, RecompileError)
        name = self.fn.__qualname__
        if self.entries:
            if len(self.entries) >= config.cache_size_limit and self._dead_pins_possible():
                gc.collect()  # Note [Cache: entries of objects that died]: drops theirs
            if len(self.entries) >= config.cache_size_limit:
                if not self._limit_warned:
                    self._limit_warned = True
                    logs.warn(
                        "kiln: %s (%s:%d) hit config.cache_size_limit (%d); it now runs eagerly. "
                        "Last guard failure: %s",
                        name,
                        self.fn.__code__.co_filename,
                        self.fn.__code__.co_firstlineno,
                        config.cache_size_limit,
                        first_failure(self.entry_info[-1].guard, args, kwargs),
                    )
                logs.counters["frames"]["cache_limit_hit"] += 1
                self.give_up()
                return self.run_eager(args, kwargs)
            logs.counters["stats"]["recompiles"] += 1
            if hooks.listening("guard_failure"):
                reason = first_failure(self.entry_info[-1].guard, args, kwargs)
                hooks.fire("guard_failure", self.root.fn, reason)
            if config.debug_dir:  # the report (kiln/tools/debug_dir.py) lists the failures
                failures = [first_failure(e.guard, args, kwargs) for e in self.entry_info]
                hooks.fire(
                    "recompile", self.fn, [f"entry {i}: {f}" for i, f in enumerate(failures)]
                )
            if logs.enabled("recompiles"):
                reasons = [
                    f"  entry {i}: {first_failure(e.guard, args, kwargs)}"
                    for i, e in enumerate(self.entry_info)
                ]
                code = self.fn.__code__
                logs.log(
                    "recompiles",
                    "recompiling %s (%s:%d), guards failed:\n%s",
                    name,
                    code.co_filename,
                    code.co_firstlineno,
                    "\n".join(reasons),
                )
        logs.counters["frames"]["total"] += 1
        warmup = stance.warmup_settings(self)  # Note [Stance: eager_then_compile]
        state = faults.GlobalState()
        # The frame runs eagerly after (not inside) the except clause: an exception the user's
        # code raises must not get kiln's error as its __context__.
        entry = failure = None
        try:
            # (kiln reads its inputs' metadata without calling a tensor subclass's
            # __torch_function__: Note [Guards: tensor subclasses with __torch_function__])
            # (modes_off_for_compile first: it notes the torch function state of the call)
            with modes_off_for_compile(), torch._C.DisableTorchFunctionSubclass():
                self.observe_shapes(args, kwargs)
                entry = self.compile(args, kwargs, warmup)
        except Unsupported as e:
            if self.settings.fullgraph:
                fullgraph_error(e, self.fn)  # adds the user's frames and a hint to e
                raise
            if break_policy.raises(e):  # Note [Break policy: error_on_graph_break]
                fullgraph_error(e, self.fn, "error_on_graph_break(True)")
                raise
            self._record_break(e)
            # no resume: the frame runs in Python (torch.compile's counter of the same name)
            logs.counters["unimplemented"][e.msg] += 1
            _let_go(e)
        except UserError:  # (ConstraintViolation, ForbiddenInTrace): the caller's to handle
            state.restore()
            raise
        except Exception as e:
            if isinstance(e, TypeError) and not _binds(self.fn, args, kwargs):
                failure = "arguments"  # Python's own error, naming the function (run eagerly)
            else:
                state.restore()  # Note [Faults: the crash contract]
                if fallback.reraise(self.settings.fullgraph):
                    raise
                failure = e
        if failure == "arguments":
            return self.run_eager(args, kwargs)
        if failure is not None:
            return self._internal_error(failure, "compiling", args, kwargs)
        if entry is None:
            self.give_up()
            return self.run_eager(args, kwargs)
        logs.counters["frames"]["ok"] += 1
        self.entries.insert(0, (entry.guard, entry.code if self.dynamic_closure else entry.fn))
        self.entry_info.append(entry)
        stance.keep_warm(self, entry, warmup is not None)
        _drop_when_pinned_objects_die(self, entry)
        for r in _recorders:
            r.on_entry(entry)
        state = faults.GlobalState()
        try:
            faults.hit("first_run")
            if self.dynamic_closure:
                return _call(entry.fn, _rest(args), kwargs)
            return _call(entry.fn, args, kwargs)
        except Exception as e:
            if not fallback.raised_by_kiln(e) or fallback.reraise(self.settings.fullgraph):
                raise
            state.restore()
            self._drop(entry)
            if type(args) is list and not args:  # a box, emptied by the run: no eager rerun
                fallback.warn(self.fn, e, "in the first run of the compiled")
                self.skip = True
                raise
            if not fallback.nothing_ran(e, entry.code):
                fallback.reraise_after_run(self.eager if self.dynamic_closure else self.fn, e)
                self.skip = True
                raise
            return self._internal_error(e, "in the first run of the compiled", args, kwargs)

    def _internal_error(self, e, when, args, kwargs):
        """kiln failed on this frame: one warning, and the frame runs eagerly from now on."""
        fn = self.eager if self.dynamic_closure else self.fn
        fallback.warn(fn, e, when)
        self.skip = True
        # the error's traceback holds the trace (its frames, their values): dropped before the
        # eager run, or objects of the user's that died stayed alive through it
        e.__traceback__ = e.__context__ = None
        return self.run_eager(args, kwargs)

    def _dead_pins_possible(self):
        """Whether an entry holds an object weakly (a collection may drop the entry)."""
        return any(getattr(e, "watching", None) for e in self.entry_info)

    def _drop(self, entry):
        """Forget a compiled entry whose first run failed inside kiln."""
        self.entry_info.remove(entry)
        self.entries[:] = [e for e in self.entries if e[0] is not entry.guard]

    def _record_break(self, e):
        if e.user_location is None:  # (a break before tracing, e.g. global module hooks)
            code = self.fn.__code__
            e.user_location = user_location(code, code.co_firstlineno)
        record = BreakRecord(self.fn, e.msg, e.user_location)
        self.breaks.append(record)
        self.root.tree_breaks.append(record)
        logs.counters["graph_break"][e.msg] += 1
        logs.counters["stats"]["graph_breaks"] += 1
        key = (e.msg, e.user_location)
        if key not in _logged_breaks:  # each break is printed once per location
            _logged_breaks.add(key)
            logs.log("graph_breaks", "graph break in %s: %s", self.fn.__qualname__, record)
        for r in _recorders:
            r.on_break(record)
        hooks.fire("graph_break", record)

    def compile(self, args, kwargs, settings=None):
        """Trace the frame for these arguments: guard function + transformed function (with
        `settings` in place of the frame's own, e.g. another backend)."""
        # what a trace learned for the next (Note [Autograd: leaves made in the frame])
        self.restart_notes = set()
        event = CompileEvent(self.fn, self.fn.__code__.co_qualname)
        hooks.fire("compile_start", event)
        made = None
        try:
            for _ in range(_RESTARTS):  # (each restart initialized a lazy module for good)
                try:
                    made = self._compile_once(args, kwargs, settings or self.settings)
                    return made
                except RestartTrace:  # Note [Modules: lazy modules initialized while tracing]
                    continue
            unimplemented(f"the frame was traced again {_RESTARTS} times (lazy modules)")
        finally:
            hooks.fire("compile_end", dataclasses.replace(event, compiled=made is not None))

    def _compile_once(self, args, kwargs, settings):
        fn = self.fn
        installed_globals.flush()  # Note [Globals: installed for as long as the code ...]
        hooks.fire("frame_start", fn)
        dynamic, dynamic_ints = self.settings.dynamic, False
        if dynamic is None and not config.assume_static_by_default:
            dynamic = True  # (torch's switch: sizes symbolic from the first compile)
        if self.module_root and isinstance(args[0], torch.fx.GraphModule):
            # Note [Shapes: size-generic graph modules]: a GraphModule made to serve many sizes
            # (compiled autograd's graph reading `sizes`) says so in `GraphMeta.kiln_dynamic`:
            # its tensor dims and int inputs are symbolic from the first compile
            if GraphMeta.of(args[0]).kiln_dynamic and dynamic is not False:
                dynamic, dynamic_ints = True, True
        fake_inputs = (
            dynamic is True
            or bool(self.frame_shapes.dynamic)
            or self._has_marked_dims(args, kwargs)
            or bool(config.dynamic_sources)  # Note [Shapes: dynamic sources]
        )
        output = OutputGraph(
            fn,
            settings,
            frame_shapes=self.frame_shapes,
            dynamic=dynamic,
            fake_inputs=fake_inputs,
        )
        output.dynamic_ints = dynamic_ints
        output.restart_notes = getattr(self, "restart_notes", set())
        output.eager_rerun_ok = (  # Note [Blocks: ops inside try blocks]
            not self.dynamic_closure
            and is_plain(fn.__code__)
            and fallback.NO_EAGER_RERUN not in output.restart_notes
        )
        if self.module_root:
            output.guards.add(GuardKind.NO_HOOKS, _first_arg_source(fn.__code__))
            output.uses_modules = True
            self._check_module_hooks(args[0])
        tx = InstructionTranslator(output, fn, args, kwargs)
        steps = len(ITER_UNDO)
        entry = None
        try:
            entry = self._trace(fn, output, tx, args, kwargs)
            return entry
        finally:
            if entry is not None:  # Note [Globals: installed for as long as the code ...]
                installed_globals.keep_while(entry.code, output)
            else:
                installed_globals.release_unused(output)
            # the trace lets go of the frame's values now, not at the next collection: a
            # translator can sit in reference cycles with what it made (an inlined call's with
            # its parent, a dict input read key by key with the translator that read it), the
            # iterator steps of its last instruction hold its variables (Note [Finalizers:
            # locals]); an optimizer's state tensors dropped by the user are freed at once
            for translator in output.translators:  # the root's and every inlined call's
                translator.__dict__.clear()
            detach_made_classes(output.made_classes)  # Note [Classes: the trace's classes ...]
            # (so does the output graph: its graph inputs and guards hold the real values it read,
            # a parameter's .grad kept alive after `zero_grad()` until the next collection)
            output.__dict__.clear()
            del ITER_UNDO[steps:]

    def _trace(self, fn, output, tx, args, kwargs):
        """Run the translator and build the cache entry (compile's body)."""
        grad_mode, autocast_state = torch.is_grad_enabled(), amp.snapshot()
        default_dtype = torch.get_default_dtype()  # Note [Torch: set_default_dtype traced]
        try:
            tx.run()
        except Unsupported as e:
            torch._C._set_grad_enabled(grad_mode)  # a traced `with no_grad()` may be open
            strict = self.settings.fullgraph or break_policy.raises(e)  # Note [Break policy: ...]
            allowed = not strict or isinstance(e, CompiledAutogradCall)
            if not allowed or e.break_state is None or e.break_state.tx is not tx:
                raise
            why = driver_loop_break(fn, tx, output, e)
            if why is not None:  # Note [Graph breaks: a loop that only calls]
                e.msg = f"{e.msg} ({why})"
                raise
            resume = self._resume_wrapper
            if getattr(e, "rest_in_python", False) and len(e.frames) == 1:
                # Note [Markers: skip_frame and step_unsupported] (in a callee: the break is at
                # its call, and the rest of the callee's own frame runs in Python)
                resume = functools.partial(_resume_in_python, self._resume_wrapper)
            try:
                nested = nested_breaks.plan(output, e)
                if nested is not None:  # Note [Nested breaks: placing the break in the callee]
                    new_code = nested_breaks.code_at_nested_break(
                        output, fn.__code__, e, nested, resume, self._callee
                    )
                else:
                    new_code = transformed_code_at_break(
                        output, fn.__code__, e, tx.instructions, resume, self._callee
                    )
            except (NoBreakHere, Unsupported) as why:
                e.msg = f"{e.msg} (no graph break possible: {why})"
                raise e from None
            self._record_break(e)
            _let_go(e)
        else:
            if self.graphless_in_python and output.asked_is_compiling and output.count_calls() == 0:
                return None  # Note [Frames: a callee that only asks whether it is compiled]
            try:
                new_code = transformed_code(output, fn.__code__, tx.return_value)
            except Unsupported as e:  # (rebuilding the returned values: at the return)
                if e.user_location is None:
                    e.user_location = user_location(fn.__code__, tx.current_inst.lineno)
                raise
        finally:
            torch._C._set_grad_enabled(grad_mode)
            amp.restore(autocast_state)  # a traced `with torch.autocast()` may be open
            torch.set_default_dtype(default_dtype)
        if output.uses_modules:
            output.guards.add(GuardKind.GLOBAL_STATE, None, True)
        if output.has_symbols():
            # rendered by build_guard_fn, after the backend returned (it may add facts)
            output.guards.add(GuardKind.SHAPE_ENV, None, output.shape_env)
            marked_dims.check(output.shape_env)  # (after the backend: it may add facts)
        self._record_shapes(output)
        build = dict(extra=output.extra_globals, dynamic_closure=self.dynamic_closure)
        if self.settings.guard_filter_fn is not None:
            filter_guards(self.settings.guard_filter_fn, fn, output.guards, args, kwargs, **build)
        guard = build_guard_fn(fn, output.guards, **build)
        new_fn = types.FunctionType(
            new_code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
        )
        new_fn.__kwdefaults__ = fn.__kwdefaults__
        if config.compiled_autograd:
            new_fn = with_backward_scope(new_fn, self.settings.backend)
        if output.rerun_on_error:  # Note [Blocks: ops inside try blocks]
            new_fn = fallback.eager_on_error(new_fn, new_code, self.run_eager, output.rerun_draws)
        gm = getattr(output, "gm", None)
        if gm is not None:
            for r in _recorders:
                r.on_graph(gm, fn)
        entry = CacheEntry(guard, new_fn, new_code, gm)
        if config.debug_dir:
            dump_entry(config.debug_dir, fn, entry, len(self.entries))
        return entry

    def _record_shapes(self, output):
        """The sizes this entry traced, for the next miss's comparison (observe_shapes)."""
        for name in output.input_shapes:
            self._shape_kinds[name] = "tensor"
        for name in output.input_ints:
            self._shape_kinds[name] = "int"
        for name in output.input_floats:
            self._shape_kinds[name] = "float"
        scalars = {**output.input_ints, **output.input_floats}
        new = {**output.input_shapes, **{n: (v,) for n, v in scalars.items()}}
        if self.settings.dynamic is False or not config.automatic_dynamic_shapes:
            self.frame_shapes.sizes.update(new)  # (recorded, never made dynamic)
            return
        self._update_shapes(new)

    def _hooked_call(self, args, kwargs):
        """Note [Modules: hooks around a compiled forward]
        A module called through kiln's frame entry (the model given to kiln.compile, or a block
        whose call broke the graph of its caller) with forward hooks and no others: its hooks
        run in Python as `Module.__call__` runs them, around its forward compiled as a plain
        frame (guarded by its own guards, not by the absence of hooks). FSDP's blocks are such
        modules (Note [FSDP: hooks stay Python]); before, the whole call ran eagerly."""
        mod = args[0]
        forward = self._child(("hooked forward", self.fn), self.fn)
        call = HookedModuleCall(mod, types.MethodType(forward, mod))
        if config.compiled_autograd:
            with backward_scope(self.settings.backend):
                return call(*args[1:], **kwargs)
        return call(*args[1:], **kwargs)

    def _with_global_hooks(self, args, kwargs):
        """The call runs eagerly while module hooks are registered globally (Note [Modules:
        global hooks] in module_hooks.py)."""
        if not self._global_hooks_noted:  # (the break is recorded once per frame)
            self._global_hooks_noted = True
            self._record_break(Unsupported("global module hooks"))
        return self.run_eager(args, kwargs)

    def _check_module_hooks(self, mod):
        if (
            mod._forward_hooks
            or mod._forward_pre_hooks
            or mod._backward_hooks
            or getattr(mod, "_backward_pre_hooks", None)
        ):
            unimplemented(f"module hooks on {type(mod).__name__}")
        if global_module_hooks():
            unimplemented("global module hooks")


def _resume_in_python(resume_wrapper, code, box=False):
    """A resume function's wrapper whose frame runs in Python, uncompiled."""
    wrapper = resume_wrapper(code, box)
    wrapper._kiln_cache.give_up()
    return wrapper


def _let_go(e):
    """Drop what a graph break holds of the trace (its state, the frames it unwound), now rather
    than at the next collection: the frame's values die where Python lets go of them (Note
    [Finalizers: locals])."""
    e.break_state = None
    e.__traceback__ = e.__context__ = None


def shallow_frame(cache):
    """Make `cache` the frame of a function kiln.disable(recursive=False) kept out: it runs in
    Python, and the user functions it calls run as compiled frames (Note [Frames: callees of a
    frame run in Python])."""
    cache.shallow = True
    cache.skip = cache.route_calls = True


class ClosureFrameCache(FrameCache):
    """Entries of a code object whose function is made per call with that call's cells (resume
    functions of frames with cells): guards read the closure from the function passed first.

    Note [Cache: closures made per call]
    The hot path is `entry(fn, *args)`: `guard(fn, *args)` checks `fn.__closure__` contents,
    then the transformed code runs as `FunctionType(code, globals, name, None, fn.__closure__)`.
    """

    def __init__(self, code, f_globals, settings):
        cells = tuple(types.CellType() for _ in code.co_freevars)
        super().__init__(types.FunctionType(code, f_globals, code.co_name, None, cells), settings)
        self.dynamic_closure = True

    def miss_with(self, fn_obj, args, kwargs):
        self.fn = fn_obj  # trace against this call's cells
        self.eager = fn_obj
        return self.miss((fn_obj, *args), kwargs)

    def compile(self, args, kwargs, settings=None):
        return super().compile(args[1:], kwargs, settings)

    def run_eager(self, args, kwargs):
        return super().run_eager(_rest(args), kwargs)


# Note [Frames: builtins the program replaced]
# A program may replace a builtin for a while (`builtins.len = lru_cache(4)(len)`, CPython's
# test_lru_reentrancy_with_len). kiln's own Python code, and the libraries it calls while
# compiling (bytecode, torch.fx), look those names up in builtins too: compiling then would run
# the program's replacement on kiln's values (an lru_cache'd len of a list raises TypeError,
# before the program's `finally` puts len back). So while one of the builtins kiln relies on is
# not the interpreter's own, a frame that misses its cache runs in Python, uncompiled; the
# entries compiled before still run.
_KILN_BUILTINS = {
    name: getattr(builtins, name)
    for name in (
        *("len", "isinstance", "issubclass", "type", "iter", "next", "hash", "id", "repr"),
        *("getattr", "setattr", "hasattr", "list", "tuple", "dict", "set", "range", "str"),
        *("int", "enumerate", "zip", "sorted", "any", "all", "min", "max", "object", "super"),
    )
}


def _replaced_builtin():
    """The name of a builtin kiln relies on that the program replaced, or None."""
    current = builtins.__dict__
    for name, value in _KILN_BUILTINS.items():
        if current.get(name) is not value:
            return name
    return None


def _call(fn, args, kwargs):
    """fn(*args, **kwargs); a box (a list of arguments) is moved into fn's frame."""
    if type(args) is list:  # Note [Resume: arguments moved, not held]
        return call_moving(fn, args)
    return fn(*args, **kwargs)


def _rest(args):
    """The arguments after the first (a box loses its first item in place)."""
    if type(args) is list:
        del args[0]
        return args
    return args[1:]


def _binds(fn, args, kwargs):
    """Whether the arguments bind to fn's signature."""
    try:
        inspect.signature(fn, follow_wrapped=False).bind(*args, **kwargs)
    except TypeError:
        return False
    except ValueError:
        return True
    return True


def reset_all():
    """Drop every compiled entry of every wrapper (kiln.reset())."""
    for cache in list(_all_caches):
        cache.clear()
    _logged_breaks.clear()
    installed_globals.flush()  # (the codes of the cleared entries that died with them)


def dump_entry(debug_dir, fn, entry, index):
    """KILN_DEBUG_DIR: a frame's guard source, graph code and bytecode as files."""
    name = re.sub(r"[^0-9A-Za-z_.]+", "_", fn.__qualname__)
    folder = os.path.join(debug_dir, "frontend", f"{name}_{index}")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "guards.py"), "w") as f:
        f.write(entry.guard.source)
    if entry.gm is not None:
        with open(os.path.join(folder, "graph.py"), "w") as f:
            f.write(entry.gm.code)
    buf = io.StringIO()
    dis.dis(fn.__code__, file=buf)
    buf.write("\n--- transformed ---\n")
    dis.dis(entry.code, file=buf)
    with open(os.path.join(folder, "bytecode.txt"), "w") as f:
        f.write(buf.getvalue())
    hooks.fire("frame_compiled", fn, entry, index, folder)
