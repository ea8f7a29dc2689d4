"""weakref.WeakKeyDictionary from outside the frame: reads by an object key, guarded.

Note [Dicts: weak-key dictionaries]
`obj in d`, `d[obj]` and `d.get(obj[, default])` of a WeakKeyDictionary (the class itself, not a
subclass) reached from a source are read while tracing: Python's methods look the key up as
`d.data[weakref.ref(obj)]`, and a weak reference hashes and compares as its referent. So the
key must be an object read from a source whose hash and == are object's (no user code runs),
and the item is guarded through `___weak_key_get(d, obj)` (source.WeakKeyGetSource), which does
that lookup with the object the frame is given: a changed item, a removed key or an added one
fails the guard like a changed value. Other uses (writes, iteration, len) run the class's
Python code as for any object.
"""

import weakref

from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.source import MISSING, WeakKeyGetSource, weak_key_get
from kiln.frontend.variables.base import BoundMethodVariable, wrap_value
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.user_defined import UserDefinedObjectVariable

_READS = ("__contains__", "__getitem__", "get")


def wrap_input(tx, value, source):
    """A WeakKeyDictionary reached from `source`, or None for another value."""
    if type(value) is not weakref.WeakKeyDictionary:
        return None
    tx.output.guards.add(GuardKind.TYPE_MATCH, source, type(value))
    return WeakKeyDictVariable(value, source=source)


def _plain_key(var):
    """The real object of a key variable read from a source whose hash and == are object's."""
    key = getattr(var, "value", None)
    if var.source is None or key is None:
        return None
    cls = type(key)
    if cls.__hash__ is not object.__hash__ or cls.__eq__ is not object.__eq__:
        return None
    return key


class WeakKeyDictVariable(UserDefinedObjectVariable):
    """A weakref.WeakKeyDictionary from a source (Note [Dicts: weak-key dictionaries])."""

    def var_getattr(self, tx, name):
        if name in _READS:
            return BoundMethodVariable(self, name)
        return super().var_getattr(tx, name)

    def call_method(self, tx, name, args, kwargs):
        if name not in _READS or kwargs:
            return super().call_method(tx, name, args, kwargs)
        if not args or len(args) > (2 if name == "get" else 1):
            unimplemented(f"WeakKeyDictionary.{name} with {len(args)} arguments")
        key = _plain_key(args[0])
        if key is None:
            unimplemented(f"WeakKeyDictionary.{name} with the key {args[0]} (not an object)")
        source = WeakKeyGetSource(self.source, args[0].source)
        value = weak_key_get(self.value, key)
        if value is MISSING:
            tx.output.guards.add(GuardKind.ID_MATCH, source, MISSING)
            if name == "__contains__":
                return ConstantVariable(False)
            if name == "get":
                return args[1] if len(args) > 1 else ConstantVariable(None)
            unimplemented("KeyError: the key is not in the WeakKeyDictionary")
        if name == "__contains__":
            tx.output.guards.add(GuardKind.TYPE_MATCH, source, type(value))  # present
            return ConstantVariable(True)
        return wrap_value(tx, value, source)
