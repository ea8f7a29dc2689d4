"""Dict keys that are not literals: objects, functions, typing forms, frozen dataclasses.

Note [Dicts: keys that are objects]
A traced dict holds its items under Python keys: a literal key is itself. A key that is an object
is held by a stand-in that hashes and compares as Python's dict sees that object, and keeps the
variable it came from (to give back on iteration and to rebuild the dict):

| the key                                              | stand-in    | hash / == as           |
| ---------------------------------------------------- | ----------- | ---------------------- |
| a class, a C function or slot not bound to an        | ObjectKey   | the object itself (its |
| instance, a typing form (guarded by identity where   |             | own hash and ==, no    |
| read from a source)                                  |             | user code runs)        |
| an object made in the frame whose class keeps        | ObjectKey   | identity (one variable |
| object's __hash__ and __eq__; a functools.partial or |             | per object)            |
| a function made in the frame                         |             |                        |
| an object from outside the frame whose class keeps   | ObjectKey   | identity (the real     |
| object's __hash__ and __eq__ (which of them are the  |             | object)                |
| same object is guarded)                              |             |                        |
| a frozen dataclass instance made in the frame (its   | FieldsKey   | its class and its      |
| generated __hash__ and __eq__)                       |             | fields, as a tuple     |
| a tuple (a namedtuple) holding any of these          | TupleKey    | the tuple of its items |

A stand-in equals the object it stands for, so a key reached as a constant (`int`) and the same
key reached as a variable find the same item. Anything else (a class with its own __hash__ or
__eq__, a list, a function from outside the frame, whose identity the guards do not pin) is not
a key kiln models: a break with its reason. Tensors: Note [Dicts: tensors as keys].
"""

import dataclasses
import types
import typing

import torch

from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.variables.constant import ConstantVariable

_C_CALLABLES = (
    types.BuiltinFunctionType,
    types.MethodWrapperType,
    types.WrapperDescriptorType,
    types.MethodDescriptorType,
)


class ObjectKey:
    """A dict key standing for an object (Note [Dicts: keys that are objects])."""

    __slots__ = ("var", "obj", "by_value")

    def __init__(self, var, obj, by_value):
        self.var = var
        self.obj = obj  # the real object, or the variable of an object made in the frame
        self.by_value = by_value

    def __hash__(self):
        return hash(self.obj) if self.by_value else id(self.obj)

    def __eq__(self, other):
        other = other.obj if isinstance(other, ObjectKey) else other
        return self.obj is other or (self.by_value and self.obj == other)

    def __repr__(self):
        return f"ObjectKey({self.var!r})"


class FieldsKey:
    """A frozen dataclass instance made in the frame, as a dict key: its class and fields."""

    __slots__ = ("var", "cls", "fields")

    def __init__(self, var, cls, fields):
        self.var = var
        self.cls = cls
        self.fields = fields

    def __hash__(self):
        return hash(self.fields)

    def __eq__(self, other):
        return (
            isinstance(other, FieldsKey) and other.cls is self.cls and other.fields == self.fields
        )

    def __repr__(self):
        return f"FieldsKey({self.var!r})"


class TupleKey:
    """A tuple holding object keys, as a dict key: equal to the tuple of its items."""

    __slots__ = ("var", "items")

    def __init__(self, var, items):
        self.var = var
        self.items = items

    def __hash__(self):
        return hash(self.items)

    def __eq__(self, other):
        return self.items == (other.items if isinstance(other, TupleKey) else other)

    def __repr__(self):
        return f"TupleKey({self.var!r})"


STAND_INS = (ObjectKey, FieldsKey, TupleKey)


def is_stand_in(key):
    """Whether a traced dict's key stands for an object (not a Python constant)."""
    return isinstance(key, STAND_INS)


def _plain_identity(cls):
    return cls.__hash__ is object.__hash__ and cls.__eq__ is object.__eq__


def _typing_form(value):
    return (
        value is typing.Union
        or isinstance(value, (types.UnionType, types.GenericAlias))
        or (type(value).__module__ == "typing" and type(value).__name__.startswith("_"))
    )


def _pinned(value):
    """Whether a real object is a key kiln can hold by itself: its identity is what the guards
    pin (a class, a C function or slot not bound to an instance, a typing form), and its hash
    and == run no user code."""
    if isinstance(value, type) or _typing_form(value):
        return True
    if isinstance(value, _C_CALLABLES):
        owner = getattr(value, "__self__", None)
        return owner is None or isinstance(owner, (type, types.ModuleType))
    return False


def _generated(fn):
    code = getattr(fn, "__code__", None)
    return code is not None and code.co_filename == "<string>"  # made by dataclasses


def _frozen_dataclass(cls):
    params = getattr(cls, "__dataclass_params__", None)
    return (
        params is not None
        and params.frozen
        and params.eq
        and _generated(vars(cls).get("__hash__"))
        and _generated(vars(cls).get("__eq__"))
    )


def object_key(var, const_key):
    """The stand-in for `var` as a dict key (Note [Dicts: keys that are objects]); const_key
    turns a variable that is a Python constant into its key."""
    if var.is_python_constant():
        return const_key(var)
    items = getattr(var, "items", None)
    if isinstance(items, list) and isinstance(var.python_type(), type):
        if issubclass(var.python_type(), tuple):
            return TupleKey(var, tuple(object_key(i, const_key) for i in items))
    value = getattr(var, "value", _NO_VALUE)
    if value is not _NO_VALUE and _pinned(value):
        return ObjectKey(var, value, by_value=not _plain_identity(type(value)))
    if is_traced_tensor(var):  # Note [Dicts: tensors as keys]
        if var.python_type() not in (torch.Tensor, torch.nn.Parameter):
            unimplemented(f"dict key {var} (a tensor subclass: its own __hash__)")
        if getattr(var, "may_be", None) is not None:
            unimplemented(
                "a dict key that may be another tensor (Note [Operators: tensor identity])"
            )
        return ObjectKey(var, var, by_value=False)
    if var.source is not None:
        if is_outside_object(var):  # Note [Dicts: objects from outside as keys]
            return ObjectKey(var, var.value, by_value=False)
        unimplemented(f"dict key {var} (an object from outside the frame)")
    cls = getattr(var, "cls", None)
    if isinstance(cls, type) and getattr(var, "attrs", None) is not None:  # made in the frame
        if _frozen_dataclass(cls):
            names = [f.name for f in dataclasses.fields(cls) if f.compare]
            if all(n in var.attrs for n in names):
                fields = tuple(object_key(var.attrs[n], const_key) for n in names)
                return FieldsKey(var, cls, fields)
        if _plain_identity(cls):
            return ObjectKey(var, var, by_value=False)
        unimplemented(f"dict key {cls.__name__} (its own __hash__ or __eq__)")
    if getattr(var, "keeps_identity", False) is True and _plain_identity(var.python_type()):
        return ObjectKey(var, var, by_value=False)  # a partial or a function made in the frame
    unimplemented(f"dict key {var} is not a constant")


_NO_VALUE = object()


# Note [Dicts: objects from outside as keys]
# An object from outside the frame whose class keeps object's __hash__ and __eq__ is, as a key,
# its identity: it is held by an ObjectKey on the real object, so that two sources of one object
# find one item. What the trace folded is which of these key objects were the same, and that is
# what is guarded (Note [Guards: which objects are the same]): nothing pins the objects themselves.
def is_outside_object(var):
    """Whether var is a plain-identity user object from outside the frame (a source)."""
    from kiln.frontend.variables.user_defined import UserDefinedObjectVariable

    return (
        type(var) is UserDefinedObjectVariable
        and var.source is not None
        and _plain_identity(type(var.value))
    )


def _guard_object_keys(tx, keys):
    for key in keys:
        if isinstance(key, ObjectKey) and key.obj is not key.var and is_outside_object(key.var):
            tx.output.guards.same_objects("dict keys", key.var.source, key.obj)


# Note [Dicts: tensors as keys]
# A plain tensor hashes by identity and is compared with == only when the hashes are equal, that
# is never for two objects: as a dict key it is its identity, which is its variable (Note
# [Operators: tensor identity]); it is held by an ObjectKey on the variable. Tensors from outside
# the frame used as keys together are guarded to stay distinct objects (an aliased call
# recompiles), as for sets (Note [Sets: tensors as items]).
def is_traced_tensor(var):
    """Whether var is a tensor traced in the graph."""
    return getattr(var, "proxy", None) is not None and isinstance(
        getattr(var, "example", None), torch.Tensor
    )


def guard_tensor_keys(tx, keys):
    """Tensors from outside the frame among these dict keys stay distinct objects; objects from
    outside keep which of them are the same (Note [Dicts: objects from outside as keys])."""
    _guard_object_keys(tx, keys)
    sourced = {
        id(k.var): k.var
        for k in keys
        if isinstance(k, ObjectKey) and is_traced_tensor(k.var) and k.var.source is not None
    }
    if len(sourced) < 2:
        return
    ids = frozenset(sourced)
    cliques = _distinct_cliques(tx)
    for clique in cliques[-_CLIQUES_TRIED:]:
        if ids <= clique:
            return
        new = ids - clique
        if len(new) == 1:  # one key more than a set already guarded: only its own pairs
            (a,) = (sourced[i] for i in new)
            for i in ids & clique:
                _guard_distinct(tx, a, sourced[i])
            cliques.append(ids)
            return
    tensors = list(sourced.values())
    for i, a in enumerate(tensors):
        for b in tensors[i + 1 :]:
            _guard_distinct(tx, a, b)
    cliques.append(ids)


def known_distinct(tx, variables):
    """Record tensor variables as distinct objects already (the keys of one dict input)."""
    _distinct_cliques(tx).append(frozenset(id(v) for v in variables))


# Note [Dicts: distinct keys guarded once]
# Each lookup or store in a dict with tensor keys guards the tensors from outside the frame among
# its keys to stay distinct; done pair by pair on every call that is quadratic in the keys, per
# call (an optimizer's state keyed by hundreds of parameters). The sets of variables already known
# distinct (guarded, or keys of one dict input, distinct by construction) are remembered for the
# trace: a set inside one of them needs nothing, one with a single key more guards only that
# key's pairs. Only the most recent sets are tried.
_CLIQUES_TRIED = 8


def _distinct_cliques(tx):
    output = tx.output
    cliques = getattr(output, "_kiln_distinct_keys", None)
    if cliques is None:
        cliques = output._kiln_distinct_keys = []
    return cliques


def _guard_distinct(tx, a, b):
    if a is not b and a.source != b.source:
        tx.output.guards.add(GuardKind.DISTINCT, a.source, b.source)


def key_var(key):
    """The variable of a traced dict's key (a stand-in's own, else a constant)."""
    return key.var if is_stand_in(key) else ConstantVariable(key)
