"""Reads of the items of a dict-subclass instance from outside the frame.

Note [Dicts: subclass instances from outside the frame]
An instance of a user subclass of dict or OrderedDict reached from a source (`class
ClassInstantier(OrderedDict): pass`, an attribute-dict config) is a user object: its Python
methods are inlined, its attributes read as any object's. The methods it keeps from the C class
(`d.get(k)`, `k in d`, `d[k]`, `len(d)`, `d.keys()`, iteration, `bool(d)`) read its items: those
run on the items wrapped at the first such call, its keys guarded in the order dict stores
them (`dict.keys(d)`: a dict subclass's own `__iter__` is inlined where the code iterates, never
run by the guard; an OrderedDict subclass's must be the C one, whose order list the guard
reads) and each value read through `dict.get` (the class's own `__getitem__` bypassed, as the C
methods do). The C writers (`d[k] = v`, `pop`,
`update` ...) change those items, replayed after the graph as any input dict's are, by item
stores and deletes (or clear and update): only for a class that keeps dict's own methods for
those. A missing key of a class with `__missing__` breaks.
"""

import collections

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.source import DictGetSource
from kiln.frontend.variables.base import VariableTracker, wrap_value
from kiln.frontend.variables.constant import ConstantVariable, is_literal
from kiln.frontend.variables.dicts import ConstDictVariable, check_fromkeys_count, check_iterable

_C_DICTS = (dict, collections.OrderedDict)
_READS = ("__getitem__", "get", "__contains__", "__len__", "keys", "values", "items", "__iter__")
_WRITES = ("__setitem__", "__delitem__", "pop", "popitem", "setdefault", "update", "clear")
_REPLAY = ("__setitem__", "__delitem__", "clear", "update")  # what the replay calls


def c_owner(cls, name):
    """The C dict class whose `name` instances of `cls` use, or None (a Python override)."""
    for k in cls.__mro__:
        if name in vars(k):
            return k if k in _C_DICTS else None
    return None


def storage_of(tx, obj):
    """The items of `obj` (a user object variable whose value is a dict-subclass instance) as a
    ConstDictVariable (one per object, Note [Side effects: one variable per mutable
    container]), or None when they are not modelled."""
    value, cls = obj.value, type(obj.value)
    base = next((k for k in cls.__mro__ if k in _C_DICTS), None)
    c_iter = c_owner(cls, "__iter__") is not None
    if obj.source is None or base is None or not (c_iter or base is dict):
        return None  # (an OrderedDict's order is its own list: read through its __iter__)
    effects = tx.output.side_effects
    known = effects.tracked_container(tx, value, obj.source)
    if known is not None:
        # (a defaultdict the builder keeps opaque is tracked as that very object: no items)
        return known if isinstance(known, ConstDictVariable) else None
    keys = list(dict.keys(value))
    if not all(is_literal(k) for k in keys) or (c_iter and list(value) != keys):
        return None
    tx.output.guards.add(GuardKind.DICT_KEYS, obj.source, (cls, tuple(keys)))
    items = {k: wrap_value(tx, dict.get(value, k), DictGetSource(obj.source, k)) for k in keys}
    storage = ConstDictVariable(items, user_cls=base, source=obj.source)
    storage.initial_keys = tuple(keys)  # Note [Side effects: dicts replayed key by key]
    storage.initial_items = dict(items)
    return effects.track_container(value, storage)


def read_method(tx, obj, name):
    """`obj.name` for a C method of a dict-subclass instance that reads or writes its items,
    or None."""
    cls = type(obj.value)
    if name not in _READS + _WRITES or c_owner(cls, name) is None:
        return None
    if name in _WRITES and not all(c_owner(cls, m) for m in _REPLAY):
        return None  # (the replay would run the class's own methods)
    if storage_of(tx, obj) is None:
        return None
    return StorageReadVariable(obj, name)


def storage_truthy(tx, obj):
    """bool(obj) when its class keeps the C __bool__/__len__, else None."""
    cls = type(obj.value)
    if "__bool__" in dir(cls) or c_owner(cls, "__len__") is None:
        return None
    storage = storage_of(tx, obj)
    return None if storage is None else bool(storage.items)


class StorageReadVariable(VariableTracker):
    """A C read or write method of a dict-subclass instance from outside the frame (Note [Dicts:
    subclass instances from outside the frame])."""

    def __init__(self, obj, name, **kw):
        super().__init__(**kw)
        self.obj = obj
        self.name = name

    def var_getattr(self, tx, name):
        if name in ("__name__", "__qualname__"):
            return ConstantVariable(self.name)
        return super().var_getattr(tx, name)

    def call_function(self, tx, args, kwargs):
        storage = storage_of(tx, self.obj)
        if self.name == "__getitem__" and len(args) == 1 and args[0].is_python_constant():
            missing = args[0].as_python_constant() not in storage.items
            if missing and hasattr(type(self.obj.value), "__missing__"):
                unimplemented(f"missing key of a {type(self.obj.value).__name__} (__missing__)")
        return storage.call_method(tx, self.name, args, kwargs)

    def reconstruct(self, cg):
        cg.reconstruct(self.obj)
        cg.extend(emit.load_attr(self.name))


# Note [Dicts: operators of subclass instances made in the frame]
# An instance of a dict subclass made while tracing holds its items symbolically
# (NewObjectVariable.dict_items). The C dict's operator methods run on them as on any dict:
# `__or__` (and `__ror__`) make a plain dict, `__ior__` updates the items and returns the object
# itself, `__eq__`/`__ne__` compare the items with another dict's (NotImplemented for anything
# else).
_OPERATORS = ("__or__", "__ror__", "__ior__", "__eq__", "__ne__")


def items_of(var):
    """The items of a traced dict or dict-subclass instance as a ConstDictVariable, or None."""
    if isinstance(var, ConstDictVariable):
        return var
    items = getattr(var, "dict_items", None)
    if isinstance(items, dict):
        return ConstDictVariable(items)
    return None


def operator_method(tx, obj, name, args, kwargs):
    """dict's operator method `name` on a dict-subclass instance made while tracing (Note
    [Dicts: operators of subclass instances made in the frame]), or None."""
    if name not in _OPERATORS or len(args) != 1 or kwargs:
        return None
    mine, other = ConstDictVariable(obj.dict_items), args[0]
    if name == "__ior__":
        tx.output.side_effects.mutate_new_object(obj)
        mine._mutate = lambda tx, *_: None
        mine.call_method(tx, "update", [items_of(other) or other], {})
        obj.dict_items = mine.items
        return obj
    theirs = items_of(other)
    if theirs is None:
        return ConstantVariable(NotImplemented)
    return mine.call_method(tx, name, [theirs], {})


class SubclassFromKeysVariable(VariableTracker):
    """`Sub.fromkeys(keys, value)` of a dict subclass that keeps dict's classmethod: `Sub()`,
    then `obj[key] = value` for each key (through the class's own __setitem__, as CPython's
    PyObject_SetItem does)."""

    def __init__(self, class_var, **kw):
        super().__init__(**kw)
        self.class_var = class_var

    def var_getattr(self, tx, name):
        if name in ("__name__", "__qualname__"):
            return ConstantVariable(getattr(self.class_var.value.fromkeys, name))
        return super().var_getattr(tx, name)

    def call_function(self, tx, args, kwargs):
        check_fromkeys_count(tx, args, kwargs)
        if kwargs:
            unimplemented("dict.fromkeys with keyword arguments")
        obj = self.class_var.call_function(tx, [], {})  # (made before the keys are iterated)
        check_iterable(tx, args[0])
        value = args[1] if len(args) == 2 else ConstantVariable(None)
        for key in args[0].unpack_var_sequence(tx):
            obj.call_method(tx, "__setitem__", [key, value], {})
        return obj


def subclass_fromkeys(class_var):
    """`Sub.fromkeys` of a user dict subclass that keeps dict's (or OrderedDict's), or None."""
    cls = class_var.value
    if not (isinstance(cls, type) and issubclass(cls, dict)) or cls in _C_DICTS:
        return None
    if c_owner(cls, "fromkeys") is None:
        return None
    return SubclassFromKeysVariable(class_var)
