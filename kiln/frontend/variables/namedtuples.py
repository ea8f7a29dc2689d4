"""Namedtuple classes made in the frame, and the Python methods of namedtuple subclasses.

    def f(a, b):                                     namedtuple(...) runs for real while tracing;
        P = collections.namedtuple("P", "x y")       P(a, b) is a TupleVariable of that class;
        p = P(a, b)                                  where P or p leaves the frame, the transformed
        return P(p.x, p.y + 1)                       code calls namedtuple(...) again (once)

Note [Namedtuples: classes made in the frame]
`collections.namedtuple(typename, field_names, rename=, defaults=, module=)` is a pure class
factory: with constant arguments it runs no user code and touches nothing outside the class it
returns. So kiln calls it for real while tracing (`module` defaults to the calling frame's module
name, which namedtuple reads from its caller's frame, here kiln's), and instances of the class are
traced as any namedtuple's. Each eager call makes a new class, so the class made while tracing
must not leave the frame (its identity would be shared between calls): where the class or an
instance of it leaves, the transformed code calls namedtuple again with the same arguments, once
per transformed code (`constant.load_remade`), and instances are made with that class's `_make`.
Defaults must be literals: a default is stored in the class, and a traced value there would be
the value of the call that was traced.

Note [Namedtuples: methods of a subclass]
A class from `typing.NamedTuple` (or `class P(namedtuple(...))`) may define methods, static and
class methods and properties in Python. `p.name` of such a member is the member bound as Python
binds it (a method to the tuple, a classmethod to its class), and its body is inlined; the
methods namedtuple itself generates (`_make`, `_replace`, `__repr__` ...) are not members here.

Note [Namedtuples: attributes of an instance with a __dict__]
A subclass of a namedtuple class that declares no `__slots__` has an instance dict: `p.c = t` works
in eager. For an instance from outside the frame (the builder keeps it as `var.instance`) the store
is a side effect like an object's (replayed on the real instance after the graph); a later read in
the frame sees it, and a name only the instance dict holds is read through its source (guarded).
Fields and other class attributes are not stored to (Python raises; kiln breaks), nor is anything
through a class's own __setattr__. A tuple made in the frame has no real instance: a break.
"""

import collections
import functools
import inspect
import types

from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.source import AttrSource
from kiln.frontend.variables import lists
from kiln.frontend.variables.base import PythonValueVariable, wrap_constant_like, wrap_value
from kiln.frontend.variables.constant import REMADE_CLASSES, is_literal
from kiln.frontend.variables.functions import UserMethodVariable, bound_classmethod, inline_call
from kiln.frontend.variables.user_defined import UserDefinedClassVariable

_SIGNATURE = inspect.signature(collections.namedtuple)
_GENERATED_FILE = collections.__file__  # where namedtuple's own methods are written


def is_factory(value):
    return value is collections.namedtuple


class NamedTupleFactoryVariable(PythonValueVariable):
    """`collections.namedtuple` (Note [Namedtuples: classes made in the frame]); as a value (a
    dict key, compared) the function itself."""

    def call_function(self, tx, args, kwargs):
        try:
            bound = _SIGNATURE.bind(*args, **kwargs)
        except TypeError as e:
            unimplemented(f"namedtuple() with these arguments ({e})")
        values = {}
        for name, var in bound.arguments.items():
            if not var.is_python_constant():
                unimplemented(f"namedtuple() with a non-constant {name} ({var})")
            values[name] = var.as_python_constant()
        fields = values["field_names"]
        if not isinstance(fields, str):
            # in the order the frame iterates them (a set's order is its insertion history's,
            # which a set rebuilt from the constants need not repeat)
            items = bound.arguments["field_names"].unpack_var_sequence(tx)
            fields = tuple(v.as_python_constant() for v in items)
        defaults = values.get("defaults")
        if defaults is not None:
            defaults = tuple(defaults)
            if not all(is_literal(d) for d in defaults):
                unimplemented("namedtuple() with defaults that are not literals")
        module = values.get("module")
        if module is None:
            module = tx.f_globals.get("__name__", "__main__")
        remake = functools.partial(
            collections.namedtuple,
            values["typename"],
            fields,
            rename=bool(values.get("rename", False)),
            defaults=defaults,
            module=module,
        )
        try:
            cls = remake()
        except Exception as e:
            unimplemented(f"namedtuple() raised {type(e).__name__}: {e}")
        REMADE_CLASSES[cls] = remake
        return UserDefinedClassVariable(cls)

    def reconstruct(self, cg):
        if self.source is not None:
            self.source.reconstruct(cg)
            return
        cg.load_object(collections.namedtuple)

    def __repr__(self):
        return "NamedTupleFactoryVariable()"


def guard_input(tx, special, source):
    """collections.namedtuple read from `source`: pinned by identity, then loaded from there."""
    if isinstance(special, NamedTupleFactoryVariable) and special.source is None:
        tx.output.guards.add(GuardKind.ID_MATCH, source, special.value)
        special.source = source


def user_member(tx, var, name):
    """`var.name` of a member the tuple's class defines in Python (Note [Namedtuples: methods of
    a subclass]), else None."""
    cls = var.tuple_cls
    owner = next((k for k in cls.__mro__ if name in vars(k)), None)
    if owner is None or owner in (tuple, object) or name == "__new__":
        return None
    static = vars(owner)[name]
    if isinstance(static, (staticmethod, classmethod)):
        fn = static.__func__
    elif isinstance(static, property):
        fn = static.fget
    else:
        fn = static
    if not isinstance(fn, types.FunctionType) or fn.__code__.co_filename == _GENERATED_FILE:
        return None
    if isinstance(static, staticmethod):
        return wrap_value(tx, fn, None)
    if isinstance(static, classmethod):
        return bound_classmethod(static, wrap_constant_like(tx, cls))
    if isinstance(static, property):
        return inline_call(tx, fn, [var], {}, var._class_attr_source(name, "fget"))
    return UserMethodVariable(fn, var, source=var._class_attr_source(name))


lists.TUPLE_MEMBERS.append(user_member)


class _Held:
    """The real instance behind a tuple variable, as side effects key attribute stores."""

    __slots__ = ("value", "source")

    def __init__(self, var):
        self.value, self.source = var.instance, var.source


def instance_attr(tx, var, name):
    """`var.name` of its instance dict (Note [Namedtuples: attributes of an instance with a
    __dict__]), else None."""
    if getattr(var, "instance", None) is None:
        return None
    stored = tx.output.side_effects.load_attr(_Held(var), name)
    if stored is not None:
        return stored
    if name in var.instance.__dict__ and inspect.getattr_static(var.tuple_cls, name, None) is None:
        return wrap_value(tx, var.instance.__dict__[name], AttrSource(var.source, name))
    return None


def store_attr(tx, var, name, value):
    """`var.name = value` on a namedtuple instance from outside the frame with an instance dict."""
    cls = var.tuple_cls
    if getattr(var, "instance", None) is None:
        unimplemented(f"attribute assignment .{name} on a {cls.__name__} made in the frame")
    if inspect.getattr_static(cls, name, None) is not None:
        unimplemented(f"attribute assignment .{name} over a class attribute of {cls.__name__}")
    if cls.__setattr__ is not object.__setattr__:
        unimplemented(f"assignment through {cls.__name__}.__setattr__")
    tx.output.side_effects.store_attr(_Held(var), name, value)


def instance_hasattr(tx, var, name):
    """hasattr(var, name) of a namedtuple instance from outside the frame with an instance dict:
    its class, the frame's stores, then the instance dict (its keys guarded)."""
    if inspect.getattr_static(var.tuple_cls, name, None) is not None:
        return True
    if tx.output.side_effects.load_attr(_Held(var), name) is not None:
        return True
    keys = tuple(var.instance.__dict__)
    if not all(type(k) is str for k in keys):
        unimplemented(f"hasattr on a {var.tuple_cls.__name__} with non-string attribute names")
    tx.output.guards.add(GuardKind.DICT_KEYS, AttrSource(var.source, "__dict__"), (dict, keys))
    return name in keys


lists.TUPLE_MEMBERS.append(instance_attr)
