"""Instances and classes defined by the user (read-only while tracing, for now)."""

import inspect
import types

from kiln.exc import unimplemented
from kiln.frontend.source import AttrSource
from kiln.frontend.variables.base import PythonValueVariable, VariableTracker
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.functions import UserMethodVariable, inline_call


class UserDefinedClassVariable(PythonValueVariable):
    """A class object (guarded by identity)."""

    def var_getattr(self, tx, name):
        from kiln.frontend.variables.builder import wrap_value

        try:
            static = inspect.getattr_static(self.value, name)
        except AttributeError:
            unimplemented(f"class {self.value.__name__} has no attribute {name!r}")
        if isinstance(static, staticmethod):
            return wrap_value(tx, static.__func__, None)
        if isinstance(static, classmethod):
            return UserMethodVariable(static.__func__, self)
        src = AttrSource(self.source, name) if self.source is not None else None
        return wrap_value(tx, getattr(self.value, name), src)

    def call_function(self, tx, args, kwargs):
        cls = self.value
        if issubclass(cls, tuple) and hasattr(cls, "_fields") and cls.__new__ is not tuple.__new__:
            # a namedtuple: bind the fields like its generated __new__ does
            from kiln.frontend.variables.functions import bind_args
            from kiln.frontend.variables.lists import TupleVariable

            bound = bind_args(tx, cls.__new__, [self, *args], kwargs, None)
            return TupleVariable([bound[f] for f in cls._fields], tuple_cls=cls)
        if _plain_class(cls):
            obj = NewObjectVariable(cls)
            init = inspect.getattr_static(cls, "__init__")
            if init is not object.__init__:
                inline_call(tx, init, [obj, *args], kwargs, None)
            elif args or kwargs:
                unimplemented(f"{cls.__qualname__}() takes no arguments")
            return obj
        unimplemented(f"creating an instance of {cls.__qualname__} while tracing")

    def reconstruct(self, cg):
        if self.source is not None:
            return super().reconstruct(cg)
        cg.load_object(self.value)

    def __repr__(self):
        return f"UserDefinedClassVariable({self.value.__qualname__})"


class UserDefinedObjectVariable(VariableTracker):
    """An instance of a user class, reached from a source (type-guarded)."""

    def __init__(self, value, **kw):
        super().__init__(**kw)
        self.value = value

    def python_type(self):
        return type(self.value)

    def hasattr(self, tx, name):
        if tx.output.side_effects.load_attr(self, name) is not None:
            return ConstantVariable(True)
        return ConstantVariable(hasattr(self.value, name))

    def var_getattr(self, tx, name):
        from kiln.frontend.variables.builder import wrap_value

        if self.source is None:
            unimplemented(f"attribute {name!r} of an object without a source")
        stored = tx.output.side_effects.load_attr(self, name)
        if stored is not None:
            return stored
        cls = type(self.value)
        if name == "__class__":  # pinned by the TYPE_MATCH guard on the object
            from kiln.frontend.variables.builder import wrap_constant_like

            return wrap_constant_like(tx, cls)
        try:
            static = inspect.getattr_static(cls, name)
        except AttributeError:
            static = None
        if static is not None and hasattr(static, "__set__") and not isinstance(static, property):
            unimplemented(f"data descriptor {name!r} of {cls.__name__}")
        d = getattr(self.value, "__dict__", None)
        if d is not None and name in d:
            return wrap_value(tx, d[name], AttrSource(self.source, name))
        if static is None:
            if hasattr(cls, "__getattr__"):
                unimplemented(f"{cls.__name__}.__getattr__")
            unimplemented(f"{cls.__name__} object has no attribute {name!r}")
        if isinstance(static, staticmethod):
            return wrap_value(tx, static.__func__, None)
        if isinstance(static, classmethod):
            from kiln.frontend.variables.builder import wrap_constant_like

            return UserMethodVariable(static.__func__, wrap_constant_like(tx, cls))
        if isinstance(static, types.FunctionType):
            return UserMethodVariable(static, self, source=self._class_attr_source(name))
        if isinstance(static, property) and static.fget is not None:
            return inline_call(tx, static.fget, [self], {}, self._class_attr_source(name, "fget"))
        return wrap_value(tx, getattr(self.value, name), AttrSource(self.source, name))

    def call_function(self, tx, args, kwargs):
        call = inspect.getattr_static(type(self.value), "__call__", None)
        if isinstance(call, types.FunctionType):
            return inline_call(tx, call, [self, *args], kwargs, self._class_attr_source("__call__"))
        unimplemented(f"calling a {type(self.value).__name__}")

    def __repr__(self):
        return f"UserDefinedObjectVariable({type(self.value).__name__})"


class SuperVariable(VariableTracker):
    """`super()` / `super(cls, obj)`: attribute lookup from after `cls` in type(obj)'s MRO."""

    def __init__(self, cls, obj, **kw):
        super().__init__(**kw)
        self.cls = cls
        self.obj = obj

    def var_getattr(self, tx, name):
        mro = self.obj.python_type().__mro__
        try:
            start = mro.index(self.cls) + 1
        except ValueError:
            unimplemented(f"super(): {self.cls.__name__} is not in the MRO")
        for klass in mro[start:]:
            if name in vars(klass):
                attr = vars(klass)[name]
                if isinstance(attr, types.FunctionType):
                    return UserMethodVariable(attr, self.obj)
                if isinstance(attr, staticmethod):
                    from kiln.frontend.variables.builder import wrap_value

                    return wrap_value(tx, attr.__func__, None)
                if klass is dict and name in ("get", "__getitem__", "__contains__"):
                    return DictReadVariable(self.obj, name)
                unimplemented(f"super().{name} is a {type(attr).__name__}")
        unimplemented(f"super() has no attribute {name!r}")


def _plain_class(cls):
    """A class whose instances are plain attribute bags kiln can build itself."""
    import torch

    if type(cls) is not type or cls.__new__ is not object.__new__:
        return False
    if issubclass(cls, (torch.nn.Module, torch.Tensor, BaseException)):
        return False
    if any("__slots__" in vars(k) for k in cls.__mro__[:-1]):
        return False
    if inspect.getattr_static(cls, "__setattr__") is not object.__setattr__:
        return False
    if inspect.getattr_static(cls, "__getattr__", None) is not None:
        return False
    init = inspect.getattr_static(cls, "__init__")
    return init is object.__init__ or isinstance(init, types.FunctionType)


def make_object(cls, attrs):
    """The transformed code's way to build an object made while tracing."""
    obj = object.__new__(cls)
    obj.__dict__.update(attrs)
    return obj


class NewObjectVariable(VariableTracker):
    """An instance of a plain user class created while tracing: its attributes, symbolically."""

    def __init__(self, cls, **kw):
        super().__init__(**kw)
        self.cls = cls
        self.attrs = {}

    def python_type(self):
        return self.cls

    def store_attr(self, name, value):
        self.attrs[name] = value

    def hasattr(self, tx, name):
        return ConstantVariable(name in self.attrs or hasattr(self.cls, name))

    def var_getattr(self, tx, name):
        from kiln.frontend.variables.builder import wrap_constant_like

        if name in self.attrs:
            return self.attrs[name]
        if name == "__class__":
            return wrap_constant_like(tx, self.cls)
        try:
            static = inspect.getattr_static(self.cls, name)
        except AttributeError:
            unimplemented(f"{self.cls.__name__} object has no attribute {name!r}")
        if isinstance(static, types.FunctionType):
            return UserMethodVariable(static, self)
        if isinstance(static, property) and static.fget is not None:
            return inline_call(tx, static.fget, [self], {}, None)
        if isinstance(static, staticmethod):
            return wrap_constant_like(tx, static.__func__)
        if isinstance(static, classmethod):
            return UserMethodVariable(static.__func__, wrap_constant_like(tx, self.cls))
        from kiln.frontend.variables.constant import is_literal

        if is_literal(static):
            return ConstantVariable(static)
        unimplemented(f"class attribute {self.cls.__name__}.{name}")

    def reconstruct(self, cg):
        from kiln.bytecode import emit

        cg.load_object(make_object, push_null=True)
        cg.load_object(self.cls)
        for k, v in self.attrs.items():
            cg.extend(emit.load_const(k))
            cg.reconstruct(v)
        cg.extend(emit.build_map(len(self.attrs)))
        cg.extend(emit.call(2))

    def __repr__(self):
        return f"NewObjectVariable({self.cls.__name__})"


class DictReadVariable(VariableTracker):
    """`super().get` / `__getitem__` / `__contains__` of a dict-subclass object: a guarded read."""

    def __init__(self, obj, name, **kw):
        super().__init__(**kw)
        self.obj = obj
        self.name = name

    def call_function(self, tx, args, kwargs):
        from kiln.frontend.guards import GuardKind
        from kiln.frontend.source import MISSING, DictGetSource, dict_get
        from kiln.frontend.variables.builder import wrap_value

        if self.obj.source is None or kwargs or not args or not args[0].is_python_constant():
            unimplemented(f"dict.{self.name} of {self.obj}")
        key = args[0].as_python_constant()
        source = DictGetSource(self.obj.source, key)
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
