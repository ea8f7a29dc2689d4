"""object.__setattr__ / object.__getattribute__ on user objects from outside the frame.

Note [Side effects: stores through a user __setattr__]
`obj.name = v` on an object whose class defines a Python __setattr__ (Hugging Face's configs:
a strict dataclass validating the value, then PreTrainedConfig.__setattr__ mapping the key
through `attribute_map`, then `super().__setattr__`) is traced by inlining that __setattr__ as
Python runs it. The store it finally makes, `object.__setattr__(self, key, v)` (or through
super()), is the side effect: recorded as a raw store, read back by the code traced after it,
and replayed after the graph with `object.__setattr__`, so the user __setattr__ runs once, while
tracing, as in eager (its validators are pure Python; anything else it does is traced or a
break). Guards on attributes read before the store stay on the old value: the next call,
seeing the new value, recompiles.
"""

import _thread
import sys
import types

from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.source import AttrSource, GetItemSource
from kiln.frontend.variables.base import VariableTracker, wrap_constant_like, wrap_value
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.exceptions import raise_observed

_ABSENT = object()


def instance_static(cls, name, default=_ABSENT):
    """What `name` is in the class dicts along cls.__mro__, as an instance's attribute lookup
    sees it (not inspect.getattr_static(cls, ...), which also finds the metaclass's attributes:
    a class has `__name__`, `mro` and a `__dict__` descriptor, its instances need not)."""
    for k in cls.__mro__:
        d = vars(k)
        if name in d:
            return d[name]
    if default is _ABSENT:
        raise AttributeError(name)
    return default


def has_instance_dict(cls):
    """Whether instances of `cls` have a __dict__ (no __slots__ without "__dict__" along the MRO,
    not `object` itself)."""
    return cls.__dictoffset__ != 0


# Note [Objects: threading.local]
# A `threading.local()` object (exactly `_thread._local`: a subclass may add its own __init__ and
# methods) holds one attribute dict per thread, chosen by its C __setattr__/__getattribute__ from
# the thread that asks. The trace, the transformed code and its replay of the frame's stores all
# run in the thread that called the compiled function, so a store `loc.x = v` is replayed after
# the graph as eager made it, into that thread's dict: the store is a side effect like any
# attribute store (later reads in the frame see it). Reads of attributes stored before the frame
# are guarded as any object's, and the guards too run in the calling thread: a call from another
# thread checks (and reads) that thread's attributes.
def is_thread_local(value):
    """Whether `value` is a plain `threading.local()` (Note [Objects: threading.local])."""
    return type(value) is _thread._local


def no_attribute_message(cls, name):
    """Python's message for storing a new attribute into an instance without a __dict__."""
    message = f"{cls.__name__!r} object has no attribute {name!r}"
    if sys.version_info >= (3, 13):
        message += " and no __dict__ for setting new attributes"
    return message


def _const_name(var):
    if not (var.is_python_constant() and isinstance(var.as_python_constant(), str)):
        unimplemented(f"attribute name {var} is not a constant str")
    return var.as_python_constant()


def raw_store_attr(tx, obj, name, value):
    """`object.__setattr__(obj, name, value)` on an object from outside the frame."""
    from kiln.frontend.variables.functions import inline_call

    cls = obj.python_type()
    static = instance_static(cls, name, None)
    if isinstance(static, property):
        if static.fset is None:
            unimplemented(f"property {cls.__name__}.{name} has no setter")
        inline_call(tx, static.fset, [obj, value], {}, obj._class_attr_source(name, "fset"))
        return
    if python_set(static) is not None:  # Note [Objects: data descriptors]
        src = AttrSource(obj.source, "__class__") if obj.source is not None else None
        descriptor_set(tx, obj, cls, name, static, src, value)
        return
    if static is not None and hasattr(static, "__set__"):
        unimplemented(f"assignment to the descriptor {cls.__name__}.{name}")
    tx.output.side_effects.store_attr(obj, name, value, raw=True)


def raw_load_attr(tx, obj, name):
    """`object.__getattribute__(obj, name)`: the instance dict, then the class (no
    __getattr__ hook, no custom __getattribute__)."""
    if name == "__dict__":
        if obj.source is None:
            unimplemented(f"__dict__ of {obj} without a source")
        d = wrap_value(tx, obj.value.__dict__, AttrSource(obj.source, "__dict__"))
        # the stores made while tracing are in the instance dict (replayed before it is read)
        log = tx.output.side_effects.log
        stored = [p for k, (_, p) in log.items() if k[0] == "attr" and k[1] == id(obj.value)]
        if stored and not isinstance(getattr(d, "items", None), dict):  # a ConstDictVariable
            unimplemented("__dict__ of an object stored into while tracing")
        cls = obj.python_type()
        for _, key, value, _ in stored:
            static = instance_static(cls, key, None)
            if static is not None and hasattr(static, "__set__"):
                unimplemented(f"__dict__ of an object stored into through {cls.__name__}.{key}")
            d.items[key] = value
        return d
    stored = tx.output.side_effects.load_attr(obj, name)
    if stored is not None:
        return stored
    cls = obj.python_type()
    d = getattr(obj.value, "__dict__", None)
    if hasattr(cls, "__getattr__") and not (
        (d is not None and name in d) or instance_static(cls, name, None) is not None
    ):
        if (
            type(d) is not dict
            or obj.source is None
            or tx.output.side_effects.is_deleted(obj, name)
        ):
            unimplemented(f"object.__getattribute__ of {cls.__name__}.{name} (missing: no hook)")
        # missing, and no __getattr__ asked here: AttributeError (the caller's hook may catch it)
        tx.output.guards.add(GuardKind.NOT_IN, AttrSource(obj.source, "__dict__"), name)
        raise_observed(tx, AttributeError, no_attribute_message(cls, name))
    return obj.plain_getattr(tx, name)


class ObjectSlotVariable(VariableTracker):
    """`object.__setattr__` / `object.__getattribute__` bound to a user object (from super())."""

    def __init__(self, obj, name, **kw):
        super().__init__(**kw)
        self.obj = obj
        self.name = name

    def call_function(self, tx, args, kwargs):
        if kwargs:
            unimplemented(f"object.{self.name} with keyword arguments")
        if self.name == "__setattr__" and len(args) == 2:
            raw_store_attr(tx, self.obj, _const_name(args[0]), args[1])
            return ConstantVariable(None)
        if self.name == "__getattribute__" and len(args) == 1:
            return raw_load_attr(tx, self.obj, _const_name(args[0]))
        unimplemented(f"object.{self.name} with {len(args)} arguments")


class ObjectDelattrVariable(VariableTracker):
    """`object.__delattr__` bound to an object made in the frame (from super())."""

    def __init__(self, obj, **kw):
        super().__init__(**kw)
        self.obj = obj

    def call_function(self, tx, args, kwargs):
        if kwargs or len(args) != 1:
            unimplemented(f"object.__delattr__ with {len(args)} arguments")
        self.obj.plain_delattr(tx, _const_name(args[0]))
        return ConstantVariable(None)


_OBJECT_SLOTS = {object.__setattr__: "__setattr__", object.__getattribute__: "__getattribute__"}


def call_object_slot(tx, fn, args, kwargs):
    """`object.__setattr__(obj, ...)` / `object.__getattribute__(obj, ...)` called directly on
    a user object: its result, or None when `fn` is something else."""
    from kiln.frontend.variables.dict_objects import DictMethodVariable
    from kiln.frontend.variables.user_defined import NewObjectVariable, UserDefinedObjectVariable

    name = _OBJECT_SLOTS.get(fn) if type(fn) is type(object.__setattr__) else None
    if name is None or not args:
        return None
    obj, rest = args[0], list(args[1:])
    if isinstance(obj, NewObjectVariable):
        return DictMethodVariable(obj, name).call_function(tx, rest, kwargs)
    if isinstance(obj, UserDefinedObjectVariable):
        return ObjectSlotVariable(obj, name).call_function(tx, rest, kwargs)
    return None


# Note [Attributes: hasattr decided by the class]
# A value of a builtin container type (tuple, list, dict, set, deque, a namedtuple class with
# `__slots__ = ()`) has no instance attributes: every attribute it has comes from its class, so
# `hasattr(value, name)` is `hasattr(type(value), name)`, whatever the items are (tensors
# included). Any other type (one with an instance __dict__, slots or a __getattr__) is not decided
# here.
def class_decides_hasattr(obj, name):
    """hasattr(obj, name) when obj's type has no instance attributes, else None."""
    try:
        typ = obj.python_type()
    except Exception:
        return None
    if not isinstance(typ, type) or typ.__dictoffset__ != 0 or hasattr(typ, "__getattr__"):
        return None
    if typ is types.MethodType:  # (its attribute reads fall through to its function)
        return None
    for c in typ.__mro__:
        plain_namedtuple = "_fields" in c.__dict__ and c.__dict__.get("__slots__") == ()
        if c.__module__ not in ("builtins", "collections") and not plain_namedtuple:
            return None
    return instance_static(typ, name, None) is not None


def load_attr(tx, obj, name):
    """`obj.name`; an AttributeError, as Python raises it, where the type alone says it has none."""
    if class_decides_hasattr(obj, name) is False:  # a frozenset's .add, None.x, a tuple's .append
        typ = obj.python_type().__name__
        raise_observed(tx, AttributeError, f"{typ!r} object has no attribute {name!r}")
    return obj.var_getattr(tx, name)


# Note [Objects: descriptors with a Python __get__]
# `obj.name` where the class holds a non-data descriptor whose type defines __get__ in Python (a
# computed attribute, functools' cached-property-like helpers written by users) is
# `type(desc).__get__(desc, obj, type(obj))`: inlined. The descriptor itself is read from the
# defining class's __dict__ (`cls.name` would call __get__ with obj None); its source, when the
# class has one, is `<class>.__mro__[i].__dict__[name]`.


# Note [Objects: data descriptors]
# A descriptor whose type defines __set__ or __delete__ (a property, a user class with __get__
# and __set__) wins over the instance dict: `obj.name` is `type(desc).__get__(desc, obj, cls)`
# even when `obj.__dict__` holds `name`. A Python __get__ is inlined as for a non-data
# descriptor (Note [Objects: descriptors with a Python __get__]); one written in C is a break.
# `obj.name = value` is `type(desc).__set__(desc, obj, value)`, inlined when __set__ is Python
# (its stores into `obj.__dict__` are the frame's side effects); a C __set__ is a break.


def is_data_descriptor(static):
    """Whether a class attribute is a data descriptor (its type has __set__ or __delete__)."""
    return static is not None and (
        hasattr(type(static), "__set__") or hasattr(type(static), "__delete__")
    )


def python_get(static):
    """The Python __get__ of a descriptor's type, else None."""
    get = next((vars(k)["__get__"] for k in type(static).__mro__ if "__get__" in vars(k)), None)
    return get if isinstance(get, types.FunctionType) else None


def python_set(static):
    """The Python __set__ of a descriptor's type, else None."""
    put = next((vars(k)["__set__"] for k in type(static).__mro__ if "__set__" in vars(k)), None)
    return put if isinstance(put, types.FunctionType) else None


def _descriptor_var(tx, cls, name, static, class_source):
    """The descriptor held by the class, read from its defining class's __dict__."""
    owner = next(i for i, k in enumerate(cls.__mro__) if name in vars(k))
    source = None
    if class_source is not None:
        mro = GetItemSource(AttrSource(class_source, "__mro__"), owner)
        source = GetItemSource(AttrSource(mro, "__dict__"), name)
    return wrap_value(tx, static, source)


def descriptor_set(tx, obj, cls, name, static, class_source, value):
    """`obj.name = value` through a data descriptor with a Python __set__: Note [Objects: data
    descriptors]."""
    from kiln.frontend.variables.functions import inline_call

    desc = _descriptor_var(tx, cls, name, static, class_source)
    inline_call(tx, python_set(static), [desc, obj, value], {}, None)


def descriptor_get(tx, obj, cls, name, static, class_source):
    """Note [Objects: descriptors with a Python __get__]."""
    from kiln.frontend.variables.functions import inline_call

    desc = _descriptor_var(tx, cls, name, static, class_source)
    return inline_call(tx, python_get(static), [desc, obj, wrap_constant_like(tx, cls)], {}, None)
