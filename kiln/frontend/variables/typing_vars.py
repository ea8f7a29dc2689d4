"""`typing` generics subscripted at run time (`List[int]`, `Optional[Tensor]`, `dict[str, int]`).

Note [Typing: subscripts folded]
Subscripting a typing generic builds (and caches, in typing's own lru_cache) an alias object
and has no other effect, so `List[int]` with a constant generic and constant arguments is
computed while tracing and the result is a constant of the graph's frame. The generic is pinned
by an ID_MATCH guard on its source (a rebound global recompiles).
"""

import types
import typing

from kiln.frontend.guards import GuardKind
from kiln.frontend.variables.base import wrap_constant_like

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
    if isinstance(value, type) or isinstance(value, _GENERIC_TYPES):
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
    if not (kind is type or issubclass(kind, _GENERIC_TYPES)):  # (cheap: most subscripts)
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
    return wrap_constant_like(tx, alias)


def _is_generic_class(value):
    """A builtin class subscripted as a generic (`list[int]`, `dict[str, int]`)."""
    return value in (list, dict, tuple, set, frozenset, type)
