"""kiln's marks on user code: `graph_break()`, `allow_in_graph()`, and the attributes kiln sets
on functions it made."""

import functools
import inspect
import re
import types
import weakref

import torch

_ALLOWED = weakref.WeakSet()  # what allow_in_graph marked (functions, autograd.Function classes)
_DISALLOWED = {}  # id -> torch function that disallow_in_graph keeps out of graphs (a break)
_NONSTRICT = weakref.WeakSet()  # the copies nonstrict_trace made
_LEAVES = weakref.WeakSet()  # the wrappers leaf_function made


def graph_break():
    """Inside compiled code: end the graph here. Outside: does nothing."""


def skip_frame(msg=""):
    """Inside compiled code: the frame being compiled runs in Python, no graph made of it
    (Note [Markers: skip_frame and step_unsupported]). Outside: does nothing."""


def step_unsupported(msg=""):
    """Inside compiled code: end the graph here and run the rest of the frame in Python,
    uncompiled (Note [Markers: skip_frame and step_unsupported]). Outside: does nothing."""


def kiln_marker(obj, name):
    """A marker kiln set on a function it made (`_kiln_orig_fn`, `_kiln_disabled`), or None.

    Read from the function's own __dict__: objects such as `torch.ops` answer any getattr. The
    markers of a functools.wraps wrapper are only kiln's own wrappers' (Note [Markers: copied by
    functools.wraps]).
    """
    if not isinstance(obj, types.FunctionType) or _copied(obj):
        return None
    return obj.__dict__.get(name)


def torchscript_python(obj):
    """The Python function a TorchScript function (torch.jit.script / trace of one) was made
    from, or None: compiled as it, as torch.compile does (the TorchScript program computes the
    same)."""
    if not isinstance(obj, torch._C.ScriptFunction):
        return None
    python = inspect.getattr_static(obj, "_torchdynamo_inline", None)
    return python if isinstance(python, types.FunctionType) else None


# Note [Markers: copied by functools.wraps]
# functools.wraps copies the wrapped function's __dict__, kiln's markers included, into the
# wrapper: a user's `@functools.wraps(f) def outer(...)` around a kiln.disable'd (or compiled,
# or set_stance-decorated) f would look disabled (or compiled) itself, and its own code would
# never be traced. So kiln's own wrappers made by functools.wraps say they own their markers
# (`owns_markers`: their id, which a copy into another function does not match, as torch's
# `_torchdynamo_wrapper_id`), and kiln_marker / break_reason ignore the markers of a function
# that has a `__wrapped__` but is not their owner.


def owns_markers(wrapper):
    """Note that `wrapper`, made by functools.wraps, is kiln's: its markers are its own."""
    wrapper._kiln_owner = id(wrapper)
    return wrapper


def _copied(fn):
    """Whether fn's kiln markers were copied into it by functools.wraps."""
    d = fn.__dict__
    return "__wrapped__" in d and d.get("_kiln_owner") != id(fn)


def break_reason(value):
    """Why traced code calling `value` breaks the graph, for kiln's own functions and classes
    that must run in Python (their `_kiln_break_reason`), or None."""
    if not isinstance(value, (types.FunctionType, type)):
        return None
    if isinstance(value, types.FunctionType) and _copied(value):
        return None
    reason = vars(value).get("_kiln_break_reason")
    return reason if isinstance(reason, str) else None


def is_optimized_module(value):
    """Whether `value` is a compiled nn.Module (`kiln.frontend.entry.OptimizedModule`)."""
    return getattr(type(value), "_kiln_optimized_module", False) is True


def is_disabled_module(value):
    """Whether `value` is a module kiln.disable kept out of compilation (a DisabledModule, or an
    instance of a module class given to kiln.disable)."""
    return getattr(type(value), "_kiln_disabled_module", False) is True


def allow_in_graph(fn):
    """Mark a function or torch.autograd.Function class: traced code calling it records one
    opaque call in the graph (Note [allow_in_graph: one opaque call]) instead of tracing it.
    A torch function that disallow_in_graph kept out goes back into graphs."""
    if _DISALLOWED.pop(id(fn), None) is not None:
        return fn
    if not (isinstance(fn, (types.FunctionType, type))):
        raise TypeError(f"allow_in_graph expects a function or a class, got {type(fn).__name__}")
    _ALLOWED.add(fn)
    return fn


def nonstrict_trace(traceable_fn):
    """A copy of `traceable_fn` that traced code calls as one opaque call over its flattened
    arguments (Note [nonstrict_trace: one opaque call over flattened arguments]); traceable_fn
    itself is unchanged."""
    if not isinstance(traceable_fn, types.FunctionType):
        raise TypeError(f"nonstrict_trace expects a function, got {type(traceable_fn).__name__}")
    if is_leaf_function(traceable_fn):
        raise ValueError(_both_message(traceable_fn))

    @functools.wraps(traceable_fn)
    def nonstrict(*args, **kwargs):
        return traceable_fn(*args, **kwargs)

    _NONSTRICT.add(nonstrict)
    return nonstrict


def leaf_function(fn=None, *, mutates_args=None):
    """Mark `fn` as a leaf: traced code records one opaque call that runs fn's real body at run
    time, its outputs described by `@fn.register_fake` (Note [leaf_function: an opaque op run at
    run time]); `mutates_args` names the arguments (expressions such as "buf", "bufs[0]") fn
    changes in place."""
    if fn is None:
        return functools.partial(leaf_function, mutates_args=mutates_args)
    if not callable(fn):
        raise TypeError(f"leaf_function expects a function, got {type(fn).__name__}")
    if is_nonstrict(fn):
        raise ValueError(_both_message(fn))
    mutated = frozenset(mutates_args or ())
    params = set(inspect.signature(fn).parameters)
    for expr in mutated:
        root = re.split(r"[.\[]", expr, maxsplit=1)[0]
        if root not in params:
            raise ValueError(
                f"mutates_args expression '{expr}' refers to parameter '{root}', which is not a "
                f"parameter of '{fn.__name__}'. Available parameters: {', '.join(sorted(params))}"
            )

    @functools.wraps(fn)
    def leaf(*args, **kwargs):
        if leaf.leaf_fake_fn is None:
            raise ValueError(_no_fake_message(fn))
        before = [(t, t._version) for t in _tensors_in((args, kwargs))]
        result = fn(*args, **kwargs)
        changed = [t for t, version in before if t._version != version]
        if changed:
            _check_declared(fn, mutated, changed, args, kwargs)
        return result

    def register_fake(fake_fn):
        leaf.leaf_fake_fn = fake_fn
        return leaf

    leaf.leaf_real_fn = fn
    leaf.leaf_fake_fn = None
    leaf.leaf_mutates_args = mutated
    leaf.register_fake = register_fake
    _LEAVES.add(leaf)
    return leaf


def _both_message(fn):
    name = getattr(fn, "__name__", fn)
    return f"'{name}' cannot be both marked as @leaf_function and @nonstrict_trace"


def _tensors_in(value):
    """The tensors in nested lists, tuples and dicts (a leaf function's arguments)."""
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors_in(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors_in(v)]
    return [value] if hasattr(value, "_version") and hasattr(value, "untyped_storage") else []


def _check_declared(fn, mutated, changed, args, kwargs):
    """Raise when fn changed an argument in place that `mutates_args` does not name (as traced
    code only copies back the declared ones, the eager call checks it too)."""
    bound = inspect.signature(fn).bind(*args, **kwargs).arguments
    declared = set()
    for expr in mutated:
        try:
            declared.update(id(t) for t in _tensors_in([eval(expr, {}, dict(bound))]))  # noqa: S307
        except Exception:  # (an expression the traced call reports)
            continue
    undeclared = [t for t in changed if id(t) not in declared]
    if undeclared:
        raise RuntimeError(
            f"Undeclared in-place mutation in leaf_function '{fn.__name__}': it changed "
            f"{len(undeclared)} argument tensor(s) that mutates_args does not name (declare them: "
            "@leaf_function(mutates_args={...}))"
        )


def _no_fake_message(fn):
    return (
        f"leaf_function '{getattr(fn, '__name__', fn)}' requires a fake implementation. Please "
        "provide one using the @<func>.register_fake decorator."
    )


def is_leaf_function(fn):
    """Whether leaf_function made `fn`."""
    try:
        return fn in _LEAVES
    except TypeError:  # (not weak-referenceable, or unhashable)
        return False


def is_nonstrict(fn):
    """Whether nonstrict_trace made `fn`."""
    try:
        return fn in _NONSTRICT
    except TypeError:  # (not weak-referenceable, or unhashable)
        return False


def is_allowed_in_graph(fn):
    """Whether allow_in_graph marked `fn`."""
    try:
        return fn in _ALLOWED
    except TypeError:  # (not weak-referenceable, or unhashable)
        return False


def forget_allowed(fn):
    """Undo allow_in_graph on `fn`; whether it was marked."""
    if not is_allowed_in_graph(fn):
        return False
    _ALLOWED.discard(fn)
    return True


def disallow(fn):
    """Keep the torch function `fn` out of graphs: traced code calling it breaks the graph."""
    _DISALLOWED[id(fn)] = fn


def is_disallowed_in_graph(fn):
    """Whether disallow_in_graph keeps `fn` out of graphs."""
    return _DISALLOWED.get(id(fn)) is fn
