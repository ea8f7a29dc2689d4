"""Stores that may drop the last reference to an object whose class has a Python __del__.

Note [Finalizers: a store that may run __del__]
In Python a store that drops the last reference to an object runs its class's __del__ right
there, inside the store: `d[k] = None` over an object whose __del__ clears `d` makes the loop
that iterates `d` raise at its next step. kiln replays the stores of objects from outside the
frame after the graph (side_effects), so the finalizer would run later, after code that Python
runs after it. The trace cannot know whether a reference is the last one (a refcount is not a
guardable fact), so a store that drops a value whose class (looked up on the type, not the
instance) defines __del__ in Python breaks the graph before the store: the store and everything
after it run in Python, in Python's order. The values dropped are the old item or attribute, the
items removed by clear/pop/popitem/remove/del, those a full deque pushes out, and, a few levels
into containers, their items (a list of such objects dropped whole). Stores: dict/OrderedDict/
defaultdict and list/deque items, attributes (assignment and deletion), free variables and
globals. Objects without a Python __del__ never break; C types' finalizers (files, generators)
are not looked at, nor are sets. A store that cannot be a break site (DELETE_ATTR, STORE_DEREF of
the frame's own cell) makes the frame run in Python.

A call that broke and whose result a POP_TOP discards (`d.pop(k)` as a statement) drops it in the
transformed code, as Python does, not in the resume function's frame. A value consumed by another
instruction after a break (`d.pop(k).name`) lives on the stack of the resume function's frame
until that frame ends or breaks: its __del__ may run later than Python's (not modelled).

Note [Finalizers: locals]
A frame's local can hold the last reference too: `v = d.pop(k)` after a break leaves the resume
function's frame alone holding the value (Note [Resume: arguments moved, not held]), and
`v = None` runs its __del__. Rebinding (or deleting) a local of the root frame breaks before the
store (STORE_FAST and DELETE_FAST are break sites: Python runs the store, the resume function
gets the new value) when its old value has a Python __del__ and may be held by the frame alone:
the frame's argument, an item reached from one (of a tuple argument), or a container made while
tracing holding one; and no other local, nor the argument it was read from, holds it (so
`for x in xs` over a list argument is traced). A value read from an input container or attribute
is held there (a store that drops it from there breaks first). The trace's own references to the
frame's values are let go of when the frame is compiled (FrameCache.compile: the translator's
state, the break's state and traceback, the iterator steps of the last instruction), not at the
next collection. One difference stays: a dict items iterator reuses its result tuple, so in
Python an item can live in the iterator until a later step; the rebuilt iterator (Note [Dicts:
iterators at a break]) reuses its tuple on its own schedule, and such a __del__ may run a step
earlier or later than Python's.

Note [Finalizers: objects made in the frame]
An object the trace makes lives only in the trace until a break or the graph's end rebuilds it;
one nothing holds then is never made at all, so its class's __del__ would never run (CPython's
check_free_after_iterating: `it = iter(A()); next(it)` frees the A and runs its __del__ at the
StopIteration). Calling a class whose MRO defines a Python __del__ breaks the graph before the
call (user_defined.py): Python makes the object, and it reaches the rest of the frame as a value
from outside, whose lifetime Python's own references decide.

Note [Finalizers: values on a resume's stack]
The object a broken call returned reaches the resume function on its stack (`Noted(...).name`:
the call broke, the attribute read is traced); Python drops it at the instruction that consumes
it, so its __del__ runs before the rest of the expression. The resume function's prologue moves
each such `__stackN` value that may run a Python __del__ onto the translator's list; after each
root instruction, one that the stack and the locals no longer reach (through containers and the
objects that hold it, a few levels deep) was dropped by that instruction, which then becomes a
break: Python runs it and the __del__ with it. A value the trace stored elsewhere (an attribute of
an outside object) counts as dropped too: a break more, never a __del__ out of place.
"""

from kiln.exc import unimplemented
from kiln.frontend.source import LocalSource, finalizer_class
from kiln.frontend.variables.base import VariableTracker
from kiln.frontend.variables.misc import DeletedVariable

_NO_VALUE = object()
_DEPTH = 3  # how far into traced containers (lists of lists, dicts of lists) to look


def _value_finalized(value, depth):
    """finalizer_class of a real object, or of an item of a real tuple or list it is."""
    cls = finalizer_class(type(value))
    if cls is None and depth and type(value) in (tuple, list):
        for item in value:
            cls = _value_finalized(item, depth - 1)
            if cls is not None:
                break
    return cls


def _finalized(var, depth=_DEPTH, frame_only=False):
    """The class with a Python __del__ of the object `var` tracks (or of an item of a container
    it is), or None. frame_only: only values no source outside the frame holds, one the frame
    got as an argument or reached from one (an item of a tuple argument), or a container made
    while tracing holding such values (a value read from elsewhere is held there: a store
    dropping it there breaks first)."""
    source = getattr(var, "source", None)
    if frame_only and source is not None and not isinstance(source.base(), LocalSource):
        return None
    state = getattr(var, "__dict__", None)
    if state is None:
        return None
    if "value" not in state:  # (a list/dict/set subclass instance traced as its items)
        try:
            cls = finalizer_class(var.python_type())
        except Exception:  # (a variable with no single Python type)
            cls = None
        if cls is not None:
            return cls
    value = state.get("value", _NO_VALUE)
    if value is not _NO_VALUE:
        return _value_finalized(value, depth)
    items = state.get("items")
    if depth and isinstance(items, dict | list):
        for item in items.values() if isinstance(items, dict) else items:
            cls = _finalized(item, depth - 1, frame_only)
            if cls is not None:
                return cls
    return None


def check_drops(dropped, what):
    """Break before a store that drops the values `dropped` (VariableTrackers) when one of them
    may run a Python __del__ (Note [Finalizers: a store that may run __del__])."""
    for var in dropped:
        if var is None:
            continue
        _break(_finalized(var), what)


def old_items(items, index):
    """The items `items[index] = ...` replaces (an int or a slice), [] for a bad index."""
    try:
        return items[index] if isinstance(index, slice) else [items[index]]
    except (TypeError, IndexError):
        return []  # (the store raises what Python raises)


def check_drop_value(value, what):
    """check_drops for a real object (an attribute's or a cell's current value)."""
    _break(_value_finalized(value, _DEPTH), what)


def frame_finalized(var):
    """Whether the frame may hold the last reference to a Python __del__ through `var`."""
    return _finalized(var, frame_only=True) is not None


def check_iterated(var, what):
    """Break before making an iterator over an object the frame alone may hold whose class has
    a Python __del__: Python's iterator holds it until it ends (or longer: 3.13's reversed list
    iterator), a snapshot of its items would not (Note [Finalizers: objects made in the frame])."""
    _break(
        _finalized(var, depth=0, frame_only=True), f"{what} over an object that", "as it drops it"
    )


def check_local_drop(var, name):
    """Break before rebinding (or deleting) the root frame's local `name` whose value may be
    held by the frame alone and run a Python __del__ when dropped (Note [Finalizers: locals])."""
    _break(_finalized(var, frame_only=True), f"rebinding the local {name!r}")


LOCAL_STORES = ("STORE_FAST", "DELETE_FAST")  # breakable local stores (3.13's pairs are not)


def after_local_store(frame_locals, inst, live):
    """The live locals once Python ran a break's STORE_FAST/DELETE_FAST: the resume function
    gets the frame's own local (the value just stored), or none (Note [Finalizers: locals])."""
    name = inst.argval
    if inst.opname == "DELETE_FAST":
        frame_locals[name] = DeletedVariable()
        return [n for n in live if n != name]
    frame_locals[name] = VariableTracker(source=LocalSource(name))
    return sorted({*live, name})


def _break(cls, what, where="at the store"):
    if cls is not None:
        name = cls.__qualname__
        unimplemented(f"{what} may run {name}.__del__ (Python runs it {where})")


def check_stack_drops(tx):
    """Break at the instruction that dropped a value from a resume function's stack that may
    run a Python __del__ (Note [Finalizers: values on a resume's stack])."""
    held = [*tx.stack, *tx.symbolic_locals.values()]
    for var in tx.finalized_on_stack:
        if not any(_reaches(v, var, _DEPTH + 1) for v in held):
            _break(_finalized(var), "dropping a value a broken call returned", "there")


def _reaches(holder, var, depth):
    """Whether `holder` (a VariableTracker, or a list/tuple/dict of them) is or holds `var`."""
    if holder is var:
        return True
    if depth == 0:
        return False
    if isinstance(holder, dict):
        holder = list(holder.values())
    elif isinstance(holder, VariableTracker):
        holder = list(getattr(holder, "__dict__", {}).values())
    elif not isinstance(holder, list | tuple):
        return False
    return any(_reaches(h, var, depth - 1) for h in holder)
