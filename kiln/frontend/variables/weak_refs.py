"""`weakref.ref(x)` made while tracing, of a value the caller holds (Note [Weak refs: made]), and
weakref.proxy inputs (Note [Objects: weakref.proxy])."""

import types
import weakref

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.source import LocalSource, ProxyReferentSource, proxy_referent
from kiln.frontend.variables.base import VariableTracker
from kiln.frontend.variables.optim import _dropped_by_frame, root_translator
from kiln.frontend.variables.tensor import TensorVariable
from kiln.frontend.variables.user_defined import INSTANCE_MAKERS, UserDefinedObjectVariable

# Note [Weak refs: made]
# `r = weakref.ref(x)` in a compiled frame, for an argument x of the frame (a tensor or an object
# the caller passed): calling r gives x back, as eager's does while x is alive, and the frame does
# not let go of it (the check of Note [Optimizers: weak references] breaks otherwise). A reference
# that leaves the frame (returned, stored on an object) is made again by the transformed code,
# `weakref.ref(x)`: without a callback that is the one reference x has, eager's. A reference to a
# tensor made in the frame is made the same way (from the tensor the graph gives back: alive
# after the frame exactly when eager's referent is), but calling it in the frame is a break (its
# life there depends on reference counts eager has and a trace does not). Anything else (other
# values made in the frame, a callback, weakref subclasses) stays a break.


class NewWeakRefVariable(VariableTracker):
    """A `weakref.ref` of a frame argument, made while tracing."""

    # rebuilt by reading its referent, so at a break before the instruction (Note [Graph breaks:
    # values read before the instruction]): the frame may have let go of the referent by then,
    # and a `weakref.ref(x)` made after the instruction would hold x alive through it
    rebuilt_from_referent = True

    def __init__(self, referent, made_in_frame=False, **kw):
        super().__init__(**kw)
        self.referent = referent
        self.made_in_frame = made_in_frame  # a tensor the frame made (not called while tracing)

    def python_type(self):
        return weakref.ReferenceType

    def call_function(self, tx, args, kwargs):
        if args or kwargs:
            unimplemented("a weak reference called with arguments")
        if self.made_in_frame:
            unimplemented("calling a weak reference to a tensor made in the frame (alive or not)")
        real = _argument_value(tx, self.referent)
        if real is None or _dropped_by_frame(tx, real):
            unimplemented("calling a weak reference to an object the frame let go of")
        return self.referent

    def reconstruct(self, cg):
        """`weakref.ref(x)` again: a reference without a callback is one object per referent,
        so this is the object eager made (the frame holds x, so it is alive)."""
        if _python_type(self.referent) is types.MethodType:
            # (a bound method argument may reach later code as a method object built again: a
            # reference made here would not be to the object eager's points to)
            unimplemented("a weak reference to a bound method leaves the frame (not rebuilt)")
        cg.load_object(weakref.ref, push_null=True)
        cg.reconstruct(self.referent)
        cg.extend(emit.call(1))


def _python_type(var):
    try:
        return var.python_type()
    except Exception:
        return None


def _argument_value(tx, var):
    """The real argument of the root frame that `var` stands for, else None."""
    source = getattr(var, "source", None)
    if not isinstance(source, LocalSource):
        return None
    return getattr(root_translator(tx), "arg_values", {}).get(source.local_name)


def make_weak_ref(tx, cls_var, args, kwargs):
    """`weakref.ref(x)` of a frame argument (or None: another maker, or a break)."""
    if cls_var.value is not weakref.ref or kwargs or len(args) != 1:
        return None
    real = _argument_value(tx, args[0])
    if real is None and isinstance(args[0], TensorVariable) and args[0].source is None:
        return NewWeakRefVariable(args[0], made_in_frame=True)
    if real is None:
        unimplemented("weakref.ref of a value that is not an argument of the frame")
    if not type(real).__weakrefoffset__:  # (eager raises TypeError: no weak references)
        unimplemented(f"weakref.ref of a {type(real).__name__} object, which takes none")
    return NewWeakRefVariable(args[0])


INSTANCE_MAKERS.append(make_weak_ref)


# Note [Objects: weakref.proxy]
# A `weakref.proxy(obj)` input forwards attribute reads to its referent, so `proxy.name` is
# `obj.name`: read through the referent's own variable (`___proxy_referent(p)`, its `__init__`
# read through the proxy and bound to it), so the frame's pending stores to obj are seen and the
# reads are guarded as obj's (a dead referent fails the guard). Only attribute reads and method
# calls go through; anything else with the proxy itself (identity, isinstance, arithmetic, a
# proxy of an object with its own __getattribute__ or __init__ lookup) is a break. Where it
# leaves the frame, the proxy is reloaded from its source.
class WeakProxyVariable(VariableTracker):
    """A weakref.proxy from outside the frame: attribute reads are its referent's."""

    def __init__(self, referent, **kw):
        super().__init__(**kw)
        self.referent = referent

    def python_type(self):
        # (type() says ProxyType, isinstance() also asks __class__: neither is modelled)
        unimplemented("the type of a weakref.proxy (type() and isinstance() differ on it)")

    def var_getattr(self, tx, name):
        return self.referent.var_getattr(tx, name)

    def call_method(self, tx, name, args, kwargs):
        if name.startswith("__"):
            unimplemented(f"{name} of a weakref.proxy")
        return self.referent.var_getattr(tx, name).call_function(tx, args, kwargs)

    def reconstruct(self, cg):
        self.source.reconstruct(cg)

    def __repr__(self):
        return f"WeakProxyVariable({self.referent!r})"


def wrap_proxy(tx, value, source, wrap_value):
    """The variable of a weakref.proxy input (Note [Objects: weakref.proxy])."""
    if source is None:
        unimplemented("a weakref.proxy without a source")
    try:
        referent = proxy_referent(value)
    except (ReferenceError, AttributeError):
        unimplemented("a weakref.proxy whose referent is dead or unreadable")
    cls = type(referent)
    if (
        value.__class__ is not cls
        or cls.__getattribute__ is not object.__getattribute__
        or hasattr(cls, "__getattr__")
    ):
        unimplemented(f"a weakref.proxy of a {cls.__name__} (its own attribute lookup)")
    tx.output.guards.add(GuardKind.TYPE_MATCH, source, type(value))
    inner = wrap_value(tx, referent, ProxyReferentSource(source))
    if type(inner) is not UserDefinedObjectVariable:
        unimplemented(f"a weakref.proxy of a {cls.__name__}")
    return WeakProxyVariable(inner, source=source)
