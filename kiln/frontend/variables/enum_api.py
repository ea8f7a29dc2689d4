"""Enum's functional API in traced code: `Enum("Color", "RED GREEN")` makes the class while tracing.

Note [Enums: classes made by the functional API]
`SomeEnum(name, names, module=, qualname=, type=, start=, boundary=)` on an enum class without
members makes a new enum class from its arguments. With constant arguments (a str, a sequence or
a mapping of constants; `type` a builtin class, so that no user code runs) kiln makes that class
for real while tracing, as the eager call would: `module` defaults to the calling frame's module
name, as Python's own default reads it from the caller. Its members are then constants of the
trace (`E.a.value` folds). Each eager call makes a new class, so neither the class nor a member
may leave the frame (their identity would be shared between calls): where one would, the
transformed code cannot build it, and that is a graph break (`constant.MADE_WHILE_TRACING`).
"""

import builtins
import enum

from kiln.exc import unimplemented
from kiln.frontend.variables.constant import MADE_WHILE_TRACING, ConstantVariable
from kiln.frontend.variables.user_defined import INSTANCE_MAKERS, UserDefinedClassVariable

_KEYWORDS = ("module", "qualname", "type", "start", "boundary")


def _constant(var, what):
    if not var.is_python_constant():
        unimplemented(f"Enum functional API: {what} {var} is not a constant")
    return var.as_python_constant()


def make_enum_class(tx, cls_var, args, kwargs):
    """`cls(name, names, ...)` of an enum class without members, else None (not this maker's)."""
    cls = cls_var.value
    if not (isinstance(cls, type) and issubclass(cls, enum.Enum)) or len(cls.__members__):
        return None
    if len(args) != 2 or any(k not in _KEYWORDS for k in kwargs):
        unimplemented(f"Enum functional API {cls.__name__}() with these arguments")
    name = _constant(args[0], "name")
    names = _constant(args[1], "names")
    kw = {k: _constant(v, k) for k, v in kwargs.items()}
    mixin = kw.get("type")
    if mixin is not None and getattr(builtins, getattr(mixin, "__name__", ""), None) is not mixin:
        unimplemented(f"Enum functional API with type={mixin!r} (its code would run)")
    kw.setdefault("module", tx.f_globals.get("__name__"))
    try:
        made = cls(name, names, **kw)
    except Exception as e:
        unimplemented(f"Enum functional API {cls.__name__}() raised {type(e).__name__}: {e}")
    MADE_WHILE_TRACING.add(made)
    return MadeEnumClassVariable(made)


class MadeEnumClassVariable(UserDefinedClassVariable):
    """An enum class made while tracing: `E[name]` of a constant name and iteration read its
    members (the class has no source its `_member_map_` could be guarded through, and needs
    none: it never changes)."""

    def call_method(self, tx, name, args, kwargs):
        if name == "__getitem__" and len(args) == 1 and not kwargs:
            key = _constant(args[0], "member name")
            member = self.value.__members__.get(key) if isinstance(key, str) else None
            if member is None:
                unimplemented(f"KeyError {key!r}: no such member of {self.value.__name__}")
            return ConstantVariable(member)
        return super().call_method(tx, name, args, kwargs)

    def unpack_var_sequence(self, tx):
        """`iter(E)`: its members (aliases skipped, as Python's iteration does)."""
        return [ConstantVariable(m) for m in self.value]


INSTANCE_MAKERS.append(make_enum_class)
