"""Objects made while tracing that keep dict items: dict-subclass methods, `obj.__dict__`, guarded
reads of a dict subclass given to the frame, and `os.environ` reads."""

import collections
import os

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.source import (
    MISSING,
    DictGetByKeySource,
    DictGetSource,
    MappingGetSource,
    dict_get,
    is_builtin_class,
)
from kiln.frontend.variables import dict_subclass, lists
from kiln.frontend.variables.base import BoundMethodVariable, VariableTracker, wrap_value
from kiln.frontend.variables.constant import ConstantVariable, is_literal
from kiln.frontend.variables.dicts import ConstDictVariable, hashable_key, key_and_default
from kiln.frontend.variables.lists import ListIteratorVariable, TupleVariable

_ABSENT = object()


class AttrDictVariable(VariableTracker):
    """`obj.__dict__` of an object made while tracing: reads and writes its attributes."""

    def __init__(self, obj, **kw):
        super().__init__(**kw)
        self.obj = obj

    def python_type(self):
        return dict

    def call_method(self, tx, name, args, kwargs):
        view = ConstDictVariable(self.obj.attrs)
        if name in ("__setitem__", "pop", "update", "clear", "setdefault"):
            tx.output.side_effects.mutate_new_object(self.obj)
            view._mutate = lambda tx, *_: None
            result = view.call_method(tx, name, args, kwargs)
            self.obj.attrs = view.items
            return result
        return view.call_method(tx, name, args, kwargs)

    def var_getattr(self, tx, name):
        return BoundMethodVariable(self, name)

    def unpack_var_sequence(self, tx):
        return [ConstantVariable(k) for k in self.obj.attrs]

    def reconstruct(self, cg):
        cg.reconstruct(self.obj)
        cg.extend(emit.load_attr("__dict__"))


_DICT_READS = ("__getitem__", "get", "__contains__", "__len__", "keys", "values", "items", "copy")
_DICT_WRITES = (
    "__setitem__",
    "__delitem__",
    "pop",
    "popitem",
    "setdefault",
    "update",
    "clear",
    "__init__",
)


class _DictMethodOf(VariableTracker):
    """Method `name` of a dict-like object: the C class it comes from is `owner`."""

    def __init__(self, obj, name, owner=None, **kw):
        super().__init__(**kw)
        self.obj = obj
        self.name = name
        # the C class whose method this is (super() names it; else the object's class finds it)
        self.owner = owner or dict_subclass.c_owner(obj.python_type(), name) or dict


# Note [Dicts: OrderedDict's methods]
# A C method called on a dict-subclass instance made while tracing is dict's or OrderedDict's,
# whichever the class (or super()) finds first. OrderedDict's run on the items as an ordered
# dict: `popitem(last=False)`, `move_to_end`, and `setdefault` / `pop` taking `key` and `default`
# by name too; dict's take no keywords (the TypeError Python raises). OrderedDict.copy of a
# subclass instance makes `type(self)()` and fills it through the class's __setitem__: a break.


class DictMethodVariable(_DictMethodOf):
    """A C method of dict/OrderedDict (or object.__setattr__) on an object made while tracing,
    run on its symbolic items: `out.keys()`, `super().__setitem__(k, v)` in a dict subclass."""

    def var_getattr(self, tx, name):
        if name in ("__name__", "__qualname__"):  # (unittest's assertRaises names the callable)
            return ConstantVariable(self.name if name == "__name__" else f"dict.{self.name}")
        return super().var_getattr(tx, name)

    def call_function(self, tx, args, kwargs):
        obj, name = self.obj, self.name
        if name == "__setattr__" and len(args) == 2 and not kwargs:
            tx.output.side_effects.mutate_new_object(obj)
            obj.store_attr(_const_key(args[0]), args[1])
            return ConstantVariable(None)
        if name == "__getattribute__" and len(args) == 1:
            return obj.var_getattr(tx, _const_key(args[0]))
        if name == "__iter__" and not args:  # (it raises as Python's when the object changes size)
            keys = [ConstantVariable(k) for k in obj.dict_items]
            ordered = self.owner is collections.OrderedDict
            return ListIteratorVariable.over_dict(_LiveItems(obj, ordered), keys, view=False)
        if obj.dict_items is not None:
            result = dict_subclass.operator_method(tx, obj, name, args, kwargs)
            if result is not None:
                return result
        ordered = self.owner is collections.OrderedDict  # Note [Dicts: OrderedDict's methods]
        if ordered and name == "copy":
            kind = obj.python_type().__name__
            unimplemented(f"OrderedDict.copy of a {kind}: type(self)() filled by its __setitem__")
        allowed = _DICT_READS + _DICT_WRITES + (("move_to_end",) if ordered else ())
        if obj.dict_items is None or name not in allowed:
            unimplemented(f"{name} of {obj}")
        view = _storage_var(obj)
        view.user_cls = collections.OrderedDict if ordered else dict
        if name == "__init__":
            name = "update"
            if not args and not kwargs:
                return ConstantVariable(None)
            if kwargs and not args:
                args = [ConstDictVariable(kwargs)]
            elif kwargs or len(args) != 1:
                unimplemented("dict.__init__ with positional and keyword items")
            if not isinstance(args[0], ConstDictVariable):
                from kiln.frontend.variables.builtin import BuiltinVariable

                args = [BuiltinVariable(dict).call_function(tx, [args[0]], {})]
        elif name == "__delitem__":
            name = "pop"
        elif name in ("setdefault", "pop") and kwargs and ordered:
            bound = key_and_default(args, kwargs)  # OrderedDict's take them by name too
            if bound is None:
                unimplemented(f"OrderedDict.{name} with these arguments")
            args, kwargs = bound, {}
        if name == "setdefault" and 1 <= len(args) <= 2 and not kwargs:
            key = hashable_key(_const_key(args[0]))
            if key not in obj.dict_items:
                tx.output.side_effects.mutate_new_object(obj)
                obj.dict_items[key] = args[1] if len(args) > 1 else ConstantVariable(None)
            return obj.dict_items[key]
        if name in _DICT_WRITES or name == "move_to_end":
            tx.output.side_effects.mutate_new_object(obj)
        result = view.call_method(tx, name, args, kwargs)
        obj.dict_items = view.items
        if self.name == "__delitem__":
            return ConstantVariable(None)
        return result


class _LiveItems:
    """The items of a dict-subclass object made while tracing as they are now (what an iterator
    over them watches), and the C class whose iterator it is."""

    def __init__(self, obj, ordered):
        self.obj = obj
        self.user_cls = collections.OrderedDict if ordered else dict

    @property
    def items(self):
        return self.obj.dict_items


def _storage_var(obj):
    """One dict variable over a dict subclass object's items, shared by every call: the views
    `obj.keys()` / `.items()` / `.mapping` return stay live as the object changes."""
    view = getattr(obj, "_storage", None)
    if view is None:
        view = obj._storage = ConstDictVariable({})
        view.storage_of = obj  # (its iterators are the object's: dict_iters.rebuild)
        view._mutate = lambda tx, *_: None  # (the side effect is recorded on the object)
    view.items = obj.dict_items  # (shared, not copied: stores elsewhere change it in place)
    return view


def _const_key(var):
    if not var.is_python_constant():
        unimplemented(f"non-constant key {var}")
    return var.as_python_constant()


class EnvironReadVariable(_DictMethodOf):
    """`os.environ.get(k)` / `os.environ[k]` / `k in os.environ` for a constant key: read while
    tracing, guarded by the value (a changed variable recompiles). Writes run in Python."""

    def call_function(self, tx, args, kwargs):
        if kwargs or not args or len(args) > 2 or not args[0].is_python_constant():
            unimplemented(f"os.environ.{self.name} with these arguments")
        key = args[0].as_python_constant()
        if not isinstance(key, str):
            unimplemented("os.environ with a non-str key")
        tx.output.guards.add(GuardKind.ID_MATCH, self.obj.source, os.environ)
        value = os.environ.get(key)
        tx.output.guards.add(
            GuardKind.CONSTANT_MATCH, MappingGetSource(self.obj.source, key), value
        )
        if self.name == "__contains__":
            return ConstantVariable(value is not None)
        if value is None:
            if self.name == "get":
                return args[1] if len(args) > 1 else ConstantVariable(None)
            unimplemented(f"KeyError {key!r}: os.environ has no such variable")
        return ConstantVariable(value)


class DictReadVariable(_DictMethodOf):
    """`super().get` / `__getitem__` / `__contains__` of a dict-subclass object: a guarded read."""

    def call_function(self, tx, args, kwargs):
        if self.obj.source is None or kwargs or not args:
            unimplemented(f"dict.{self.name} of {self.obj}")
        key, source = _read_key(self.obj, self.name, args[0])
        value = dict_get(self.obj.value, key)
        if value is MISSING:
            tx.output.guards.add(GuardKind.ID_MATCH, source, MISSING)
            if self.name == "__contains__":
                return ConstantVariable(False)
            if self.name == "get":
                return args[1] if len(args) > 1 else ConstantVariable(None)
            unimplemented(f"KeyError {key!r} while tracing")
        if self.name == "__contains__":
            tx.output.guards.add(GuardKind.TYPE_MATCH, source, type(value))  # present
            return ConstantVariable(True)
        return wrap_value(tx, value, source)


def _read_key(obj, name, var):
    """The real key of `dict.name(obj, var)` and the source of the item it reads: a literal
    key, or an object read from a source (the guard looks the item up with the object the call
    is given, so its identity need not be pinned) whose hash and == run no user code."""
    if var.is_python_constant() and is_literal(var.as_python_constant()):
        key = var.as_python_constant()
        return key, DictGetSource(obj.source, key)
    key = _builtin_class_tuple(var)
    if key is not None:  # `_cache[type(pattern), pattern, flags]` (the re module's cache)
        return key, DictGetSource(obj.source, key)
    if var.is_python_constant():
        key = var.as_python_constant()
    else:
        key = getattr(var, "value", _ABSENT)
    plain = type(key).__hash__ is object.__hash__ and type(key).__eq__ is object.__eq__
    if key is _ABSENT or var.source is None or not (plain or isinstance(key, type)):
        unimplemented(f"dict.{name} with the key {var} (not a literal)")
    return key, DictGetByKeySource(obj.source, var.source)


def _builtin_class_tuple(var):
    """The real key of a tuple made of literals and builtin classes (`(str, 'a+', 0)`), else
    None: it hashes and compares with no user code, and guard code names each class."""
    items = getattr(var, "items", None)
    if not isinstance(var, TupleVariable) or not isinstance(items, list):
        return None
    key = []
    for item in items:
        if not item.is_python_constant():
            return None
        value = item.as_python_constant()
        if not (is_literal(value) or is_builtin_class(value)):
            return None
        key.append(value)
    return tuple(key)


def _dict_object_iter(tx, obj):
    """iter(obj) of a dict-subclass object made while tracing whose class keeps the C __iter__
    (it watches the object's size), or None."""
    if dict_subclass.c_owner(obj.python_type(), "__iter__") is None:
        return None
    return DictMethodVariable(obj, "__iter__").call_function(tx, [], {})


def _input_dict_object_iter(tx, obj):
    """iter(obj) of a dict-subclass object from outside the frame whose class keeps the C
    __iter__: an iterator over its items that is the object's own at a break (Note [Dicts:
    iterators of dicts made in the frame]), or None."""
    value = getattr(obj, "value", None)
    if not isinstance(value, dict) or dict_subclass.c_owner(type(value), "__iter__") is None:
        return None
    storage = dict_subclass.storage_of(tx, obj)
    if storage is None:
        return None
    keys = storage.unpack_var_sequence(tx)
    return lists.ListIteratorVariable.over_dict(storage, keys, view=False)


lists.ITERATORS["dict object"] = _dict_object_iter
lists.ITERATORS["input dict object"] = _input_dict_object_iter
