"""Queries on class objects answered while tracing: `cls.__subclasses__()`, `A | B` of classes.

Note [Classes: __subclasses__]
`cls.__subclasses__()` answers from the class's live (weakly held) list of direct subclasses: a
class defined after the compile, or one collected since, changes the answer without any store the
frame could see. kiln folds the answer into a new list of the subclasses (each pinned by the
guard, so none needs a source) and guards on the answer itself: a STATE_QUERY guard re-asks
`cls.__subclasses__()` on each call and compares it, item by item and by identity, with the
classes folded (held weakly: the guard keeps no class alive, and a dead one fails it). A class
made while tracing, or one whose metaclass has its own `__subclasses__`, is a break.

Note [Classes: unions of classes]
`A | B` of two classes (or a class and None) is `types.UnionType` (PEP 604): type's own `__or__`
builds it from the two operands alone, so with both operands known (guarded by identity) the
union is a constant. A metaclass with its own `__or__`/`__ror__` runs user code: not folded here.
A generic alias (`list[int]`) or a union as an operand builds the union with its own `__or__`
from the operands alone too (`torch.Tensor | list[int]` annotations of a function made here).
"""

import inspect
import types
import weakref

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.variables.base import VariableTracker, wrap_constant_like
from kiln.frontend.variables.classes import is_local_class
from kiln.frontend.variables.lists import ListVariable, TupleVariable
from kiln.frontend.variables.misc import ConstantObjectVariable
from kiln.frontend.variables.user_defined import CLASS_ATTRS

_TYPE_SUBCLASSES = type.__dict__["__subclasses__"]
_TYPE_OR = type.__dict__["__or__"]
_TYPE_ROR = type.__dict__["__ror__"]


def subclasses_method(cls_var, name):
    """`cls.__subclasses__` of a class variable when it is type's own method, else None."""
    cls = cls_var.value
    if name != "__subclasses__" or not isinstance(cls, type):
        return None
    if inspect.getattr_static(cls, "__subclasses__", None) is not _TYPE_SUBCLASSES:
        return None
    return SubclassesMethodVariable(cls_var)


CLASS_ATTRS.append(subclasses_method)


def _subclasses_unchanged(cls, subs):
    """The STATE_QUERY guard's (check, True): `cls.__subclasses__()` is still `subs`."""
    cls_ref = weakref.ref(cls)
    refs = tuple(weakref.ref(s) for s in subs)

    def subclasses_unchanged():
        c = cls_ref()
        if c is None:
            return False
        now = type.__subclasses__(c)
        return len(now) == len(refs) and all(r() is s for r, s in zip(refs, now, strict=True))

    return (subclasses_unchanged, True)


class SubclassesMethodVariable(VariableTracker):
    """`cls.__subclasses__` before it is called (Note [Classes: __subclasses__])."""

    def __init__(self, cls_var, **kw):
        super().__init__(**kw)
        self.cls_var = cls_var

    def call_function(self, tx, args, kwargs):
        if args or kwargs:
            unimplemented("__subclasses__() with arguments")
        cls = self.cls_var.value
        subs = type.__subclasses__(cls)
        if is_local_class(cls) or any(is_local_class(s) for s in subs):
            unimplemented(f"{cls.__qualname__}.__subclasses__() over a class made while tracing")
        tx.output.guards.add(GuardKind.STATE_QUERY, None, _subclasses_unchanged(cls, subs))
        return ListVariable([wrap_constant_like(tx, s) for s in subs])

    def reconstruct(self, cg):
        self.cls_var.reconstruct(cg)
        cg.extend(emit.load_attr("__subclasses__"))

    def __repr__(self):
        return f"SubclassesMethodVariable({self.cls_var.value.__qualname__})"


def _plain_or(value):
    """Whether `value | x` and `x | value` are type's own (or None's) union."""
    if value is None or type(value) in (types.GenericAlias, types.UnionType):
        return True  # (`list[int] | A`, `(A | B) | C`: their own __or__ builds the union)
    if not isinstance(value, type):
        return False
    meta = type(value)
    return (
        inspect.getattr_static(meta, "__or__", None) is _TYPE_OR
        and inspect.getattr_static(meta, "__ror__", None) is _TYPE_ROR
    )


def union_of_classes(a, b):
    """`a | b` of two known classes (or None) as a constant union, else None
    (Note [Classes: unions of classes])."""
    if not (a.is_python_constant() and b.is_python_constant()):
        return None
    x, y = a.as_python_constant(), b.as_python_constant()
    if x is None and y is None or not (_plain_or(x) and _plain_or(y)):
        return None
    if isinstance(x, type) and is_local_class(x) or isinstance(y, type) and is_local_class(y):
        return None
    try:
        union = x | y
    except TypeError:
        return None
    if not isinstance(union, types.UnionType):  # (`A | A` is A itself: not folded here)
        return None
    return union


class UnionVariable(ConstantObjectVariable):
    """A `types.UnionType` folded from known classes (Note [Classes: unions of classes])."""

    def var_getattr(self, tx, name):
        if name == "__args__":  # (classes: no frozen values, each pinned by its operand's guard)
            return TupleVariable([wrap_constant_like(tx, c) for c in self.value.__args__])
        return super().var_getattr(tx, name)
