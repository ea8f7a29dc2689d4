"""`typing` generics subscripted at run time (`List[int]`, `Optional[Tensor]`, `dict[str, int]`).

Note [Typing: subscripts folded]
Subscripting a typing generic builds (and caches, in typing's own lru_cache) an alias object
and has no other effect, so `List[int]` with a constant generic and constant arguments is
computed while tracing and the result is a constant of the graph's frame. The generic is pinned
by an ID_MATCH guard on its source (a rebound global recompiles).
"""

import inspect
import types
import typing

from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.variables.base import VariableTracker, wrap_constant_like
from kiln.frontend.variables.user_attrs import has_instance_dict

# the classes whose instances are typing's subscriptable generics
_GENERIC_TYPES = tuple(
    t
    for t in (
        getattr(typing, "_GenericAlias", None),
        getattr(typing, "_SpecialGenericAlias", None),
        getattr(typing, "_SpecialForm", None),
        getattr(typing, "_TupleType", None),
        getattr(typing, "_CallableType", None),
        getattr(typing, "_LiteralSpecialForm", None),
        types.GenericAlias,
    )
    if isinstance(t, type)
)


def _constant_of(var, pinned):
    """The Python value of a constant-like traced value (a literal, a class, a typing object, a
    tuple of them), or (None, False); values read from a source are added to `pinned`."""
    if var.is_python_constant():
        return var.as_python_constant(), True
    if type(var).__name__ == "TupleVariable":
        values = [_constant_of(i, pinned) for i in var.items]
        if all(ok for _, ok in values):
            return tuple(v for v, _ in values), True
        return None, False
    value = getattr(var, "value", None)
    if isinstance(value, (type, typing.TypeVar)) or isinstance(value, _GENERIC_TYPES):
        if var.source is not None:
            pinned.append((var.source, value))
        return value, True
    return None, False


def typing_subscript(tx, obj, index):
    """`generic[index]` folded to its alias (Note [Typing: subscripts folded]), or None."""
    try:
        kind = obj.python_type()
    except Exception:
        return None
    if not (issubclass(kind, type) or issubclass(kind, _GENERIC_TYPES)):  # (cheap: most)
        return None
    pinned = []
    generic, ok = _constant_of(obj, pinned)
    if not ok or not (isinstance(generic, _GENERIC_TYPES) or _is_generic_class(generic)):
        return None
    args, ok = _constant_of(index, pinned)
    if not ok:
        return None
    try:
        alias = generic[args]
    except Exception:  # what Python raises is left to the usual path
        return None
    for source, value in pinned:
        tx.output.guards.add(GuardKind.ID_MATCH, source, value)
    if isinstance(generic, type) and issubclass(generic, typing.Generic):
        return UserGenericAliasVariable(alias)
    return wrap_constant_like(tx, alias)


def _is_generic_class(value):
    """A builtin class subscripted as a generic (`list[int]`, `dict[str, int]`), or a user class
    deriving from typing.Generic (`Box[int]`)."""
    if value in (list, dict, tuple, set, frozenset, type):
        return True
    hook = (
        inspect.getattr_static(value, "__class_getitem__", None)
        if isinstance(value, type)
        else None
    )
    if isinstance(hook, classmethod) and hook.__func__ is types.GenericAlias:
        return True  # `__class_getitem__ = classmethod(GenericAlias)` (collections.abc ...)
    return (
        isinstance(value, type)
        and issubclass(value, typing.Generic)
        and value is not typing.Generic
    )


# Note [Typing: calling a user generic alias]
# `Box[int](v)` calls typing's _GenericAlias.__call__: it makes `Box(v)`, then sets the instance's
# `__orig_class__` to the alias (ignoring an AttributeError). kiln does the same on an object it
# builds (none on one whose class has __slots__ and no __dict__: typing's store raises and is
# ignored); an object it cannot store into breaks.
class UserGenericAliasVariable(VariableTracker):
    """`Box[int]` of a user class deriving from typing.Generic."""

    def __init__(self, alias, **kw):
        super().__init__(**kw)
        self.alias = alias

    def python_type(self):
        return type(self.alias)

    def is_python_constant(self):
        return True

    def as_python_constant(self):
        return self.alias

    def call_function(self, tx, args, kwargs):
        obj = wrap_constant_like(tx, self.alias.__origin__).call_function(tx, args, kwargs)
        if not hasattr(obj, "store_attr"):
            unimplemented(f"{self.alias}(...): setting __orig_class__ on {obj}")
        cls = obj.python_type()
        if not has_instance_dict(cls):  # __slots__: typing's store raises and is ignored
            if inspect.getattr_static(cls, "__orig_class__", None) is not None:
                unimplemented(f"{self.alias}(...): __orig_class__ is a slot or descriptor")
            return obj
        tx.output.side_effects.mutate_new_object(obj)
        obj.store_attr("__orig_class__", self)
        return obj

    def reconstruct(self, cg):
        cg.load_object(self.alias)
