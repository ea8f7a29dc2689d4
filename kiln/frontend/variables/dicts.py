"""Dicts with constant keys."""

import collections
import inspect
import types

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.variables import dict_reads, dict_views, od_stale
from kiln.frontend.variables.base import VariableTracker, wrap_value
from kiln.frontend.variables.constant import ConstantVariable, is_literal
from kiln.frontend.variables.dict_keys import (
    guard_tensor_keys,
    is_outside_object,
    is_stand_in,
    is_traced_tensor,
    key_var,
    object_key,
)
from kiln.frontend.variables.dict_views import DictViewVariable
from kiln.frontend.variables.exceptions import observe, raise_observed
from kiln.frontend.variables.finalizers import check_drops
from kiln.frontend.variables.lists import ListIteratorVariable, ListVariable, TupleVariable

# Set by operators.py and builtin.py (which import this module): "dicts": (tx, a, b) -> whether
# two traced dicts are equal, as `a == b` decides it (Note [Dicts: equality]); "as_dict":
# (tx, mapping) -> dict(mapping) traced.
EQUALITY = {}


def not_iterable(var):
    """A constant Python cannot iterate (`d.update(1)`, `dict.fromkeys(1)`)."""
    try:
        iter(var.value)
    except TypeError:
        return True
    return False


def key_and_default(args, kwargs):
    """`key` and `default` given by position or name, as positions; None if they do not bind."""
    bound = dict(zip(("key", "default"), args))
    if len(args) > 2 or set(kwargs) - {"key", "default"} or set(kwargs) & set(bound):
        return None
    bound |= kwargs
    if "key" not in bound:
        return None
    return [bound["key"]] + ([bound["default"]] if "default" in bound else [])


def check_fromkeys_count(tx, args, kwargs):
    """fromkeys's TypeErrors for the number of its positional arguments, as CPython raises them."""
    if not kwargs and len(args) > 2:
        raise_observed(tx, TypeError, f"fromkeys expected at most 2 arguments, got {len(args)}")
    if not kwargs and not args:
        raise_observed(tx, TypeError, "fromkeys expected at least 1 argument, got 0")


def check_iterable(tx, var):
    """A constant that is not iterable raises TypeError as iter() would."""
    if isinstance(var, ConstantVariable) and not_iterable(var):
        raise_observed(tx, TypeError, f"'{type(var.value).__name__}' object is not iterable")


def dict_key(var):
    """The Python key of a traced value put in a dict (BUILD_MAP, d[k] = v): the constant, or a
    stand-in for an object (Note [Dicts: keys that are objects])."""
    if not var.is_python_constant():
        return object_key(var, dict_key)
    return hashable_key(var.as_python_constant())


def hashable_key(value):
    """`value` as a dict key; an unhashable one raises Python's TypeError in the traced code."""
    try:
        hash(value)
    except TypeError as e:
        observe(e)
        unimplemented(f"unhashable dict key {type(value).__name__}")
    return value


class ConstDictVariable(VariableTracker):
    """A dict whose keys are Python constants and whose values are VariableTrackers."""

    def __init__(self, items, user_cls=dict, default_factory=None, **kw):
        super().__init__(**kw)
        self.raw_items = dict(items)  # (values a lazy read has not wrapped yet: UNREAD)
        self.unread = None  # a dict_reads.LazyInput while values are left to read
        self.user_cls = user_cls
        if isinstance(default_factory, ConstantVariable) and default_factory.value is None:
            default_factory = None  # (an input defaultdict without a factory)
        self.default_factory = default_factory  # a defaultdict's factory (a VariableTracker)
        # dict's own methods changed this OrderedDict's keys behind its order list (Note
        # [Dicts: dict's methods on an OrderedDict]); `storage_only` while such a method runs
        self.od_stale = False
        self.storage_only = False
        # the order list of a stale OrderedDict and how it differs from the storage (Note
        # [Dicts: OrderedDict's methods on a stale order list], od_stale.py); None: unknown
        self.od_order = None
        self.od_kind = None

    @property
    def items(self):
        """The items, every value wrapped (Note [Dicts: inputs guarded by the keys read])."""
        if self.unread is not None:
            dict_reads.read_all(self)
        return self.raw_items

    @items.setter
    def items(self, items):
        if self.unread is not None:
            dict_reads.read_all(self)
        self.raw_items = items

    def python_type(self):
        return self.user_cls

    def is_python_constant(self):
        return (
            self.user_cls is not collections.defaultdict
            and not self.od_stale
            and not any(is_stand_in(k) for k in self.items)
            and all(v.is_python_constant() for v in self.items.values())
        )

    def as_python_constant(self):
        self.check_order("as a constant")
        if any(is_stand_in(k) for k in self.items):
            unimplemented("a dict keyed by objects as a constant")
        return self.user_cls((k, v.as_python_constant()) for k, v in self.items.items())

    def truthy(self, tx):
        return bool(self.items)

    def unpack_var_sequence(self, tx):
        self.check_order("iterated")
        # Note [Dicts: one variable per key]: iterating makes each key's variable once per dict
        # (`next(iter(d))` in a loop over a big dict was quadratic in new variables); a key
        # object is the same object at each iteration in Python too. By id, checked with `is`
        # (1 and True are equal keys, not the same constant).
        cache = self.__dict__.get("_key_vars")
        if cache is None or len(cache) > 2 * len(self.items) + 64:
            cache = self._key_vars = {}
        out = []
        for k in self.items:
            hit = cache.get(id(k))
            if hit is None or hit[0] is not k:
                hit = cache[id(k)] = (k, key_var(k))
            out.append(hit[1])
        return out

    def check_order(self, what):
        """Break where an OrderedDict whose order list dict's methods bypassed would be read
        through that list (Note [Dicts: dict's methods on an OrderedDict])."""
        if self.od_stale and not self.storage_only:
            unimplemented(
                f"{self.user_cls.__name__} {what} after dict's own methods changed its keys "
                "(its order list no longer matches its items)"
            )

    def _ordered(self):
        return issubclass(self.user_cls, collections.OrderedDict)

    def _popitem_kwargs(self):
        return {"last"} if self._ordered() else set()

    def var_getattr(self, tx, name):
        if name == "default_factory" and self.user_cls is collections.defaultdict:
            return self.default_factory or ConstantVariable(None)
        return super().var_getattr(tx, name)

    removals = 0  # keys taken out or moved, ever (Note [Dicts: keys changed while iterated])

    def _mutate(self, tx, drops=(), what="a dict store"):
        """Record a mutation; `drops`: the values it removes (Note [Finalizers: a store that
        may run __del__])."""
        if self.user_cls not in (dict, collections.OrderedDict, collections.defaultdict):
            unimplemented(f"mutation of a {self.user_cls.__name__}")
        check_drops(drops, f"{self.user_cls.__name__}.{what}")
        tx.output.side_effects.mutate_container(self)

    def _key(self, var):
        return dict_key(var)

    def _key_error(self, tx, key):
        """A missing key raises KeyError as Python does (Note [Blocks: exceptions while
        tracing]), unless the class has a __missing__ kiln does not run."""
        plain_missing = self.user_cls is collections.defaultdict and self.default_factory is None
        if getattr(self.user_cls, "__missing__", None) is not None and not plain_missing:
            # (a defaultdict without a factory: its __missing__ raises KeyError(key))
            unimplemented(f"KeyError {key!r} while tracing ({self.user_cls.__name__}.__missing__)")
        raise_observed(tx, KeyError, key)

    def call_method(self, tx, name, args, kwargs):
        if self.unread is not None and name in dict_reads.LOOKUPS and args and not kwargs:
            if args[0].is_python_constant():  # Note [Dicts: inputs guarded by the keys read]
                found = dict_reads.lookup(tx, self, name, args, self._key(args[0]))
                if found is not None:
                    return found
        if self.od_stale and not _inherited(self.user_cls, name):
            done = od_stale.call(tx, self, name, args, kwargs)
            if done is not None:
                return done
            other = args[0] if args else None
            if not (name in ("__eq__", "__ne__") and _plain_dict_operand(other)):
                self.check_order(f".{name}()")
        if kwargs and name in ("setdefault", "pop") and self._ordered():
            bound = key_and_default(args, kwargs)  # OrderedDict's take them by name too
            if bound is None:
                unimplemented(f"{self.user_cls.__name__}.{name} with these arguments")
            args, kwargs = bound, {}
        result = self._call_method(tx, name, args, kwargs)
        guard_tensor_keys(
            tx,
            [
                *self.items,
                *(dict_key(a) for a in args[:1] if is_traced_tensor(a) or is_outside_object(a)),
            ],
        )
        return result

    def call_dict_method(self, tx, name, args, kwargs):
        """dict's own method `name` run on this dict's items, bypassing its class's override
        (`dict.keys(od)`, `dict.__or__(od, d)`; Note [Dicts: dict's methods on an
        OrderedDict])."""
        if _inherited(self.user_cls, name):
            return self.call_method(tx, name, args, kwargs)
        if name == "copy" and not args and not kwargs:
            return ConstDictVariable(self.items)
        if name == "__or__" and len(args) == 1 and not kwargs:
            if not isinstance(args[0], ConstDictVariable):
                return ConstantVariable(NotImplemented)
            args[0].check_order("merged")
            return ConstDictVariable({**self.items, **args[0].items})
        if name in ("__eq__", "__ne__") and len(args) == 1 and not kwargs:
            other = args[0]
            if not isinstance(other, ConstDictVariable):
                return self._call_method(tx, name, args, kwargs)
            same = EQUALITY["dicts"](tx, self, other, ordered=False)
            return ConstantVariable(same if name == "__eq__" else not same)
        keys = list(self.items)
        cls, self.user_cls, self.storage_only = self.user_cls, dict, True
        try:
            result = self._call_method(tx, name, args, kwargs)
        finally:
            self.user_cls, self.storage_only = cls, False
        if list(self.items) != keys and issubclass(cls, collections.OrderedDict):
            if self.source is not None:
                unimplemented(
                    f"dict.{name} changing the keys of an {cls.__name__} that outlives the frame"
                )
            od_stale.dict_method_changed(self, keys)
        return result

    def _call_method(self, tx, name, args, kwargs):
        if kwargs and name not in ("update", "popitem", "move_to_end"):
            self._argument_error(tx, name, args, kwargs)  # (dict's methods take no keywords)
            unimplemented(f"{self.user_cls.__name__}.{name} with keyword arguments")
        if name == "__getitem__" and len(args) == 1:
            key = self._key(args[0])
            if key not in self.items and self.default_factory is not None:
                value = self.default_factory.call_function(tx, [], {})  # defaultdict.__missing__
                self._mutate(tx)
                self.items[key] = value
            if key not in self.items:
                self._key_error(tx, key)
            return self.items[key]
        if name == "get" and 1 <= len(args) <= 2:
            key = self._key(args[0])
            if key in self.items:
                return self.items[key]
            return args[1] if len(args) == 2 else ConstantVariable(None)
        if name == "__contains__" and len(args) == 1:
            return ConstantVariable(self._key(args[0]) in self.items)
        if name == "__len__":
            return ConstantVariable(len(self.items))
        if name in ("keys", "values", "items") and not args:
            return DictViewVariable(self, name)  # Note [Dicts: views]
        if name == "__setitem__" and len(args) == 2:
            key = self._key(args[0])
            self._mutate(tx, [self.items.get(key)], name)
            self.items[key] = args[1]
            return ConstantVariable(None)
        if name == "update" and len(args) > 1:
            raise_observed(tx, TypeError, f"update expected at most 1 argument, got {len(args)}")
        if name == "update" and len(args) <= 1:
            other = {}
            if args and isinstance(args[0], MappingProxyVariable):
                args = [args[0].dict_var]  # its dict's items (Note [Dicts: mappingproxy])
            if args and not isinstance(args[0], ConstDictVariable) and _has_keys(args[0]):
                args = [EQUALITY["as_dict"](tx, args[0])]  # a mapping: dict(m)'s items
            if args and isinstance(args[0], ConstDictVariable):
                other.update(args[0].items)
            elif args and isinstance(args[0], ConstantVariable) and not_iterable(args[0]):
                kind = type(args[0].value).__name__
                raise_observed(tx, TypeError, f"'{kind}' object is not iterable")
            elif args:
                for i, pair in enumerate(args[0].unpack_var_sequence(tx)):
                    kv = pair.unpack_var_sequence(tx)
                    if len(kv) != 2:
                        message = f"dictionary update sequence element #{i} has length {len(kv)}"
                        raise_observed(tx, ValueError, f"{message}; 2 is required")
                    k, v = kv
                    k = self._key(k)
                    # (pairs before a bad key are in, as in Python)
                    self._mutate(tx, [self.items.get(k)], name)
                    self.items[k] = v
            other.update(kwargs)
            self._mutate(tx, [self.items.get(k) for k in other], name)
            self.items.update(other)
            return ConstantVariable(None)
        if name == "setdefault" and 1 <= len(args) <= 2:
            key = self._key(args[0])
            if key not in self.items:
                self._mutate(tx)
                self.items[key] = args[1] if len(args) == 2 else ConstantVariable(None)
            return self.items[key]
        if name == "clear" and not args:
            self._mutate(tx, self.items.values(), name)
            self.removals += 1  # Note [Dicts: keys changed while iterated]
            self.items.clear()
            return ConstantVariable(None)
        if (
            name == "popitem"
            and len(args) <= len(self._popitem_kwargs()) - len(kwargs)
            and (set(kwargs) <= self._popitem_kwargs())
        ):
            last = kwargs.get("last", args[0] if args else ConstantVariable(True)).truthy(tx)
            if not self.items:
                raise_observed(tx, KeyError, "popitem(): dictionary is empty")
            k = next(reversed(self.items)) if last else next(iter(self.items))
            self._mutate(tx, [self.items[k]], name)
            self.removals += 1  # Note [Dicts: keys changed while iterated]
            return TupleVariable([key_var(k), self.items.pop(k)])
        if name == "move_to_end" and self._ordered() and len(args) + len(kwargs) <= 2 and args:
            key = self._key(args[0])
            last = args[1] if len(args) > 1 else kwargs.get("last", ConstantVariable(True))
            if key not in self.items:
                raise_observed(tx, KeyError, key)
            self._mutate(tx)
            self.removals += 1  # Note [Dicts: keys changed while iterated]
            value = self.items.pop(key)
            if last.truthy(tx):
                self.items[key] = value
            else:
                self.items = {key: value, **self.items}
            return ConstantVariable(None)
        if name == "__delitem__" and len(args) == 1:
            self.call_method(tx, "pop", args, {})
            return ConstantVariable(None)
        if name in ("__eq__", "__ne__") and len(args) == 1 and not kwargs:
            other = args[0]
            if not isinstance(other, ConstDictVariable):
                if _is_dict_type(other):
                    unimplemented(f"dict.{name} with {other}")
                return ConstantVariable(NotImplemented)
            same = EQUALITY["dicts"](tx, self, other)
            return ConstantVariable(same if name == "__eq__" else not same)
        if name == "__iter__" and not args and not kwargs:
            return ListIteratorVariable.over(tx, self)
        if name in ("__or__", "__ior__") and len(args) == 1:
            other = args[0]
            if name == "__ior__":
                self.call_method(tx, "update", [other], {})  # any mapping or pairs
                return self
            if not isinstance(other, ConstDictVariable):
                return ConstantVariable(NotImplemented)
            return ConstDictVariable(
                {**self.items, **other.items}, self.user_cls, self.default_factory
            )
        if name == "__ror__" and len(args) == 1 and not kwargs:
            other = args[0]  # `other | self`, other's class a base of self's
            if not isinstance(other, ConstDictVariable):
                return ConstantVariable(NotImplemented)
            other.check_order("merged")
            merged = {**other.items, **self.items}
            return ConstDictVariable(merged, self.user_cls, self.default_factory)
        if name == "pop" and 1 <= len(args) <= 2:
            key = self._key(args[0])
            self._mutate(tx, [self.items.get(key)], name)
            if key in self.items:
                self.removals += 1  # Note [Dicts: keys changed while iterated]
                return self.items.pop(key)
            if len(args) == 2:
                return args[1]
            self._key_error(tx, key)
        if name == "copy" and not args:
            return ConstDictVariable(self.items, self.user_cls, self.default_factory)
        if name == "list" and not args:
            return ListVariable([key_var(k) for k in self.items])
        self._argument_error(tx, name, args, kwargs)
        unimplemented(f"dict.{name}")

    def _argument_error(self, tx, name, args, kwargs):
        """A call dict rejects whatever its items (a wrong argument count or type): the
        TypeError Python raises, found by making the call on an empty dict of the same class."""
        if self.user_cls not in (dict, collections.OrderedDict) or not hasattr(dict, name):
            return
        values = [*args, *kwargs.values()]
        if not all(v.is_python_constant() for v in values):
            return
        cargs = [a.as_python_constant() for a in args]
        ckw = {k: v.as_python_constant() for k, v in kwargs.items()}
        try:
            getattr(self.user_cls(), name)(*cargs, **ckw)
        except TypeError as e:
            raise_observed(tx, TypeError, str(e))
        except Exception:
            return

    def reconstruct(self, cg):
        if self.source is not None:  # never mutated while tracing: the object itself
            self.source.reconstruct(cg)
            return
        self.check_order("rebuilt")
        if self.user_cls not in (dict, collections.OrderedDict, collections.defaultdict):
            unimplemented(f"rebuilding a {self.user_cls.__name__}")
        nargs = 1
        if self.user_cls is not dict:
            cg.load_object(self.user_cls, push_null=True)
        if self.user_cls is collections.defaultdict:
            nargs = 2  # defaultdict(factory, items)
            if self.default_factory is None:
                cg.extend(emit.load_const(None))
            else:
                cg.reconstruct(self.default_factory)
        for k, v in self.items.items():
            cg.reconstruct(key_var(k))
            cg.reconstruct(v)
        cg.extend(emit.build_map(len(self.items)))
        if self.user_cls is not dict:
            cg.extend(emit.call(nargs))

    def __repr__(self):
        return f"ConstDictVariable({self.raw_items!r})"


# Note [Dicts: mappingproxy]
# types.MappingProxyType(d) (and a dict view's `.mapping`) is a read-only, live view of d: every
# read reads d as it is now, a write raises TypeError. The variable holds d's variable; it is
# rebuilt as MappingProxyType over d rebuilt (the same object when d came from a source, so
# later changes of d show through it after the frame too). A mappingproxy from outside the frame
# holds the variable of its dict, reached as `___proxied_dict(mp)` (the proxy's only referent):
# one variable per dict, so the frame's changes of d made through another name show through mp.
class MappingProxyVariable(VariableTracker):
    """A mappingproxy over a traced dict (Note [Dicts: mappingproxy])."""

    _READS = ("__getitem__", "get", "__contains__", "__len__", "keys", "values", "items")

    def __init__(self, dict_var, **kw):
        super().__init__(**kw)
        self.dict_var = dict_var

    def python_type(self):
        return types.MappingProxyType

    def truthy(self, tx):
        return self.dict_var.truthy(tx)

    def unpack_var_sequence(self, tx):
        return self.dict_var.unpack_var_sequence(tx)

    def call_method(self, tx, name, args, kwargs):
        if name in self._READS or name in ("__iter__", "copy"):
            return self.dict_var.call_method(tx, name, args, kwargs)
        if name in ("__setitem__", "__delitem__"):
            raise_observed(tx, TypeError, "'mappingproxy' object does not support item assignment")
        unimplemented(f"mappingproxy.{name}")

    def reconstruct(self, cg):
        if self.source is not None:  # a mappingproxy from outside the frame: itself
            self.source.reconstruct(cg)
            return
        cg.load_object(types.MappingProxyType, push_null=True)
        cg.reconstruct(self.dict_var)
        cg.extend(emit.call(1))

    def __repr__(self):
        return f"MappingProxyVariable({self.dict_var!r})"


dict_views.MAPPING_PROXY["make"] = MappingProxyVariable


def make_mapping_proxy(args, kwargs):
    """types.MappingProxyType(d) of a traced dict, or None."""
    if len(args) == 1 and not kwargs and isinstance(args[0], ConstDictVariable):
        return MappingProxyVariable(args[0])
    if len(args) == 1 and not kwargs and isinstance(args[0], MappingProxyVariable):
        return MappingProxyVariable(args[0].dict_var)
    return None


def _has_keys(var):
    """Whether dict.update reads `var` as a mapping (a dict, or an object with `keys`)."""
    try:
        return hasattr(var.python_type(), "keys")
    except Exception:
        return False


def _is_dict_type(var):
    try:
        return issubclass(var.python_type(), dict)
    except Exception:
        return True  # unknown: not answered here


# Note [Dicts: methods read from the class]
# `dict.get(d, k)`, `dict.__ior__(d, other)`, `OrderedDict.move_to_end(d, k)` call a C method of
# dict (or of OrderedDict / defaultdict) with `d` as self. When d's class does not override that
# method (a plain dict, an OrderedDict's `get`, a dict subclass's `update`), this is exactly
# `d.get(k)`, traced as such. When it does (`dict.keys(od)` bypasses OrderedDict's keys), dict's
# own method runs on d's items (Note [Dicts: dict's methods on an OrderedDict]). A self that is
# no dict we model breaks.

# Note [Dicts: dict's methods on an OrderedDict]
# An OrderedDict is a dict (its items, the storage) plus a list of its keys in order, which its
# own methods keep in step. dict's methods called on it (`dict.update(od, d)`, `dict.pop(od, k)`,
# `dict.clear(od)`) change the storage only: `dict.keys(od)`, `len(od)`, `od[k]`, `k in od`,
# `od == {...}` read the storage and see the change; iterating `od`, `repr(od)`, `od.keys()` and
# OrderedDict's own methods walk the stale list (CPython then shows old keys or raises KeyError).
# kiln models the storage: after such a change (`od_stale`) the reads of the storage (methods
# OrderedDict inherits from dict, dict's own methods, == with a plain dict) are traced and every
# read through the order list breaks, as does rebuilding the dict; an OrderedDict from outside
# the frame breaks at the change itself. `dict.copy(od)` and `dict.__or__(od, d)` are plain
# dicts; `dict.__eq__` ignores order.


def _inherited(cls, name):
    """Whether `cls` (a dict class) keeps dict's own `name`."""
    return getattr(cls, name, None) is getattr(dict, name, None)


def _plain_dict_operand(var):
    """Whether `var` is a traced dict no OrderedDict (`od == d` then compares storages)."""
    return isinstance(var, ConstDictVariable) and not var._ordered()


_DICT_CLASSES = (collections.OrderedDict, collections.defaultdict, dict)


class DictClassMethodVariable(VariableTracker):
    """`dict.<name>` (or `OrderedDict.<name>`): a method of a dict class, unbound (Note [Dicts:
    methods read from the class])."""

    def __init__(self, name, owner=dict, **kw):
        super().__init__(**kw)
        self.name = name
        self.owner = owner

    def python_type(self):
        return type(inspect.getattr_static(self.owner, self.name))

    def var_getattr(self, tx, name):
        if name in ("__name__", "__qualname__"):
            return ConstantVariable(getattr(getattr(self.owner, self.name), name))
        return super().var_getattr(tx, name)

    def call_function(self, tx, args, kwargs):
        label = f"{self.owner.__name__}.{self.name}"
        if not args:
            unimplemented(f"{label} without self")
        obj, rest = args[0], list(args[1:])
        try:
            cls = obj.python_type()
        except Exception:
            cls = None
        if cls is None or not issubclass(cls, self.owner):
            unimplemented(f"{label} of {obj}")
        if getattr(cls, self.name, None) is getattr(self.owner, self.name):
            return obj.call_method(tx, self.name, rest, kwargs)
        if self.owner is dict and isinstance(obj, ConstDictVariable):
            return obj.call_dict_method(tx, self.name, rest, kwargs)
        unimplemented(f"{label} of a {cls.__name__} (which overrides it)")

    def reconstruct(self, cg):
        cg.load_object(getattr(self.owner, self.name))

    def __repr__(self):
        return f"DictClassMethodVariable({self.owner.__name__}.{self.name})"


# Note [Dicts: __new__ of subclasses]
# `dict.__new__(cls)` (and `super().__new__(cls, ...)` inside a dict subclass's own __new__) makes
# an empty instance of cls, ignoring its other arguments: a ConstDictVariable for dict or
# OrderedDict, else an instance of the subclass made while tracing (NewObjectVariable, registered
# by user_defined.py), whose __init__ the caller then runs. `Sub(...)` of a subclass with a Python
# __new__ inlines that __new__, which must return such an instance of Sub. The transformed code
# rebuilds instances with the C class's __new__, never the Python one again.
NEW_OBJECT = {}  # "make": cls -> a new instance variable of a dict subclass, or None


class DictNewVariable(VariableTracker):
    """`dict.__new__` / `OrderedDict.__new__` (Note [Dicts: __new__ of subclasses])."""

    def __init__(self, owner, **kw):
        super().__init__(**kw)
        self.owner = owner

    def call_function(self, tx, args, kwargs):
        if not args or not args[0].is_python_constant():
            unimplemented(f"{self.owner.__name__}.__new__ without a class")
        cls = args[0].as_python_constant()
        if not (isinstance(cls, type) and issubclass(cls, self.owner)):
            unimplemented(f"{self.owner.__name__}.__new__({cls!r})")
        if cls in (dict, collections.OrderedDict):
            return ConstDictVariable({}, user_cls=cls)
        made = NEW_OBJECT["make"](cls)
        if made is None:
            unimplemented(f"{self.owner.__name__}.__new__ of {cls.__qualname__}")
        return made

    def reconstruct(self, cg):
        cg.load_object(self.owner.__new__)


def class_method(cls, name):
    """`dict.<name>` (or `Sub.<name>` of a dict subclass that keeps dict's, OrderedDict's or
    defaultdict's) as a variable when it is a C method of instances (Note [Dicts: methods read
    from the class]), else None."""
    if name == "__new__" and cls in (dict, collections.OrderedDict):
        return DictNewVariable(cls)
    if not (isinstance(cls, type) and issubclass(cls, dict)) or name == "__new__":
        return None
    for owner in _DICT_CLASSES:
        if issubclass(cls, owner) and getattr(cls, name, None) is getattr(owner, name, None):
            static = inspect.getattr_static(owner, name, None)
            if isinstance(static, (_METHOD_DESCRIPTOR, _SLOT_WRAPPER)):
                return DictClassMethodVariable(name, _defining(owner, name))
            return None
    return None


def _defining(owner, name):
    """The dict class among `owner`'s bases that defines `name` (dict for inherited ones)."""
    return owner if owner is dict or not _inherited(owner, name) else dict


_METHOD_DESCRIPTOR = type(dict.get)
_SLOT_WRAPPER = type(dict.__eq__)


# Note [Dicts: identity-keyed tables]
# A module-level table keyed by classes, functions or typing forms (huggingface_hub's
# `_BASIC_TYPE_VALIDATORS = {Union: ..., list: ..., types.UnionType: ...}`, read by the strict
# dataclass validators that transformers' configs run on every attribute write) has keys that are
# no literals, so it cannot be a ConstDictVariable (its guards and sources spell keys as text).
# Such keys compare by identity (a C function by what it wraps; a __hash__ of their own, as
# torch's OpOverloadPacket has, is fine), and so do the values we allow (or they are literals):
# the first read adds one guard that pins the whole table, `d == snapshot` (identity comparisons,
# a few entries), and the reads `d[k]`, `d.get(k)`, `k in d`, `len(d)` fold to the snapshot's
# values; a table only passed along keeps its type guard alone. Anything else (writes, iteration)
# breaks with its reason.


_C_FUNCTIONS = (types.BuiltinFunctionType, types.MethodDescriptorType, types.WrapperDescriptorType)


def is_identity_keyed(value):
    """Whether a plain dict's keys and values are literals or objects that hash and compare by
    identity (classes, functions, typing forms), at least one key not a literal."""

    def plain(x):
        # (a key with its own __hash__ but identity __eq__, torch's OpOverloadPacket, still
        # compares by identity; C functions compare by what they wrap)
        return is_literal(x) or type(x).__eq__ is object.__eq__ or type(x) in _C_FUNCTIONS

    return (
        type(value) is dict
        and not all(is_literal(k) for k in value)
        and all(plain(k) and plain(v) for k, v in value.items())
    )


class IdentityKeyedDictVariable(VariableTracker):
    """A dict reached from a source whose keys are compared by identity; read-only while traced
    (Note [Dicts: identity-keyed tables])."""

    def __init__(self, value, **kw):
        super().__init__(**kw)
        self.value = value  # the snapshot the guard compares with

    def python_type(self):
        return dict

    def truthy(self, tx):
        self._read(tx)
        return bool(self.value)

    def _key(self, var):
        if var.is_python_constant():
            return var.as_python_constant()
        if type(getattr(var, "value", None)).__eq__ is object.__eq__:
            return var.value  # a class or function variable (identity is what the dict sees)
        unimplemented(f"key {var} of a dict keyed by objects")

    def _wrap(self, tx, value):
        return wrap_value(tx, value, None)  # pinned by the snapshot guard

    def _read(self, tx):
        tx.output.guards.add(GuardKind.CONSTANT_MATCH, self.source, self.value)

    def call_method(self, tx, name, args, kwargs):
        if name in ("__getitem__", "get", "__contains__", "__len__") and not kwargs:
            self._read(tx)
        if name in ("__getitem__", "get", "__contains__") and not kwargs and args:
            key = self._key(args[0])
            if name == "__contains__" and len(args) == 1:
                return ConstantVariable(key in self.value)
            if key in self.value and len(args) <= (1 if name == "__getitem__" else 2):
                return self._wrap(tx, self.value[key])
            if name == "get" and len(args) <= 2:
                return args[1] if len(args) == 2 else ConstantVariable(None)
            if name == "__getitem__" and len(args) == 1:
                raise_observed(tx, KeyError, key)
        if name == "__len__" and not args and not kwargs:
            return ConstantVariable(len(self.value))
        unimplemented(f"dict.{name} of a dict keyed by objects (only reads are traced)")

    def reconstruct(self, cg):
        self.source.reconstruct(cg)

    def __repr__(self):
        return f"IdentityKeyedDictVariable({len(self.value)} items)"
