"""Instances of user subclasses of set and frozenset made while tracing.

Note [Sets: subclass instances]
`class S(set): ...; s = S([1, 2])` is a user object (attributes, Python methods, identity: a
NewObjectVariable) that also holds a builtin set (a SetVariable of the base type, `self.set`).
An attribute is looked up along the class's MRO as Python does: a Python method of the subclass is
inlined; one found on `set`/`frozenset` runs the C semantics on the held set (SetMethodVariable).
Python's C set methods return the *base* type (`S(...) | S(...)`, `.copy()`, `.union()` give a
plain `set`/`frozenset`), and so do these; the in-place operators of a `set` subclass return the
object itself. Operators (`|`, `==`, `<=` ...) follow Python's binary protocol: a subclass that
overrides the dunder (or the reflected one, tried first when the right operand's type is a
subclass of the left's) is inlined, else the C slot answers, NotImplemented for a non-set. Items
are Python constants, as in SetVariable. The object escapes as `make_set_object(cls, attrs,
items)`: the base type's own __new__/update, bypassing a Python __init__. A class with its own
__new__, a metaclass __call__, a __del__ or a C base other than set/frozenset is not modelled (a
break). An instance reached from a source (an argument, a global) is a SetInputVariable: its type
and its items guarded (the items compared as a plain set), its attributes read through the
source; its changed items are stored into it after the graph (a replayed call, one per object,
with the items it has at the end). In f-strings, str() and repr() an instance
is `S({1, 2})` (set's repr), or its class's Python __str__/__repr__. Looked up in a set, it is
the frozenset of its items (as Python makes of a set key, and as a frozenset hashes).
"""

import dataclasses
import inspect
import operator
import types

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.source import AttrSource, Source
from kiln.frontend.variables import dict_views
from kiln.frontend.variables.base import VariableTracker
from kiln.frontend.variables.classes import load_class
from kiln.frontend.variables.constant import ConstantVariable, is_literal
from kiln.frontend.variables.dict_views import DictViewVariable
from kiln.frontend.variables.dicts import ConstDictVariable
from kiln.frontend.variables.exceptions import raise_observed
from kiln.frontend.variables.functions import inline_call
from kiln.frontend.variables.lists import BaseListVariable, ListIteratorVariable
from kiln.frontend.variables.sets import _SET_MUTATORS, _SET_PURE, SetVariable, _set_values
from kiln.frontend.variables.user_defined import (
    _HEAPTYPE,
    INSTANCE_MAKERS,
    NewObjectVariable,
    UserDefinedObjectVariable,
    _plain_metaclass,
    _plain_slots,
    load_attrs,
)
from kiln.frontend.variables.user_protocol import (
    call_dunder,
    is_user_object,
    user_iter_items,
    user_method,
    user_truthy,
)

_BASES = (set, frozenset)
_OBJECT_FORMAT = None  # (user_method's answer for a __format__ only `object` has)
_PLAIN = (list, tuple, dict)  # (their operators return NotImplemented for a set operand)

# operator -> (dunder, reflected dunder) of Python's binary protocol
_BINARY = {
    operator.or_: ("__or__", "__ror__"),
    operator.and_: ("__and__", "__rand__"),
    operator.sub: ("__sub__", "__rsub__"),
    operator.xor: ("__xor__", "__rxor__"),
    operator.eq: ("__eq__", "__eq__"),
    operator.ne: ("__ne__", "__ne__"),
    operator.lt: ("__lt__", "__gt__"),
    operator.le: ("__le__", "__ge__"),
    operator.gt: ("__gt__", "__lt__"),
    operator.ge: ("__ge__", "__le__"),
}
_INPLACE = {
    operator.ior: ("__ior__", operator.or_),
    operator.iand: ("__iand__", operator.and_),
    operator.isub: ("__isub__", operator.sub),
    operator.ixor: ("__ixor__", operator.xor),
}
_INPLACE_UPDATE = {
    "__ior__": "update",
    "__iand__": "intersection_update",
    "__isub__": "difference_update",
    "__ixor__": "symmetric_difference_update",
}
_DUNDER_OPS = {d: op for op, (d, _) in _BINARY.items()}
_REFLECTED_OPS = {r: op for op, (d, r) in _BINARY.items() if r.startswith("__r")}
_SYMBOLS = {
    operator.or_: "|",
    operator.and_: "&",
    operator.sub: "-",
    operator.xor: "^",
    operator.lt: "<",
    operator.le: "<=",
    operator.gt: ">",
    operator.ge: ">=",
}
# the set methods answered by SetVariable (C semantics on the items)
_DELEGATED = (
    _SET_MUTATORS
    | {m for m in _SET_PURE if not m.startswith("__")}
    | {
        "copy",
        "__contains__",
        "__len__",
    }
)


def set_base(cls):
    """set or frozenset when `cls` is a user subclass of one, else None."""
    if not isinstance(cls, type) or cls in _BASES:
        return None
    for k in cls.__mro__:
        if k in _BASES:
            return k
    return None


def _modelled_class(cls, base):
    """A subclass kiln builds itself: Python classes over set/frozenset, made by type.__call__,
    with the base's own __new__ and attributes in a __dict__ or plain slots."""
    if not _plain_metaclass(type(cls)) or getattr(cls, "__abstractmethods__", None):
        return False
    if cls.__new__ is not base.__new__:
        return False
    if not all(k in (object, base) or k.__flags__ & _HEAPTYPE for k in cls.__mro__):
        return False
    if not _plain_slots(cls) or hasattr(cls, "__del__"):
        return False  # (a finalizer: when the object dies is observable)
    for name in ("__setattr__", "__getattribute__", "__getattr__"):
        hook = inspect.getattr_static(cls, name, None)
        if hook is not None and not isinstance(hook, types.FunctionType):
            if hook not in (getattr(object, name, None), getattr(base, name, None)):
                return False
    if isinstance(inspect.getattr_static(cls, "__getattribute__"), types.FunctionType):
        return False
    return True


def make_instance(tx, cls_var, args, kwargs):
    """`S(...)` for a set/frozenset subclass: the new object, or None when `cls` is not one."""
    cls = cls_var.value
    base = set_base(cls)
    if base is None:
        return None
    if not _modelled_class(cls, base):
        unimplemented(
            f"an instance of {cls.__qualname__} (a {base.__name__} subclass kiln does "
            "not build: own __new__, metaclass, C base, attribute hooks or __del__)"
        )
    obj = SetObjectVariable(cls, base)
    obj.class_source = cls_var.source
    init = inspect.getattr_static(cls, "__init__")
    python_init = isinstance(init, types.FunctionType)
    if base is frozenset:  # frozenset.__new__ takes the items
        if len(args) > 1 or (kwargs and not python_init):
            unimplemented(f"{cls.__name__}() with these arguments (Python raises TypeError)")
        if args:
            obj.set.values = set(_set_values(tx, args[0]))
    if python_init:
        src = AttrSource(cls_var.source, "__init__") if cls_var.source is not None else None
        inline_call(tx, init, [obj, *args], kwargs, src)
    elif base is set:
        obj.init_items(tx, args, kwargs)
    elif init is not object.__init__:
        unimplemented(f"{cls.__name__}.__init__ is a {type(init).__name__}")
    return obj


def make_set_object(cls, attrs, items):
    """The transformed code's way to build a set/frozenset subclass instance made while tracing
    (the base type's __new__ and update: a Python __init__ does not run again)."""
    base = set_base(cls)
    obj = base.__new__(cls, items) if base is frozenset else base.__new__(cls)
    if base is set:
        set.update(obj, items)
    if hasattr(obj, "__dict__"):
        obj.__dict__.update(attrs)
    else:
        for k, v in attrs.items():
            object.__setattr__(obj, k, v)
    return obj


def bind_method(fn, obj):
    """`set.add` bound to `obj` (the transformed code's rebuilt SetMethodVariable)."""
    return fn.__get__(obj)


def _owner(cls, name):
    """The class along cls's MRO whose __dict__ holds `name`, or None."""
    for k in cls.__mro__:
        if name in vars(k):
            return k
    return None


def is_set_like(var):
    """A builtin set/frozenset or an instance of a subclass (a set operand of the C slots)."""
    return isinstance(var, (SetVariable, SetProtocol))


class SetProtocol:
    """The set behaviour of a subclass instance (`cls`, `base`, its items in `set`), mixed into
    the variables of objects made in the frame and of inputs."""

    @property
    def base_set(self):
        """The held builtin set (what the C set functions read)."""
        return self.set

    def mutating(self, tx):
        """The items are about to change."""
        tx.output.side_effects.mutate_new_object(self)
        self.set._mutate(tx)

    def init_items(self, tx, args, kwargs):
        """set.__init__(self, [iterable]): clear, then add the iterable's items."""
        if kwargs or len(args) > 1:
            unimplemented(f"{self.cls.__name__}() with these arguments (Python raises TypeError)")
        values = set(_set_values(tx, args[0])) if args else set()
        self.mutating(tx)
        self.set.values = values
        return ConstantVariable(None)

    def key_value(self):
        """This object looked up in a set (in, remove, discard): the frozenset of its items, as
        Python finds it (a set's key is made a frozenset; a frozenset's hash and == are its
        items'), unless the class defines its own __hash__ or __eq__."""
        for name in ("__hash__", "__eq__"):
            if isinstance(user_method(self, name), types.FunctionType):
                unimplemented(f"a {self.cls.__name__} with its own {name} looked up in a set")
        return frozenset(self.set.values)

    def set_method(self, name):
        """`obj.name` when set/frozenset defines it (the subclass does not): the C method."""
        owner = _owner(self.cls, name)
        return SetMethodVariable(self, name, owner) if owner in _BASES else None

    def base_call(self, tx, name, args, kwargs):
        """The C method `name` of the base type called on this object."""
        if name == "__init__" and self.base is set:
            return self.init_items(tx, args, kwargs)
        if name == "__init__":  # object.__init__ (frozenset's): the items came from __new__
            return ConstantVariable(None)
        if kwargs:
            unimplemented(f"{self.base.__name__}.{name} with keyword arguments")
        if name == "__iter__" and not args:
            return ListIteratorVariable.over(tx, self.set)
        if name in _DUNDER_OPS and len(args) == 1:
            return _c_slot(tx, _DUNDER_OPS[name], self, args[0])
        if name in _REFLECTED_OPS and len(args) == 1:
            return _c_slot(tx, _REFLECTED_OPS[name], args[0], self)
        if name in _INPLACE_UPDATE and len(args) == 1:
            if not is_set_like(args[0]):
                return ConstantVariable(NotImplemented)
            if self.base is frozenset:
                unimplemented(f"frozenset.{name}")
            self.mutating(tx)
            self.set.call_method(tx, _INPLACE_UPDATE[name], args, {})
            return self
        if name == "copy" and not args:  # a new set/frozenset of the base type
            return SetVariable(self.set.values, frozen=self.base is frozenset)
        if name in _DELEGATED:
            if name in ("add", "remove", "discard", "clear", "pop") or name.endswith("update"):
                if self.base is frozenset:
                    unimplemented(f"frozenset has no {name}")
                self.mutating(tx)
            return self.set.call_method(tx, name, args, {})
        unimplemented(f"{self.base.__name__}.{name} of a {self.cls.__name__}")

    def c_method(self, name, owner):
        """`owner.name` (a C method of set/frozenset) bound to this object."""
        if not issubclass(self.cls, owner):
            unimplemented(f"{owner.__name__}.{name} called on a {self.cls.__name__}")
        return SetMethodVariable(self, name, owner)

    def truthy(self, tx):
        for name in ("__bool__", "__len__"):
            if isinstance(user_method(self, name), types.FunctionType):
                return user_truthy(tx, self)
        return bool(self.set.values)

    def unpack_var_sequence(self, tx):
        if isinstance(user_method(self, "__iter__"), types.FunctionType):
            return user_iter_items(tx, self)
        return self.set.unpack_var_sequence(tx)

    def iter_var(self, tx):
        """iter(obj) with set's own __iter__ (ListIteratorVariable.over asks for it)."""
        if isinstance(user_method(self, "__iter__"), types.FunctionType):
            return ListIteratorVariable(user_iter_items(tx, self))
        return ListIteratorVariable.over(tx, self.set)

    def text_of(self, tx, conv, spec):
        """The text f"{obj!conv:spec}" formats (conv 0: format(), 1: str(), 2: repr()): the
        class's Python __str__/__repr__ inlined, else set's repr, `S({1, 2})` or `S()`."""
        if conv == 0 and (spec or user_method(self, "__format__") is not _OBJECT_FORMAT):
            unimplemented(f"format() of a {self.cls.__name__} with a format spec or __format__")
        if conv == 3:
            unimplemented(f"ascii() of a {self.cls.__name__}")
        for name in ("__str__", "__repr__") if conv < 2 else ("__repr__",):
            fn = user_method(self, name)
            if isinstance(fn, types.FunctionType):
                result = inline_call(tx, fn, [self], {}, None)
                if not (result.is_python_constant() and type(result.as_python_constant()) is str):
                    unimplemented(f"{name} of a {self.cls.__name__} returned {result}")
                return result.as_python_constant()
            if fn is not None:  # set's own repr (its __str__ is object's)
                break
        if not self.set.values:
            return f"{self.cls.__name__}()"
        return f"{self.cls.__name__}({self.set.values!r})"


class SetObjectVariable(SetProtocol, NewObjectVariable):
    """An instance of a user subclass of set/frozenset made while tracing: its attributes and
    its items (Note [Sets: subclass instances])."""

    def __init__(self, cls, base, **kw):
        super().__init__(cls, **kw)
        self.base = base
        self.set = SetVariable((), frozen=base is frozenset)

    def var_getattr(self, tx, name):
        if name not in self.attrs and name not in ("__class__", "__dict__"):
            method = self.set_method(name)
            if method is not None:
                return method
        return super().var_getattr(tx, name)

    def reconstruct(self, cg):
        cg.load_object(make_set_object, push_null=True)
        load_class(cg, self.cls)
        load_attrs(cg, self.attrs)
        SetVariable(self.set.values).reconstruct(cg)
        cg.extend(emit.call(3))

    def __repr__(self):
        return f"SetObjectVariable({self.cls.__name__}, {self.set.values!r})"


class SetInputVariable(SetProtocol, UserDefinedObjectVariable):
    """An instance of a user subclass of set/frozenset reached from a source: its type and its
    items guarded, its attributes read through the source; its new items are stored into it
    after the graph (Note [Sets: subclass instances])."""

    def __init__(self, value, base, **kw):
        super().__init__(value, **kw)
        self.cls = type(value)
        self.base = base
        self.set = SetVariable(base(value), frozen=base is frozenset)

    def mutating(self, tx):
        effects = tx.output.side_effects
        effects.mutate_new_object(self)  # (an instruction that changed it is not re-run)
        self.set._mutate(tx)
        # one replay per object, after its last change, with its items at the end of the trace
        effects.record_call(("set_items", id(self)), _StoreItems(), [self, self.set], {})

    def var_getattr(self, tx, name):
        if name != "__class__" and tx.output.side_effects.load_attr(self, name) is None:
            d = getattr(self.value, "__dict__", {})
            method = None if name in d else self.set_method(name)
            if method is not None:
                return method
        return super().var_getattr(tx, name)

    def __repr__(self):
        return f"SetInputVariable({self.cls.__name__}, {self.set.values!r})"


@dataclasses.dataclass(frozen=True)
class SetItemsSource(Source):
    """`type(base).__mro__[index].copy(base)`: the items of a set subclass instance as a plain
    set/frozenset (what the guard on its items compares)."""

    source: Source
    index: int

    def name(self):
        base = self.source.name()
        return f"___type({base}).__mro__[{self.index}].copy({base})"

    def reconstruct(self, cg):
        unimplemented("rebuilding the items of a set subclass input")

    def base(self):
        return self.source.base()


def store_set_items(obj, items):
    """The transformed code's replay of a set subclass input's changed items."""
    set.clear(obj)
    set.update(obj, items)


class _StoreItems(VariableTracker):
    """store_set_items, loaded by the replay."""

    def reconstruct(self, cg):
        cg.load_object(store_set_items)


def wrap_input(tx, value, source):
    """A set/frozenset subclass instance reached from `source` whose items are literals: its
    variable, guarded by type and items; None for any other value."""
    cls = type(value)
    base = set_base(cls)
    if base is None or not _modelled_class(cls, base) or not all(is_literal(v) for v in value):
        return None
    effects = tx.output.side_effects
    var = effects.tracked_container(tx, value, source)  # (one variable per object)
    if var is not None:
        return var
    guards = tx.output.guards
    guards.add(GuardKind.TYPE_MATCH, source, cls)
    items = SetItemsSource(source, cls.__mro__.index(base))
    guards.add(GuardKind.CONSTANT_MATCH, items, base(value))
    return effects.track_container(value, SetInputVariable(value, base, source=source))


class SetMethodVariable(VariableTracker):
    """A C method of set/frozenset bound to a subclass instance (or called unbound on one)."""

    def __init__(self, obj, name, owner, **kw):
        super().__init__(**kw)
        self.obj = obj
        self.name = name
        self.owner = owner

    def python_type(self):
        return types.BuiltinMethodType

    def var_getattr(self, tx, name):
        if name == "__name__":
            return ConstantVariable(self.name)
        if name == "__self__":
            return self.obj
        unimplemented(f"attribute {name!r} of {self.owner.__name__}.{self.name}")

    def call_function(self, tx, args, kwargs):
        return self.obj.base_call(tx, self.name, list(args), kwargs)

    def reconstruct(self, cg):
        cg.load_object(bind_method, push_null=True)
        cg.load_object(getattr(self.owner, self.name))
        cg.reconstruct(self.obj)
        cg.extend(emit.call(2))

    def __repr__(self):
        return f"SetMethodVariable({self.obj!r}.{self.name})"


def _values(var):
    return var.set.values if isinstance(var, SetProtocol) else var.values


def _result_set(like, values):
    """A new builtin set of the base type of `like` (Python's make_new_set_basetype)."""
    frozen = issubclass(like.python_type(), frozenset)
    return SetVariable(values, frozen=frozen)


def _c_slot(tx, op, a, b):
    """The C set slot for `a <op> b` (set_or, set_richcompare ...): NotImplemented when either
    side is no set."""
    if not (is_set_like(a) and is_set_like(b)):
        return ConstantVariable(NotImplemented)
    result = op(set(_values(a)), set(_values(b)))
    if isinstance(result, bool):
        return ConstantVariable(result)
    return _result_set(a, result)


def involved(a, b):
    """Whether `a <op> b` has a set/frozenset subclass instance on either side."""
    return isinstance(a, SetProtocol) or isinstance(b, SetProtocol)


def _side(tx, obj, dunder, other):
    """obj's `dunder(other)`: its Python override inlined, the C slot for a set, else
    NotImplemented; unimplemented for an operand kiln cannot answer for."""
    if isinstance(obj, SetProtocol):
        fn = user_method(obj, dunder)
        if isinstance(fn, types.FunctionType):
            return inline_call(tx, fn, [obj, other], {}, obj._class_attr_source(dunder))
        return obj.base_call(tx, dunder, [other], {})
    if isinstance(obj, SetVariable):
        if dunder in _REFLECTED_OPS:
            return _c_slot(tx, _REFLECTED_OPS[dunder], other, obj)
        return _c_slot(tx, _DUNDER_OPS[dunder], obj, other)
    if isinstance(obj, DictViewVariable) and obj.kind != "values":
        return _view_side(tx, obj, dunder, other)
    if is_user_object(obj):  # another user class (an OrderedSet): its Python dunder
        result = call_dunder(tx, obj, dunder, [other])
        return ConstantVariable(NotImplemented) if result is None else result
    if isinstance(obj, ConstantVariable) and not isinstance(obj.value, (set, frozenset)):
        return ConstantVariable(NotImplemented)  # an int, str, None, tuple ...: no set operator
    if isinstance(obj, (BaseListVariable, ConstDictVariable)) and obj.python_type() in _PLAIN:
        return ConstantVariable(NotImplemented)  # list/tuple/dict: no operator with a set
    unimplemented(f"{dunder} between a set subclass instance and {obj}")


def _view_side(tx, view, dunder, other):
    """A keys/items view's `dunder(other)` against a set subclass instance: the view's C slots
    read the other operand's items only, so it stands as the plain set of its items."""
    plain = SetVariable(set(_values(other))) if isinstance(other, SetProtocol) else other
    if dunder in _REFLECTED_OPS:
        op, left, right = _REFLECTED_OPS[dunder], plain, view
    else:
        op, left, right = _DUNDER_OPS[dunder], view, plain
    if op in (operator.or_, operator.and_, operator.sub, operator.xor):
        return dict_views.set_op(tx, op, left, right)
    result = dict_views.compare(tx, op, left, right)
    return ConstantVariable(NotImplemented) if result is None else result


def _not_implemented(var):
    return var.is_python_constant() and var.as_python_constant() is NotImplemented


def binary_op(tx, fn, a, b):
    """`a <op> b` with a set/frozenset subclass instance on a side (Python's binary protocol),
    or None for an operator that is not a set operator."""
    symbol = _SYMBOLS.get(fn)
    if fn in _INPLACE:
        dunder, op = _INPLACE[fn]
        symbol = _SYMBOLS[op] + "="
        if isinstance(a, SetVariable) and not a.frozen and is_set_like(b):
            a.call_method(tx, _INPLACE_UPDATE[dunder], [b], {})  # set.__ior__: in place
            return a
        if isinstance(a, SetProtocol):
            impl = user_method(a, dunder)
            if isinstance(impl, types.FunctionType):
                result = inline_call(tx, impl, [a, b], {}, a._class_attr_source(dunder))
            elif a.base is set:
                result = a.base_call(tx, dunder, [b], {})
            else:
                result = ConstantVariable(NotImplemented)
            if not _not_implemented(result):
                return result
        fn = op
    if fn not in _BINARY:
        return None
    fwd, rev = _BINARY[fn]
    ta, tb = a.python_type(), b.python_type()
    order = [(a, fwd, b), (b, rev, a)]
    if ta is not tb and issubclass(tb, ta) and isinstance(b, SetProtocol):
        if isinstance(user_method(b, rev), types.FunctionType):
            order.reverse()  # the right operand's subclass overrides the reflected method
    for obj, dunder, other in order:
        result = _side(tx, obj, dunder, other)
        if not _not_implemented(result):
            return result
    if fn is operator.eq or fn is operator.ne:
        return ConstantVariable((fn is operator.ne) != (a is b))  # identity (two objects)
    names = f"'{ta.__name__}' and '{tb.__name__}'"
    if fn in (operator.lt, operator.le, operator.gt, operator.ge):
        raise_observed(tx, TypeError, f"'{symbol}' not supported between instances of {names}")
    raise_observed(tx, TypeError, f"unsupported operand type(s) for {symbol}: {names}")


INSTANCE_MAKERS.append(make_instance)
