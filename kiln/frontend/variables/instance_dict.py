"""`obj.__dict__` of a user object from outside the frame: a live view of its attributes.

Note [Objects: the instance __dict__ as a view]
`obj.__dict__` is the object's attribute store itself, not a copy: `"a" in obj.__dict__` sees an
`obj.a = 1` made earlier in the frame, and `obj.__dict__["a"] = 1` is an attribute write that
`obj.a` reads back. The variable holds the object's variable and answers each question from the
real dict as it was on entry (its keys guarded, in order; a value read through
`obj.__dict__[key]`, so a property of the same name is not run) with the stores made while
tracing laid over it: a changed key keeps its place, a new one comes after the others in the
order it was first stored. A write through the view is recorded as the attribute store
`object.__setattr__(obj, key, v)` would make, and replayed as such; a key behind a data
descriptor (a property backed by the dict) is stored into the dict itself, replayed as
`obj.__dict__[key] = v`. `copy()`, `dict(obj.__dict__)` and the views of keys/values/items are
made from the state at the time of the call. `del obj.name` of an instance attribute is recorded
as a deletion (replayed as `del obj.name`): the key leaves the view, a read of the attribute
raises AttributeError when the class has no such attribute either (else breaks), and storing it
again breaks (eager would move it to the end). Deleting through the view, and objects whose dict
is not a plain dict of str keys, break.
"""

import types

from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.source import AttrSource, GetItemSource
from kiln.frontend.variables.base import BoundMethodVariable, VariableTracker, wrap_value
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.dicts import ConstDictVariable
from kiln.frontend.variables.exceptions import raise_observed
from kiln.frontend.variables.lists import ListIteratorVariable
from kiln.frontend.variables.user_attrs import instance_static

_READS = ("__getitem__", "get", "__contains__", "__len__", "keys", "values", "items", "copy")
_WRITES = ("__setitem__", "update", "setdefault")


def instance_dict_view(obj):
    """The view of `obj.__dict__` for a user object variable with a source, or None when its
    dict is not one kiln models (Note [Objects: the instance __dict__ as a view])."""
    d = getattr(obj.value, "__dict__", None)
    if obj.source is None or type(d) is not dict or not all(type(k) is str for k in d):
        return None
    if not isinstance(
        instance_static(type(obj.value), "__dict__", None), types.GetSetDescriptorType
    ):
        return None
    return InstanceDictVariable(obj)


def behind_descriptor(cls, name):
    """Whether `obj.name = v` on an instance of `cls` would go to a data descriptor."""
    static = instance_static(cls, name, None)
    return static is not None and hasattr(static, "__set__")


class InstanceDictVariable(VariableTracker):
    """`obj.__dict__` of a user object reached from a source (Note [Objects: the instance
    __dict__ as a view])."""

    def __init__(self, obj, **kw):
        super().__init__(source=AttrSource(obj.source, "__dict__"), **kw)
        self.obj = obj

    def python_type(self):
        return dict

    def _log_key(self, name):
        kind = "dictitem" if behind_descriptor(type(self.obj.value), name) else "attr"
        return (kind, id(self.obj.value), name)

    def _keys(self, tx):
        """The keys now, in the dict's order (the entry keys guarded)."""
        real = self.obj.value.__dict__
        tx.output.guards.add(GuardKind.DICT_KEYS, self.source, (dict, tuple(real)))
        effects = tx.output.side_effects
        stored = [
            k[2]
            for k in effects.log
            if k[0] in ("attr", "dictitem") and k[1] == id(self.obj.value) and k[2] not in real
        ]
        stored.sort(key=lambda name: effects.attr_order.get(self._log_key(name), 0))
        keys = list(real) + list(dict.fromkeys(stored))
        return [k for k in keys if not effects.is_deleted(self.obj, k)]

    def _value(self, tx, name):
        hit = tx.output.side_effects.log.get(self._log_key(name))
        if hit is not None:
            return hit[1][2]
        return wrap_value(tx, self.obj.value.__dict__[name], GetItemSource(self.source, name))

    def dict_snapshot(self, tx):
        """A new dict of the attributes now (`dict(obj.__dict__)`)."""
        return ConstDictVariable({k: self._value(tx, k) for k in self._keys(tx)})

    def truthy(self, tx):
        return bool(self._keys(tx))

    def unpack_var_sequence(self, tx):
        return [ConstantVariable(k) for k in self._keys(tx)]

    def var_getattr(self, tx, name):
        if name in _READS + _WRITES:
            return BoundMethodVariable(self, name)
        return super().var_getattr(tx, name)

    def _store(self, tx, key, value):
        if not (key.is_python_constant() and type(key.as_python_constant()) is str):
            unimplemented(f"obj.__dict__[{key}] = ... with a key that is no constant str")
        name = key.as_python_constant()
        effects = tx.output.side_effects
        if behind_descriptor(type(self.obj.value), name):
            effects.store_dict_item(self.obj, name, value)
        else:
            effects.store_attr(self.obj, name, value, raw=True)

    def call_method(self, tx, name, args, kwargs):
        if name in ("__getitem__", "get", "__contains__") and args and not kwargs:
            key = args[0]
            if not key.is_python_constant():
                unimplemented(f"obj.__dict__.{name} with the key {key}")
            k = key.as_python_constant()
            present = k in self._keys(tx)
            if name == "__contains__" and len(args) == 1:
                return ConstantVariable(present)
            if name == "__getitem__" and len(args) == 1:
                if not present:
                    raise_observed(tx, KeyError, k)
                return self._value(tx, k)
            if name == "get" and len(args) <= 2:
                if present:
                    return self._value(tx, k)
                return args[1] if len(args) == 2 else ConstantVariable(None)
        if name == "__len__" and not args and not kwargs:
            return ConstantVariable(len(self._keys(tx)))
        if name == "__iter__" and not args and not kwargs:
            return ListIteratorVariable(self.unpack_var_sequence(tx))
        if name in ("keys", "values", "items", "copy") and not args and not kwargs:
            return self.dict_snapshot(tx).call_method(tx, name, [], {})
        if name == "__setitem__" and len(args) == 2 and not kwargs:
            self._store(tx, args[0], args[1])
            return ConstantVariable(None)
        if name == "setdefault" and 1 <= len(args) <= 2 and not kwargs:
            default = args[1] if len(args) == 2 else ConstantVariable(None)
            if self.call_method(tx, "__contains__", args[:1], {}).value:
                return self._value(tx, args[0].as_python_constant())
            self._store(tx, args[0], default)
            return default
        if name == "update" and len(args) <= 1:
            other = ConstDictVariable({})
            other.call_method(tx, "update", args, kwargs)  # dict's reading of the argument
            for k, v in other.items.items():
                self._store(tx, ConstantVariable(k), v)
            return ConstantVariable(None)
        unimplemented(f"obj.__dict__.{name}")

    def reconstruct(self, cg):
        self.source.reconstruct(cg)  # the real dict, after the stores are replayed

    def __repr__(self):
        return f"InstanceDictVariable({self.obj!r})"


def delete_instance_attr(tx, obj, name):
    """`del obj.name` on a user object from outside the frame (Note [Objects: the instance
    __dict__ as a view])."""
    cls = type(obj.value)
    if cls.__delattr__ is not object.__delattr__ or obj.source is None:
        unimplemented(f"attribute deletion .{name} of a {cls.__name__} (its own __delattr__)")
    static = instance_static(cls, name, None)
    if static is not None and (hasattr(static, "__set__") or hasattr(static, "__delete__")):
        unimplemented(f"attribute deletion .{name} through the descriptor {cls.__name__}.{name}")
    view = instance_dict_view(obj)
    if view is None or name not in view._keys(tx):
        unimplemented(f"attribute deletion .{name} of an attribute the object does not have")
    tx.output.side_effects.delete_attr(obj, name)
