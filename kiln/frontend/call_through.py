"""Frames kiln runs in Python, with their calls going through kiln's frame entry.

Note [Frames: callees of a frame run in Python]
TorchDynamo's C frame hook sees every Python frame that starts while compiled code runs, so a
frame it gives up on (a whole-frame break, the cache limit) still has its callees compiled: a
training step with one unsupported line still gets its model's forward compiled. kiln has no
frame hook (DESIGN.md, "How frames are captured without a C hook"). A frame kiln gives up on
runs a copy of its code instead (`routed_code`) in which each call's callable first goes
through `route`, which gives back the kiln-compiled wrapper of a user function (a function, a
method bound to one, a module with a user forward) and anything else unchanged. Everything else
is the frame's own code: the same locals, lines, jumps and exception table.

The copy finds each call's callable by the call protocol (Note [Bytecode: version differences]):
3.13 keeps it below the NULL-or-self slot, at a fixed depth. 3.11/3.12 put `NULL, callable` or
`method, self` below the arguments, and only a method load decides which at run time, so the
copy first turns each method load into an attribute load and a NULL (the same call, made with a
bound method); after that the stack kinds of kiln.bytecode.analysis say, at every call, whether
the slot under the callable is a NULL. A `with` block's exit call (`__exit__` pushed by
BEFORE_WITH, then `None, None, None`) has its callable in the lower slot.

What is routed is what kiln would compile as a frame of its own: Python functions that are not
generators or coroutines (also as methods, a module's forward, an object's `__call__`), from neither the skipped packages (config.skip_modules) nor the
standard library, nor kiln's own wrappers. A function made in a frame (a qualified name with
`<locals>`) is compiled by its code object (Note [Cache: closures made per call]), so that each
call's new function object does not compile again; one with defaults is left alone.

What it costs: a routed callee is called through kiln's wrapper, so a traceback through it shows
the wrapper's frame (and on a first call kiln's compile frames) between the caller's and the
callee's, where Dynamo's hook leaves none; a callee that reads its caller's frame
(`sys._getframe`, `inspect.currentframe`) is called as it is. `config.route_calls_of_eager_frames
= False` runs such frames exactly as written.

Note [Frames: routing near the recursion limit]
`route` runs before every call of such a frame, as one Python frame of its own. A program that
sets the recursion limit just above its current depth (CPython's own tests do: the smallest limit
`sys.setrecursionlimit` accepts, then a call) has room for that frame, but not for one more: so
`route` calls no Python function (no generator expression, no helper) on the way to a builtin.
"""

from __future__ import annotations

import inspect
import os
import sysconfig
import types

import torch

from kiln import config
from kiln.bytecode.analysis import NULL, VALUE, WITH_EXIT, frame_states
from kiln.bytecode.codec import decode, encode
from kiln.bytecode.edit import insert_after, insert_before
from kiln.bytecode.emit import call, load_const, pop_top, push_null, swap
from kiln.bytecode.emit import copy as copy_inst
from kiln.bytecode.inst import PY311, PY313_PLUS
from kiln.frontend.markers import is_optimized_module, kiln_marker
from kiln.frontend.variables.functions import is_torch_disabled

_NOT_PLAIN = (
    inspect.CO_GENERATOR
    | inspect.CO_COROUTINE
    | inspect.CO_ASYNC_GENERATOR
    | inspect.CO_ITERABLE_COROUTINE
)
_KILN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# callables that are never routed, answered without a further frame
_NOT_ROUTED = frozenset(
    {
        types.BuiltinFunctionType,
        types.MethodDescriptorType,
        types.WrapperDescriptorType,
        types.MethodWrapperType,
        types.ClassMethodDescriptorType,
    }
)
_STDLIB_DIRS = tuple(
    {os.path.abspath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "platstdlib")}
)


def routed_code(code: types.CodeType, route) -> types.CodeType:
    """A copy of `code` whose calls pass their callable through `route` first."""
    insts = decode(code)
    for inst in list(insts):
        _as_attribute_load(insts, inst)
    states = frame_states(insts, (), code.co_flags)
    sites = []
    for n, inst in enumerate(insts):
        depth = _callable_depth(inst, states[n])
        if depth is not None:
            anchor = insts[n - 1] if n and insts[n - 1].opname == "KW_NAMES" else inst
            sites.append((anchor, depth))
    for anchor, depth in sites:
        insert_before(insts, anchor, _route_at(route, depth))
    return encode(insts, like=code)


def _as_attribute_load(insts, inst):
    """A method load (method, self or NULL, attribute) made an attribute load and a NULL."""
    op = inst.opname
    if op == "LOAD_METHOD":  # 3.11
        inst.opname, inst.arg = "LOAD_ATTR", None
    elif op in ("LOAD_ATTR", "LOAD_SUPER_ATTR") and not PY311 and inst.arg and inst.arg & 1:
        inst.arg &= ~1
    else:
        return
    inst.argrepr = inst.argval if isinstance(inst.argval, str) else inst.argrepr
    insert_after(insts, inst, push_null() if PY313_PLUS else push_null() + swap(2))


def _callable_depth(inst, state):
    """How deep below the top the callable of a call instruction is (1 is the top), or None."""
    if state is None:
        return None
    op, arg = inst.opname, inst.arg or 0
    if op == "CALL_FUNCTION_EX":
        return (3 if PY313_PLUS else 2) + (arg & 1)
    if PY313_PLUS:
        return {"CALL": arg + 2, "CALL_KW": arg + 3}.get(op)
    if op != ("PRECALL" if PY311 else "CALL"):
        return None
    below = state.stack[-arg - 2]  # NULL, callable or method, self: which one calls
    if below == NULL:
        return arg + 1
    if below in (VALUE, WITH_EXIT):
        return arg + 2
    return None  # (a NULL-or-method slot: left as it is)


def _route_at(route, depth):
    """Replace the item `depth` deep by route(item)."""
    if PY313_PLUS:  # route, NULL, item
        make_call = load_const(route) + swap(2) + push_null() + swap(2)
    else:  # NULL, route, item
        make_call = push_null() + swap(2) + load_const(route) + swap(2)
    return copy_inst(depth) + make_call + call(1) + swap(depth + 1) + pop_top()


def is_plain(code) -> bool:
    """Whether a code object is a plain function's (not a generator's or a coroutine's)."""
    return not code.co_flags & _NOT_PLAIN


def routable(fn) -> bool:
    """Whether a Python function is one kiln compiles as its own frame when it is called."""
    if type(fn) is not types.FunctionType or "_kiln_cache" in fn.__dict__:
        return False
    code = fn.__code__
    if not is_plain(code):
        return False
    module = fn.__module__ or ""
    if any(module == m or module.startswith(m + ".") for m in config.skip_modules):
        return False
    path = os.path.abspath(code.co_filename)
    if path.startswith(_KILN_DIR):
        return False
    if path.startswith(_STDLIB_DIRS) and "site-packages" not in path:
        return False
    return not (kiln_marker(fn, "_kiln_disabled") or is_torch_disabled(fn))


class Router:
    """`route(obj)` for the frames of one compile: user callables made kiln-compiled frames."""

    def __init__(self, cache):
        self.cache = cache  # the FrameCache whose frame runs in Python (its root's children)

    def __call__(self, obj):
        tp = type(obj)
        if tp is types.FunctionType:
            return self.function(obj)
        if tp is types.MethodType:
            fn = obj.__func__
            compiled = self.function(fn)
            return obj if compiled is fn else types.MethodType(compiled, obj.__self__)
        if issubclass(tp, torch.nn.Module):
            if not is_optimized_module(obj) and routable(getattr(tp, "forward", None)):
                return self.cache.compiled_module(obj)
            return obj
        if tp in _NOT_ROUTED or issubclass(tp, type):
            return obj
        # an object with a Python __call__: a loop, not a generator, so that routing a call
        # adds no frame beyond this one (Note [Frames: routing near the recursion limit])
        for k in tp.__mro__:
            if "__call__" in k.__dict__:
                call = k.__dict__["__call__"]
                if routable(call):
                    return types.MethodType(self.function(call), obj)
                break
        return obj

    def function(self, fn):
        if not routable(fn):
            return fn
        if "<locals>" not in fn.__qualname__:
            return self.cache._callee(fn)
        if fn.__defaults__ or fn.__kwdefaults__:
            return fn  # (made per call, with values kiln's code-keyed entry would not pass)
        return self.cache.closure_callee(fn)


# names of the caller-frame readers (sys._getframe, inspect.currentframe().f_back): a function
# that uses one is called as it is, never through a kiln wrapper (which would be its caller)
_FRAME_READERS = {"_getframe", "_getframemodulename", "currentframe"}


def reads_caller_frame(fn):
    """Whether fn, or a Python function its code names in its globals (typing.NamedTuple's
    `_caller()`), calls a frame reader (`sys._getframe(depth + 1)` reaches fn's caller)."""
    code = getattr(fn, "__code__", None)
    names = getattr(code, "co_names", ())
    if _FRAME_READERS.intersection(names):
        return True
    f_globals = getattr(fn, "__globals__", {})
    for name in names:
        helper = f_globals.get(name)
        helper_code = getattr(helper, "__code__", None) if inspect.isfunction(helper) else None
        if helper_code is not None and _FRAME_READERS.intersection(helper_code.co_names):
            return True
    return False
