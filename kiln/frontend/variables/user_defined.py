"""Instances and classes defined by the user (read-only while tracing, for now)."""

import collections
import contextlib
import enum
import inspect
import os
import types
import typing

import torch

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.source import AttrSource, GetItemSource, PlainAttrSource, finalizer_class
from kiln.frontend.variables import dict_subclass, logging_vars, stdlib
from kiln.frontend.variables.base import (
    PythonValueVariable,
    VariableTracker,
    wrap_constant_like,
    wrap_loaded,
    wrap_value,
)
from kiln.frontend.variables.constant import ConstantVariable, is_literal
from kiln.frontend.variables.ctx_managers import NullContextVariable, special_instance
from kiln.frontend.variables.dict_objects import (
    AttrDictVariable,
    DictMethodVariable,
    DictReadVariable,
    EnvironReadVariable,
)
from kiln.frontend.variables.dicts import NEW_OBJECT as dicts_new_object
from kiln.frontend.variables.dicts import (
    ConstDictVariable,
    make_mapping_proxy,
)
from kiln.frontend.variables.dicts import class_method as dict_class_method
from kiln.frontend.variables.exceptions import (
    ObservedException,
    raise_observed,
)
from kiln.frontend.variables.functions import (
    UserMethodVariable,
    bind_args,
    bound_classmethod,
    inline_call,
    pin_class_attr,
)
from kiln.frontend.variables.instance_dict import instance_dict_view
from kiln.frontend.variables.lists import TupleVariable, make_deque
from kiln.frontend.variables.misc import ConstantObjectVariable, is_frozen
from kiln.frontend.variables.object_new import ObjectNewVariable
from kiln.frontend.variables.user_attrs import (
    descriptor_get,
    descriptor_set,
    has_instance_dict,
    instance_static,
    is_data_descriptor,
    no_attribute_message,
    python_get,
    python_set,
)
from kiln.frontend.variables.user_protocol import (
    mapping_view,
    user_iter_items,
    user_truthy,
)

_ABSENT = object()
# (tx, class variable, args, kwargs) -> the new instance, or None: makers of instances of user
# subclasses of other builtins, registered by their modules (set_subclass.py)
INSTANCE_MAKERS = []
# (class variable, name) -> the attribute's variable, or None: class attributes modelled by other
# modules, registered by them (class_queries.py: __subclasses__)
CLASS_ATTRS = []


class UserDefinedClassVariable(PythonValueVariable):
    """A class object (guarded by identity)."""

    def var_getattr(self, tx, name):
        if name == "apply":
            from kiln.frontend.variables import autograd_function as af

            if af.is_autograd_function(self.value):
                return af.AutogradFunctionApplyVariable(self.value, self.source)
        modelled = stdlib.class_method(self.value, name)  # OrderedDict.fromkeys ...
        if self.value is object and name == "__new__":
            modelled = ObjectNewVariable()  # Note [Objects: a class's own __new__]
        if modelled is None:
            modelled = dict_class_method(self.value, name)  # SimpleDict.values (dict's)
        if modelled is None and name == "fromkeys":
            modelled = dict_subclass.subclass_fromkeys(self)
        for attr in CLASS_ATTRS:
            if modelled is None:
                modelled = attr(self, name)
        if modelled is not None:
            return modelled
        try:
            static = inspect.getattr_static(self.value, name)
        except AttributeError:
            _dunder_missing(self.value, name)
            if self.hasattr(tx, name).value is False and type(self.value) is type:
                message = f"type object {self.value.__name__!r} has no attribute {name!r}"
                raise_observed(tx, AttributeError, message)
            unimplemented(f"class {self.value.__name__} has no attribute {name!r}")
        if isinstance(static, staticmethod):  # (read from its source: no copy held by kiln)
            src = AttrSource(self.source, name) if self.source is not None else None
            return wrap_value(tx, static.__func__, src)
        if isinstance(static, classmethod):
            return bound_classmethod(static, self, tx)
        src = AttrSource(self.source, name) if self.source is not None else None
        value = getattr(self.value, name)
        if (
            src is None
            and isinstance(value, types.BuiltinMethodType)
            and value.__self__ is self.value
        ):
            # (`A.mro` of a class made in the frame: rebuilt as a constant, it would stay bound
            # to the class made while tracing, not to the one the transformed code makes)
            unimplemented(f"{self.value.__name__}.{name}, a C method bound to the class")
        if src is None and isinstance(value, types.MethodType) and value.__self__ is self.value:
            # a metaclass's Python method (`D.register` of an ABC made in the frame): bound to
            # this class variable, so that a rebuild binds it to the class the transformed code
            # makes, not to the class made while tracing
            return UserMethodVariable(value.__func__, self)
        return wrap_value(tx, value, src)

    def hasattr(self, tx, name):
        """hasattr(cls, name); the keys of the class dicts along the MRO are guarded (a class
        attribute set later recompiles)."""
        cls = self.value
        found = hasattr(cls, name)
        if self.source is None or type(cls) is not type:
            return ConstantVariable(found)
        mro = AttrSource(self.source, "__mro__")
        for i, k in enumerate(cls.__mro__):
            if k.__module__ != "builtins":
                keys = (types.MappingProxyType, tuple(vars(k)))
                tx.output.guards.add(
                    GuardKind.DICT_KEYS, AttrSource(GetItemSource(mro, i), "__dict__"), keys
                )
        return ConstantVariable(found)

    def call_function(self, tx, args, kwargs):
        cls = self.value
        if isinstance(cls, type) and issubclass(cls, torch.autograd.Function):
            from kiln.frontend.variables import autograd_function as af

            if af.is_autograd_function(cls):  # `MyFn()` (deprecated): only its .apply is used
                return af.function_instance(tx, cls, self.source, args, kwargs)
        if finalizer_class(cls) is not None:  # Note [Finalizers: objects made in the frame]
            unimplemented(
                f"creating a {cls.__qualname__}, whose class has a Python __del__ (Python runs it"
                " when the last reference drops; the trace cannot place that)"
            )
        made = special_instance(tx, cls, args, kwargs)  # exceptions, contextlib managers
        if made is not None:
            return made
        if cls is contextlib.nullcontext and len(args) <= 1 and set(kwargs) <= {"enter_result"}:
            result = args[0] if args else kwargs.get("enter_result", ConstantVariable(None))
            return NullContextVariable(result)
        if cls is collections.deque:
            return make_deque(tx, args, kwargs)
        if cls is collections.defaultdict and len(args) <= 2:
            factory = args[0] if args else None
            if factory is not None and factory.is_python_constant():
                factory = None if factory.as_python_constant() is None else factory
            d = ConstDictVariable({}, user_cls=cls, default_factory=factory)
            if len(args) == 2 or kwargs:  # defaultdict(f, items, **more): dict's update
                d.call_method(tx, "update", args[1:], kwargs)
            return d
        from kiln.frontend.variables.builtin import BUILTIN_CLASSES, BuiltinVariable

        if cls in BUILTIN_CLASSES:
            return BuiltinVariable(cls).call_function(tx, args, kwargs)
        if cls is types.MappingProxyType:  # Note [Dicts: mappingproxy]
            proxy = make_mapping_proxy(args, kwargs)
            if proxy is not None:
                return proxy
        view = mapping_view(cls, args, kwargs)  # Note [Objects: mapping views of user mappings]
        if view is not None:
            return view
        if typing.is_typeddict(cls):  # a TypedDict's class call is dict(...) (its metaclass)
            return BuiltinVariable(dict).call_function(tx, args, kwargs)
        if cls is collections.OrderedDict:  # the dict, keeping the class (move_to_end ...)
            d = BuiltinVariable(dict).call_function(tx, args, kwargs)
            d.user_cls = cls
            return d
        if issubclass(cls, tuple) and hasattr(cls, "_fields") and cls.__new__ is not tuple.__new__:
            # a namedtuple: bind the fields like its generated __new__ does
            bound = bind_args(tx, cls.__new__, [self, *args], kwargs, None)
            return TupleVariable([bound[f] for f in cls._fields], tuple_cls=cls)
        if issubclass(cls, enum.Enum) and len(args) == 1 and not kwargs:
            return _enum_lookup(tx, cls, args[0])
        for make in INSTANCE_MAKERS:  # instances of subclasses of other builtins (sets)
            made = make(tx, self, args, kwargs)
            if made is not None:
                return made
        if _plain_class(cls, own_new=True):
            new = inspect.getattr_static(cls, "__new__")
            if isinstance(new, staticmethod):  # Notes [Dicts: __new__ of subclasses],
                # [Objects: a class's own __new__] (object_new.py)
                src = AttrSource(self.source, "__new__") if self.source is not None else None
                obj = inline_call(tx, new.__func__, [self, *args], kwargs, src)
                if isinstance(obj, NewObjectVariable) and obj.cls is cls:
                    obj.class_source = self.source
                    return self._init(tx, obj, args, kwargs)
                if issubclass(obj.python_type(), cls):
                    unimplemented(f"{cls.__qualname__}.__new__ returns {obj}")
                return obj  # (not an instance of cls: no __init__)
        if _plain_class(cls):
            obj = NewObjectVariable(cls)
            obj.class_source = self.source
            return self._init(tx, obj, args, kwargs)
        unimplemented(f"creating an instance of {cls.__qualname__} while tracing")

    def _init(self, tx, obj, args, kwargs):
        """`obj.__init__(*args, **kwargs)` of a new instance of this class, then the object."""
        cls = self.value
        init = inspect.getattr_static(cls, "__init__")
        if isinstance(init, types.FunctionType):
            # (a wrapped __init__, as transformers' metaclass makes, reads its cells by source)
            src = AttrSource(self.source, "__init__") if self.source is not None else None
            result = inline_call(tx, init, [obj, *args], kwargs, src)
            if not (result.is_python_constant() and result.as_python_constant() is None):
                if not result.is_python_constant():
                    unimplemented(f"{cls.__qualname__}.__init__ returns a traced value")
                kind = type(result.as_python_constant()).__name__
                raise_observed(tx, TypeError, f"__init__() should return None, not '{kind}'")
        elif init in _DICT_INITS:
            DictMethodVariable(obj, "__init__").call_function(tx, list(args), kwargs)
        elif args or kwargs:
            unimplemented(f"{cls.__qualname__}() takes no arguments")
        return obj

    def reconstruct(self, cg):
        if self.source is not None:
            return super().reconstruct(cg)
        from kiln.frontend.variables.classes import load_class

        load_class(cg, self.value)

    def __repr__(self):
        return f"UserDefinedClassVariable({self.value.__qualname__})"


# Note [Objects: a Python __getattribute__]
# `obj.name` on an object whose class defines __getattribute__ in Python (Hugging Face's configs
# map `num_hidden_layers` to `n_layer` through `attribute_map`) runs that function: it is inlined,
# and the `super().__getattribute__(key)` / `object.__getattribute__(self, key)` it ends with is
# the plain lookup (plain_getattr). A class that also has __getattr__ gets it called, inlined,
# when the inlined __getattribute__ raises AttributeError, as Python's slot does. A value the plain lookup finds in the instance dict
# is guarded as `obj.__dict__[name]`, the dict read once per guard: as `obj.name` each guard
# check would run the Python hook again (two frames per config read, 20 us of a decoder's
# guard).


_SLOT = types.MemberDescriptorType


class UserDefinedObjectVariable(VariableTracker):
    """An instance of a user class, reached from a source (type-guarded)."""

    def __init__(self, value, **kw):
        super().__init__(**kw)
        self.value = value

    def python_type(self):
        return type(self.value)

    def hasattr(self, tx, name):
        if tx.output.side_effects.is_deleted(self, name):
            try:
                self._deleted_attr(tx, name)
            except ObservedException:
                return ConstantVariable(False)
        if tx.output.side_effects.load_attr(self, name) is not None:
            return ConstantVariable(True)
        if isinstance(instance_static(type(self.value), name, None), property):
            return hasattr_by_getattr(tx, self, name)
        if isinstance(instance_static(type(self.value), name, None), _SLOT):
            if hasattr(self.value, name):  # read through its source: guarded
                return hasattr_by_getattr(tx, self, name)
            unimplemented(
                f"hasattr of the unset __slots__ field {name!r} (no guard keeps it unset)"
            )
        found = self.has_plain_attr(tx, name)
        hook = instance_static(type(self.value), "__getattr__", None)
        if found is None and isinstance(hook, types.FunctionType):
            if name not in getattr(self.value, "__dict__", {}):
                return hasattr_by_getattr(tx, self, name)  # (the hook is inlined)
        return ConstantVariable(hasattr(self.value, name) if found is None else found)

    def has_plain_attr(self, tx, name):
        """Whether the object has attribute `name` in its class or instance __dict__ (the dict's
        keys are guarded), or None when Python could find it otherwise (__getattr__, slots)."""
        cls = type(self.value)
        if instance_static(cls, name, _ABSENT) is not _ABSENT:
            return True
        d = getattr(self.value, "__dict__", None)
        if type(d) is not dict or self.source is None or not all(type(k) is str for k in d):
            return None
        source = AttrSource(self.source, "__dict__")
        tx.output.guards.add(GuardKind.DICT_KEYS, source, (dict, tuple(d)))
        if hasattr(cls, "__getattr__") or cls.__getattribute__ is not object.__getattribute__:
            return None
        return name in d

    def _deleted_attr(self, tx, name):
        """`obj.name` after `del obj.name` in the frame: AttributeError when nothing else
        answers (no class attribute, no __getattr__), else a break."""
        cls = type(self.value)
        if instance_static(cls, name, None) is None and not hasattr(cls, "__getattr__"):
            raise_observed(tx, AttributeError, f"{cls.__name__!r} object has no attribute {name!r}")
        unimplemented(f"attribute .{name} read after its deletion (the class has one too)")

    def var_getattr(self, tx, name):
        cls = type(self.value)
        hook = instance_static(cls, "__getattribute__", None)
        if type(hook) is not type(object.__getattribute__) and not isinstance(
            hook, types.FunctionType
        ):
            unimplemented(f"attribute of a {cls.__name__} (its __getattribute__ is no function)")
        if isinstance(hook, types.FunctionType) and name != "__class__":
            # Note [Objects: a Python __getattribute__]
            fallback = instance_static(cls, "__getattr__", None)
            if fallback is not None and not isinstance(fallback, types.FunctionType):
                unimplemented(f"{cls.__name__}.__getattr__ (not a Python function)")
            src = self._class_attr_source("__getattribute__")
            if fallback is None:
                return inline_call(tx, hook, [self, ConstantVariable(name)], {}, src)
            try:
                return inline_call(tx, hook, [self, ConstantVariable(name)], {}, src)
            except ObservedException as e:
                if not issubclass(e.var.cls, AttributeError):
                    raise
            src = self._class_attr_source("__getattr__")  # (as Python's slot calls it then)
            return inline_call(tx, fallback, [self, ConstantVariable(name)], {}, src)
        return self.plain_getattr(tx, name)

    def plain_getattr(self, tx, name):
        """`object.__getattribute__(obj, name)` as Python runs it (no custom __getattribute__)."""
        if self.source is None:
            unimplemented(f"attribute {name!r} of an object without a source")
        if self.value is os.environ and name in ("get", "__getitem__", "__contains__"):
            return EnvironReadVariable(self, name)
        if type(self.value) is dict and name in ("get", "__getitem__", "__contains__"):
            return DictReadVariable(self, name)  # (a dict with keys kiln does not wrap)
        if isinstance(self.value, dict) and type(self.value) is not dict:
            method = dict_subclass.read_method(tx, self, name)  # `d.get(k)` of a subclass
            if method is not None:
                return method
        if logging_vars.is_logger(self.value):
            method = logging_vars.logger_method(self, name)
            if method is not None:
                return method
        if tx.output.side_effects.is_deleted(self, name):
            self._deleted_attr(tx, name)
        stored = tx.output.side_effects.load_attr(self, name)
        if stored is not None:
            return stored
        cls = type(self.value)
        if name == "__class__" and plain_class_attr(cls):  # pinned by the TYPE_MATCH guard
            return wrap_constant_like(tx, cls)
        if name == "__dict__":
            view = instance_dict_view(self)  # Note [Objects: the instance __dict__ as a view]
            if view is not None:
                return view
        static = instance_static(cls, name, None)
        if isinstance(static, types.MemberDescriptorType) and hasattr(self.value, name):
            # a __slots__ field (stores into it are breaks): read like an instance attribute
            return wrap_value(tx, getattr(self.value, name), AttrSource(self.source, name))
        if name in _BACKWARD_CTX_READS and isinstance(self.value, _BACKWARD_CTX):
            # a custom Function's ctx inside a compiled backward: what forward saved, and which
            # inputs need a gradient (read through the source, as the guards read them)
            return wrap_value(tx, getattr(self.value, name), AttrSource(self.source, name))
        if static is not None and hasattr(static, "__set__") and not isinstance(static, property):
            if python_get(static) is not None:  # Note [Objects: data descriptors]
                return descriptor_get(
                    tx, self, cls, name, static, AttrSource(self.source, "__class__")
                )
            view = None if hasattr(type(static), "__get__") else instance_dict_view(self)
            if view is None or name not in view._keys(tx):
                unimplemented(f"data descriptor {name!r} of {cls.__name__}")
            return view._value(tx, name)  # (no __get__: the instance dict first, as Python)
        d = getattr(self.value, "__dict__", None)
        if d is not None and name in d and not isinstance(static, property):
            # (a property is a data descriptor: it wins over the instance dict)
            source = AttrSource(self.source, name)
            if cls.__getattribute__ is not object.__getattribute__:
                # Note [Objects: a Python __getattribute__]: the guard reads the instance dict
                source = GetItemSource(AttrSource(self.source, "__dict__"), name)
                return wrap_value(tx, d[name], source)
            return wrap_loaded(tx, d[name], source)
        if static is not None and d is not None and self.source is not None:
            # a class attribute is read: an instance attribute set later would win over it
            tx.output.guards.add(GuardKind.NOT_IN, AttrSource(self.source, "__dict__"), name)
        if static is None:
            _dunder_missing(cls, name)
            if hasattr(cls, "__getattr__"):
                self.has_plain_attr(tx, name)  # (guards the instance dict's keys)
                return call_getattr_hook(tx, self, name)
            if self.has_plain_attr(tx, name) is False:
                raise_observed(
                    tx, AttributeError, f"{cls.__name__!r} object has no attribute {name!r}"
                )
            unimplemented(f"{cls.__name__} object has no attribute {name!r}")
        if isinstance(static, staticmethod):
            pin_class_attr(tx, self._class_attr_source(name), static.__func__)
            return wrap_value(tx, static.__func__, None)
        if isinstance(static, classmethod):
            if isinstance(static.__func__, property):  # (`cls.name` would run its getter)
                owner = next(i for i, k in enumerate(cls.__mro__) if name in vars(k))
                mro = GetItemSource(self._class_attr_source("__mro__"), owner)
                held = GetItemSource(AttrSource(mro, "__dict__"), name)
                pin_class_attr(tx, AttrSource(held, "__func__"), static.__func__)
            else:
                pin_class_attr(tx, self._class_attr_source(name, "__func__"), static.__func__)
            return bound_classmethod(static, wrap_constant_like(tx, cls), tx)
        if isinstance(static, types.FunctionType):
            source = self._class_attr_source(name)
            pin_class_attr(tx, source, static)
            return UserMethodVariable(static, self, source=source)
        if isinstance(static, property) and isinstance(static.fget, types.FunctionType):
            source = self._class_attr_source(name, "fget")
            pin_class_attr(tx, source, static.fget)
            return inline_call(tx, static.fget, [self], {}, source)
        if python_get(static) is not None:  # Note [Objects: descriptors with a Python __get__]
            return descriptor_get(tx, self, cls, name, static, AttrSource(self.source, "__class__"))
        if isinstance(instance_static(cls, "__getattribute__", None), types.FunctionType):
            # (reached from the inlined hook) Note [Guards: plain reads skip a Python ...]
            value = object.__getattribute__(self.value, name)
            return wrap_value(tx, value, PlainAttrSource(self.source, name))
        # (a property implemented in C, e.g. pybind11's def_readonly: read, guarded by source)
        return wrap_value(tx, getattr(self.value, name), AttrSource(self.source, name))

    def call_function(self, tx, args, kwargs):
        if stdlib.is_lru_cached(self.value):  # Note [Stdlib: lru_cache'd functions]
            return stdlib.call_lru_cached(tx, self, args, kwargs)
        call = instance_static(type(self.value), "__call__", None)
        if isinstance(call, types.FunctionType):
            return inline_call(tx, call, [self, *args], kwargs, self._class_attr_source("__call__"))
        what = getattr(self.value, "__qualname__", None) or type(self.value).__name__
        unimplemented(f"call to {what} (a {type(self.value).__name__}, not traced)")

    def truthy(self, tx):
        if isinstance(self.value, dict):
            found = dict_subclass.storage_truthy(tx, self)
            if found is not None:
                return found
        return user_truthy(tx, self)

    def unpack_var_sequence(self, tx):
        if isinstance(self.value, dict) and dict_subclass.c_owner(type(self.value), "__iter__"):
            storage = dict_subclass.storage_of(tx, self)
            if storage is not None:
                return storage.unpack_var_sequence(tx)
        return user_iter_items(tx, self)

    def __repr__(self):
        return f"UserDefinedObjectVariable({type(self.value).__name__})"


def plain_class_attr(cls):
    """Whether `obj.__class__` is `type(obj)` (no class in the MRO defines a `__class__`)."""
    return inspect.getattr_static(cls, "__class__", None) is object.__dict__["__class__"]


DICT_BASES = (dict, collections.OrderedDict)
_DICT_INITS = (dict.__init__, collections.OrderedDict.__init__)
_BACKWARD_CTX = torch.autograd.function.BackwardCFunction
_BACKWARD_CTX_READS = ("saved_tensors", "needs_input_grad")
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class defined in Python


def dict_base(cls):
    """The C dict class (dict or OrderedDict) a user class derives from, or None."""
    for k in cls.__mro__:
        if k in DICT_BASES:
            return k
    return None


# Note [Classes: metaclasses that keep type.__call__]
# `cls(...)` runs the metaclass's __call__. A metaclass that does not override it (ABCMeta, or
# transformers' _BCCacheNameMeta, which only hooks class-level __setattr__) makes instances exactly
# as `type` does: __new__ then __init__. Such classes are built in the graph as plain classes are;
# a metaclass with its own __call__ (EnumMeta, singletons, registries) is not inlined here.


def _plain_metaclass(meta):
    """Whether instances of a class with this metaclass are made by type.__call__."""
    return isinstance(meta, type) and issubclass(meta, type) and meta.__call__ is type.__call__


def _plain_class(cls, own_new=False):
    """A class whose instances kiln can build itself: plain attribute bags, and subclasses of
    dict/OrderedDict (Hugging Face's ModelOutput dataclasses) whose other bases are Python.
    own_new: the class may have a Python __new__ (inlined by the caller)."""
    if not _plain_metaclass(type(cls)) or getattr(cls, "__abstractmethods__", None):
        return False  # (an abstract class: Python raises)
    base = dict_base(cls)
    python_new = isinstance(inspect.getattr_static(cls, "__new__"), staticmethod)
    if not (own_new and python_new) and cls.__new__ is not (
        object.__new__ if base is None else dict.__new__
    ):
        return False
    if not all(k is object or k in DICT_BASES or k.__flags__ & _HEAPTYPE for k in cls.__mro__):
        return False
    if issubclass(cls, (torch.nn.Module, torch.Tensor, BaseException)):
        return False
    if not _plain_slots(cls):
        return False
    if instance_static(cls, "__del__", None) is not None:
        return False  # (an object made in the graph is only made if it outlives it: no __del__)
    setattr_ = inspect.getattr_static(cls, "__setattr__")
    if setattr_ is not object.__setattr__ and not isinstance(setattr_, types.FunctionType):
        return False
    if not isinstance(instance_static(cls, "__getattr__", _NO_HOOK), types.FunctionType):
        return False  # (a Python __getattr__ is inlined)
    getattribute = instance_static(cls, "__getattribute__")
    if type(getattribute) is not type(object.__getattribute__):
        return False  # (its own __getattribute__: a function, or any other descriptor)
    init = inspect.getattr_static(cls, "__init__")
    return init is object.__init__ or init in _DICT_INITS or isinstance(init, types.FunctionType)


def _plain_slots(cls):
    """Instances keep their attributes in a __dict__, or in plain __slots__ fields (member
    descriptors, set by make_object with object.__setattr__; torch's OrderedSet)."""
    for k in cls.__mro__:
        if not k.__flags__ & _HEAPTYPE:
            continue
        slots = vars(k).get("__slots__", ())
        slots = (slots,) if isinstance(slots, str) else slots
        for name in slots:
            if name in ("__dict__", "__weakref__"):
                continue
            if not isinstance(vars(k).get(name), types.MemberDescriptorType):
                return False
    return True


def make_object(cls, attrs, items=None):
    """The transformed code's way to build an object made while tracing (and its dict items,
    stored with the C dict class's own __setitem__, bypassing overrides)."""
    return fill_object(empty_object(cls), attrs, items)


def empty_object(cls):
    """An instance of `cls` without attributes (never a Python __new__ again)."""
    return (dict_base(cls) or object).__new__(cls)


def fill_object(obj, attrs, items=None):
    """Store an object's traced attributes (and dict items) into it: the second half of
    make_object, for objects that reach themselves (Note [Rebuilding: objects in a cycle])."""
    cls = type(obj)
    if items is not None:
        setitem = dict_base(cls).__setitem__
        for k, v in items.items():
            setitem(obj, k, v)
    for k, v in attrs.items():
        # one store per attribute, in order, as the traced code made them (the instance keeps
        # the class's shared keys, PEP 412, as eager's objects do; `obj.__dict__.update` would
        # make a dict of its own); a name behind a data descriptor, or a key that is no
        # attribute name (`obj.__dict__[1] = v`), goes to the dict itself
        if type(k) is not str:
            obj.__dict__[k] = v
        elif hasattr(instance_static(cls, k, None), "__set__") and not isinstance(
            instance_static(cls, k), types.MemberDescriptorType
        ):
            obj.__dict__[k] = v
        else:
            object.__setattr__(obj, k, v)
    return obj


class NewObjectVariable(VariableTracker):
    """An instance of a plain user class created while tracing: its attributes (and, for a dict
    subclass, its dict items), symbolically."""

    def __init__(self, cls, **kw):
        super().__init__(**kw)
        self.cls = cls
        self.attrs = {}
        self.dict_base = dict_base(cls)
        self.dict_items = {} if self.dict_base is not None else None
        self.class_source = None  # where the class was read when `cls(...)` made it

    def python_type(self):
        return self.cls

    def _class_attr_source(self, name, *more):
        """`cls.name[.more]` through where the class was read (its methods' cells then have a
        source: `Foo(...)` inside Foo's own methods)."""
        if self.source is not None or self.class_source is None:
            return super()._class_attr_source(name, *more)
        src = AttrSource(self.class_source, name)
        for m in more:
            src = AttrSource(src, m)
        return src

    def _class_source(self):
        """Where the class can be read: `obj.__class__`, or where `cls(...)` read it."""
        if self.source is not None:
            return AttrSource(self.source, "__class__")
        return self.class_source

    def store_attr(self, name, value):
        self.attrs[name] = value

    def setattr(self, tx, name, value):
        """`obj.name = value`: the class's __setattr__ or data descriptor if it has one."""
        tx.output.side_effects.mutate_new_object(self)
        static = instance_static(self.cls, name, None)
        if isinstance(static, property):
            if static.fset is None:
                unimplemented(f"property {self.cls.__name__}.{name} has no setter")
            inline_call(tx, static.fset, [self, value], {}, None)
            return
        slot = (
            isinstance(static, types.MemberDescriptorType)
            and static.__objclass__ in self.cls.__mro__
        )
        if python_set(static) is not None:  # Note [Objects: data descriptors]
            descriptor_set(tx, self, self.cls, name, static, self._class_source(), value)
            return
        if static is not None and hasattr(static, "__set__") and not slot:
            unimplemented(f"assignment to the descriptor {self.cls.__name__}.{name}")
        setattr_ = instance_static(self.cls, "__setattr__")
        if isinstance(setattr_, types.FunctionType):
            inline_call(tx, setattr_, [self, ConstantVariable(name), value], {}, None)
            return
        if not slot and not has_instance_dict(self.cls):  # `object()`, a class with __slots__
            if static is not None:
                unimplemented(f"assignment to the read-only {self.cls.__name__}.{name}")
            raise_observed(tx, AttributeError, no_attribute_message(self.cls, name))
        self.store_attr(name, value)

    def delattr(self, tx, name):
        """`del obj.name`: the class's own Python __delattr__, else out of its own attributes."""
        delattr_ = instance_static(self.cls, "__delattr__")
        if isinstance(delattr_, types.FunctionType):
            inline_call(tx, delattr_, [self, ConstantVariable(name)], {}, None)
            return
        if delattr_ is not object.__delattr__:
            unimplemented(
                f"attribute deletion .{name} of a {self.cls.__name__} (its own __delattr__)"
            )
        self.plain_delattr(tx, name)

    def plain_delattr(self, tx, name):
        """`object.__delattr__(obj, name)`: out of its own attributes (no descriptor)."""
        static = instance_static(self.cls, name, None)
        if static is not None and (hasattr(static, "__set__") or hasattr(static, "__delete__")):
            unimplemented(f"attribute deletion .{name} through the descriptor {self.cls.__name__}")
        if name not in self.attrs:
            message = f"{self.cls.__name__!r} object has no attribute {name!r}"
            raise_observed(tx, AttributeError, message)
        tx.output.side_effects.mutate_new_object(self)
        del self.attrs[name]

    def hasattr(self, tx, name):
        static = instance_static(self.cls, name, None)
        if isinstance(static, types.MemberDescriptorType):  # a __slots__ field: set, or not
            return ConstantVariable(name in self.attrs)
        if name not in self.attrs and (
            isinstance(static, property) or (static is None and "__getattr__" in dir(self.cls))
        ):
            return hasattr_by_getattr(tx, self, name)
        found = instance_static(self.cls, name, _ABSENT) is not _ABSENT
        return ConstantVariable(name in self.attrs or found)

    def var_getattr(self, tx, name):
        if name in self.attrs:
            static = instance_static(self.cls, name, None)
            if not is_data_descriptor(static) or isinstance(static, types.MemberDescriptorType):
                return self.attrs[name]  # (a __slots__ field is kept in attrs too)
            # Note [Objects: data descriptors]: the class's descriptor wins over the dict
            if isinstance(static, property) and static.fget is not None:
                return inline_call(tx, static.fget, [self], {}, None)
            if python_get(static) is None:
                unimplemented(f"data descriptor {name!r} of {self.cls.__name__} (not in Python)")
            return descriptor_get(tx, self, self.cls, name, static, self._class_source())
        if name == "__class__" and plain_class_attr(self.cls):
            return wrap_constant_like(tx, self.cls)
        if name == "__dict__" and has_instance_dict(self.cls):
            return AttrDictVariable(self)
        try:
            static = instance_static(self.cls, name)
        except AttributeError:
            _dunder_missing(self.cls, name)
            if "__getattr__" in dir(self.cls):
                return call_getattr_hook(tx, self, name)
            message = f"{self.cls.__name__!r} object has no attribute {name!r}"
            raise_observed(tx, AttributeError, message)
        if isinstance(static, types.FunctionType):
            return UserMethodVariable(static, self)
        if isinstance(static, property) and static.fget is not None:
            return inline_call(tx, static.fget, [self], {}, None)
        if isinstance(static, staticmethod):
            return wrap_value(tx, static.__func__, None)
        if isinstance(static, classmethod):  # (cls read where `Cls(...)` read it: its
            # attributes then have sources, `cls.class_variable.x` of an object as one)
            source = self._class_source()
            cls_var = wrap_constant_like(tx, self.cls) if source is None else None
            return bound_classmethod(static, cls_var or wrap_value(tx, self.cls, source), tx)
        if self.dict_base is not None and _dict_method_owner(self.cls, name) is not None:
            return DictMethodVariable(self, name)
        if is_literal(static):
            return ConstantVariable(static)
        if is_frozen(static):
            return ConstantObjectVariable(static)
        if isinstance(static, type):  # `_base_type = BaseException`: a class held by the class
            return wrap_constant_like(tx, static)
        if python_get(static) is not None:  # Note [Objects: descriptors with a Python __get__]
            return descriptor_get(tx, self, self.cls, name, static, self._class_source())
        if name == "__weakref__" and isinstance(static, types.GetSetDescriptorType):
            return ConstantVariable(None)  # (made here: kiln makes no weak reference to it)
        if hasattr(type(static), "__get__"):  # (`cls.name` would call it without the object)
            unimplemented(f"the descriptor {self.cls.__name__}.{name} ({type(static).__name__})")
        src = self._class_attr_source(name)
        if src is not None:  # (e.g. a tuple of types: read through the class, guarded)
            return wrap_value(tx, static, src)
        unimplemented(f"class attribute {self.cls.__name__}.{name}")

    def call_function(self, tx, args, kwargs):
        """`obj(...)`: the class's Python __call__, inlined."""
        owner = next((k for k in self.cls.__mro__ if "__call__" in vars(k)), None)
        call = None if owner is None else vars(owner)["__call__"]
        if isinstance(call, types.FunctionType):
            return inline_call(tx, call, [self, *args], kwargs, None)
        if call is None:
            raise_observed(tx, TypeError, f"{self.cls.__name__!r} object is not callable")
        unimplemented(f"call of a {self.cls.__name__} ({type(call).__name__} __call__)")

    def truthy(self, tx):
        if self.dict_base is not None:
            if "__bool__" not in dir(self.cls) and _dict_method_owner(self.cls, "__len__"):
                return bool(self.dict_items)
            unimplemented(f"bool() of a {self.cls.__name__} (a dict subclass)")
        return user_truthy(tx, self)

    def unpack_var_sequence(self, tx):
        if self.dict_base is not None and _dict_method_owner(self.cls, "__iter__") is not None:
            return [ConstantVariable(k) for k in self.dict_items]
        return user_iter_items(tx, self)

    def reconstruct(self, cg):
        from kiln.frontend.variables.classes import load_class

        cg.load_object(make_object, push_null=True)
        load_class(cg, self.cls)
        load_attrs(cg, self.attrs)
        if self.dict_items is None:
            cg.extend(emit.call(2))
            return
        self._load_items(cg)
        cg.extend(emit.call(3))

    @property
    def rebuilt_in_two_steps(self):
        """Whether PyCodegen builds this object empty, then fills it (Note [Rebuilding: objects
        in a cycle]): a plain object's own rebuild, not a subclass's."""
        return type(self).reconstruct is NewObjectVariable.reconstruct

    def reconstruct_empty(self, cg):
        """Push the object without its attributes (its values are stored by `reconstruct_fill`)."""
        from kiln.frontend.variables.classes import load_class

        cg.load_object(empty_object, push_null=True)
        load_class(cg, self.cls)
        cg.extend(emit.call(1))

    def reconstruct_fill(self, cg, name):
        """Store the attributes into the object held in the temporary `name`."""
        cg.load_object(fill_object, push_null=True)
        cg.extend(emit.load_fast(name))
        load_attrs(cg, self.attrs)
        if self.dict_items is None:
            cg.extend(emit.call(2))
        else:
            self._load_items(cg)
            cg.extend(emit.call(3))
        cg.extend(emit.pop_top())

    def _load_items(self, cg):
        for k, v in self.dict_items.items():
            cg.extend(emit.load_const(k))
            cg.reconstruct(v)
        cg.extend(emit.build_map(len(self.dict_items)))

    def __repr__(self):
        return f"NewObjectVariable({self.cls.__name__})"


def _NO_HOOK():
    pass


def _dunder_missing(cls, name):
    """A special method the class lacks: kiln asks for one where Python's operators and builtins
    look it up on the type (len(), in, ...), which raise TypeError or fall back, not
    AttributeError: not modelled."""
    if name.startswith("__") and name.endswith("__"):
        unimplemented(f"{getattr(cls, '__name__', cls)} has no {name}")


# the plain attribute lookup (object's, re-exported by the builtin containers as their own slot)
_GENERIC_GETATTRIBUTE = frozenset(
    t.__getattribute__ for t in (object, dict, list, set, frozenset, tuple, collections.deque)
)


def call_getattr_hook(tx, obj, name):
    """`obj.name` not found the ordinary way: the class's Python __getattr__, inlined."""
    cls = obj.python_type()
    hook = instance_static(cls, "__getattr__")
    if hook is dict.get and isinstance(obj, UserDefinedObjectVariable):
        method = dict_subclass.read_method(tx, obj, "get")  # `__getattr__ = dict.get`
        if method is not None:
            return method.call_function(tx, [ConstantVariable(name)], {})
    if not isinstance(hook, types.FunctionType) or (
        cls.__getattribute__ not in _GENERIC_GETATTRIBUTE
    ):
        unimplemented(f"{cls.__name__}.__getattr__ ({type(hook).__name__})")
    source = obj._class_attr_source("__getattr__")
    return inline_call(tx, hook, [obj, ConstantVariable(name)], {}, source)


def hasattr_by_getattr(tx, obj, name):
    """hasattr as Python runs it: the attribute is read (a property's getter is inlined) and an
    AttributeError it raises means False."""
    try:
        obj.var_getattr(tx, name)
    except ObservedException as e:
        if not issubclass(e.var.cls, AttributeError):
            raise
        return ConstantVariable(False)
    return ConstantVariable(True)


def _enum_lookup(tx, cls, value):
    """`Color(1)`: the member with that value (Python's lookup; ValueError when there is none)."""
    if type(cls).__call__ is not enum.EnumMeta.__call__ or not value.is_python_constant():
        unimplemented(f"{cls.__qualname__}({value}) (a custom enum lookup)")
    v = value.as_python_constant()
    for member in cls.__members__.values():
        if member._value_ == v or member._value_ is v:
            return ConstantVariable(member)  # (found: a custom _missing_ is never asked)
    if cls._missing_.__func__ is not enum.Enum._missing_.__func__:
        unimplemented(f"{cls.__qualname__}({value}) (its own _missing_)")
    raise_observed(tx, ValueError, f"{v!r} is not a valid {cls.__qualname__}")


def _dict_method_owner(cls, name):
    """The C dict class whose method `name` an instance of `cls` uses (None: a Python override
    or no such method)."""
    for k in cls.__mro__:
        if name in vars(k):
            return k if k in DICT_BASES or k is object else None
    return None


def _new_dict_object(cls):
    """A new instance of a dict subclass `cls` (dict.__new__(cls)), or None."""
    if _plain_class(cls, own_new=True):
        return NewObjectVariable(cls)
    return None


dicts_new_object["make"] = _new_dict_object


class ObjectInitVariable(VariableTracker):
    """`super().__init__()` reaching object.__init__: nothing to do."""

    def call_function(self, tx, args, kwargs):
        if args or kwargs:
            unimplemented("object.__init__() takes no arguments")
        return ConstantVariable(None)


def load_attrs(cg, attrs):
    """Push a dict of an object's instance attributes (name -> traced value), rebuilt."""
    for k, v in attrs.items():
        cg.extend(emit.load_const(k))
        cg.reconstruct(v)
    cg.extend(emit.build_map(len(attrs)))
