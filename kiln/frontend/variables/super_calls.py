"""`super()` and `super(cls, obj)` while tracing: attribute lookup from after `cls` in the MRO."""

import types

import torch

from kiln.exc import unimplemented
from kiln.frontend.source import AttrSource, GetItemSource
from kiln.frontend.variables import dict_subclass
from kiln.frontend.variables.base import VariableTracker, wrap_constant_like, wrap_value
from kiln.frontend.variables.dict_objects import DictMethodVariable, DictReadVariable
from kiln.frontend.variables.dicts import DictNewVariable
from kiln.frontend.variables.exceptions import ExceptionInitVariable
from kiln.frontend.variables.functions import UserMethodVariable
from kiln.frontend.variables.misc import TensorMethodVariable
from kiln.frontend.variables.object_new import ObjectNewVariable
from kiln.frontend.variables.tensor_attrs import is_tensor_var
from kiln.frontend.variables.user_attrs import ObjectDelattrVariable, ObjectSlotVariable
from kiln.frontend.variables.user_defined import (
    DICT_BASES,
    NewObjectVariable,
    ObjectInitVariable,
    UserDefinedObjectVariable,
)
from kiln.frontend.variables.user_protocol import ObjectCompareVariable, is_user_object

# `super().__new__` of builtin bases other modules model: class -> a factory of its variable
BASE_NEWS = {}
# other attributes of such bases reached by super(): (class, name) -> a factory of its variable
BASE_ATTRS = {}


class SuperVariable(VariableTracker):
    """`super()` / `super(cls, obj)`: attribute lookup from after `cls` in type(obj)'s MRO."""

    def __init__(self, cls, obj, **kw):
        super().__init__(**kw)
        self.cls = cls
        self.obj = obj

    def _bound_class(self):
        """The class itself when super() is bound to a class (in a classmethod), else None."""
        if self.obj.is_python_constant():
            value = self.obj.as_python_constant()
            if isinstance(value, type) and issubclass(value, self.cls):
                return value
        return None

    def var_getattr(self, tx, name):
        owner = self._bound_class()
        mro = (owner if owner is not None else self.obj.python_type()).__mro__
        try:
            start = mro.index(self.cls) + 1
        except ValueError:
            unimplemented(f"super(): {self.cls.__name__} is not in the MRO")
        for klass in mro[start:]:
            if name in vars(klass):
                attr = vars(klass)[name]
                if (klass, name) in BASE_ATTRS:
                    return BASE_ATTRS[(klass, name)]()
                if isinstance(attr, classmethod) and isinstance(attr.__func__, types.FunctionType):
                    cls_var = self.obj if owner is not None else wrap_constant_like(tx, mro[0])
                    return UserMethodVariable(attr.__func__, cls_var)
                if owner is not None and isinstance(attr, types.FunctionType):
                    return wrap_value(tx, attr, None)  # super(C, C).f: the plain function
                if owner is not None and isinstance(attr, staticmethod):
                    return wrap_value(tx, attr.__func__, None)  # super(C, C).f of a staticmethod
                if owner is not None and name == "__new__" and klass in DICT_BASES:
                    return DictNewVariable(klass)  # super().__new__(cls)
                if owner is not None and name == "__new__" and klass is object:
                    return ObjectNewVariable()  # Note [Objects: a class's own __new__]
                if owner is not None and name == "__new__" and klass in BASE_NEWS:
                    return BASE_NEWS[klass]()  # (Tensor's: torch_function.py)
                if owner is not None:
                    unimplemented(f"super(cls, cls).{name} is a {type(attr).__name__}")
                if isinstance(attr, types.FunctionType):
                    return UserMethodVariable(attr, self.obj)
                if isinstance(attr, staticmethod):
                    return wrap_value(tx, attr.__func__, None)
                if klass in (set, frozenset) and hasattr(self.obj, "c_method"):
                    return self.obj.c_method(name, klass)  # Note [Sets: subclass instances]
                if klass is dict and name in ("get", "__getitem__", "__contains__"):
                    if isinstance(self.obj, NewObjectVariable):
                        return DictMethodVariable(self.obj, name)
                    if dict_subclass.storage_of(tx, self.obj) is not None:
                        return dict_subclass.StorageReadVariable(self.obj, name)
                    return DictReadVariable(self.obj, name)
                if isinstance(self.obj, NewObjectVariable):
                    if klass in DICT_BASES and self.obj.dict_items is not None:
                        return DictMethodVariable(self.obj, name, klass)
                    if klass is object and name in ("__setattr__", "__getattribute__"):
                        return DictMethodVariable(self.obj, name)
                    if klass is object and name == "__delattr__":
                        return ObjectDelattrVariable(self.obj)
                if klass is object and name == "__init__":
                    return ObjectInitVariable()
                if klass is object and name in ("__setattr__", "__getattribute__"):
                    if isinstance(self.obj, UserDefinedObjectVariable):
                        return ObjectSlotVariable(self.obj, name)
                if issubclass(klass, BaseException) and name == "__init__":
                    return ExceptionInitVariable(self.obj)
                if klass is object and name in ("__eq__", "__ne__") and is_user_object(self.obj):
                    return ObjectCompareVariable(self.obj, name)
                if not hasattr(type(attr), "__get__"):  # `super().a`, a plain class attribute
                    return self._mro_attr(tx, mro.index(klass), name, attr)
                if klass is torch._C.TensorBase and isinstance(attr, types.MethodDescriptorType):
                    if is_tensor_var(self.obj):  # `super().to(...)` in a tensor subclass's `to`
                        return TensorMethodVariable(self.obj, name)  # (Tensor's own)
                unimplemented(f"super().{name} is a {type(attr).__name__}")
        unimplemented(f"super() has no attribute {name!r}")

    def _mro_attr(self, tx, index, name, attr):
        """A plain value of the class at `index` in type(obj)'s MRO, read (and guarded) through
        `type(obj).__mro__[index].name`."""
        if self.obj.source is not None:
            cls_source = AttrSource(self.obj.source, "__class__")
        else:
            cls_source = getattr(self.obj, "class_source", None)
        if cls_source is None:
            unimplemented(f"super().{name}: the object's class has no source to guard")
        mro_source = GetItemSource(AttrSource(cls_source, "__mro__"), index)
        return wrap_value(tx, attr, AttrSource(mro_source, name))
