"""Instances of user subclasses of list made in the frame.

Note [Lists: subclass instances made in the frame]
`CustomList([a])` of a class that subclasses list and only adds methods of its own (it overrides
none of list's methods or dunders: no __init__, __new__, __getitem__, __iter__ ...) behaves as a
list in everything list does, so it is a ListVariable whose Python type is the class: list's
methods, len(), iteration, indexing and sum() are the list's, and a method the class adds is
inlined with the variable as self (`l.length_times_10()`, `l.append_twice(x)`, a `__call__`).
Other class attributes, attribute stores on the instance and classes made while tracing break.
It leaves the frame rebuilt as `CustomList(items)`. A class that overrides any of list's names
is not taken here (its instances are built as other user objects are, or break).

Note [Lists: subclass instances from outside the frame]
An instance of such a class passed in (or read from a global or an attribute) with nothing in
its instance __dict__ is the same ListSubclassVariable with a source, guarded on its type and
length (as a list is) and on its instance __dict__ staying empty (an instance attribute would
shadow a method). It is one tracked container, as a list input is: its items are read through
the source, and a mutation is replayed after the graph as `obj[:] = [items]` (list's own slice
store: the class overrides none of list's names).
"""

import inspect

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.source import AttrSource, GetItemSource
from kiln.frontend.variables.base import wrap_constant_like, wrap_value
from kiln.frontend.variables.classes import is_local_class
from kiln.frontend.variables.functions import UserMethodVariable, inline_call
from kiln.frontend.variables.lists import ListVariable
from kiln.frontend.variables.user_defined import INSTANCE_MAKERS

_HEAPTYPE = 1 << 9
_LIST_NAMES = frozenset(dir(list)) | {
    "__init_subclass__",
    "__slots__",
    "__getattr__",
    "__set_name__",
    "__class_getitem__",
}
_CLASS_BOOKKEEPING = frozenset(
    {
        "__module__",
        "__qualname__",
        "__doc__",
        "__dict__",
        "__weakref__",
        "__firstlineno__",
        "__static_attributes__",
    }
)


def _own_classes(cls):
    """The classes of cls's MRO before list, or None when its MRO is not (..., list, object) of
    Python classes."""
    mro = cls.__mro__
    if list not in mro or mro[mro.index(list) :] != (list, object):
        return None
    own = mro[: mro.index(list)]
    if not all(k.__flags__ & _HEAPTYPE and type(k) is type for k in own):
        return None
    return own


def plain_list_subclass(cls):
    """Whether cls subclasses list adding methods only (Note [Lists: subclass instances ...])."""
    if not isinstance(cls, type) or cls is list or not issubclass(cls, list):
        return False
    own = _own_classes(cls)
    if own is None or any(is_local_class(k) for k in own):
        return False
    return not any(
        name in _LIST_NAMES for k in own for name in vars(k) if name not in _CLASS_BOOKKEEPING
    )


def _own_attr(cls, name):
    """The attribute `name` the subclass defines itself (a class before list), else None."""
    for k in _own_classes(cls):
        if name in vars(k) and name not in _CLASS_BOOKKEEPING:
            return vars(k)[name]
    return None


class ListSubclassVariable(ListVariable):
    """An instance of a plain list subclass made in the frame (Note [Lists: subclass ...])."""

    def __init__(self, items, cls, **kw):
        super().__init__(items, **kw)
        self.cls = cls

    def python_type(self):
        return self.cls

    def getitem(self, tx, index):
        if isinstance(index, slice):  # (a slice of a list subclass is a plain list)
            return ListVariable(self.items[index])
        return super().getitem(tx, index)

    def _method(self, name):
        attr = _own_attr(self.cls, name)
        if attr is None:
            return None
        if not inspect.isfunction(attr):
            unimplemented(f"{self.cls.__name__}.{name}, a class attribute that is no method")
        return UserMethodVariable(attr, self)

    def var_getattr(self, tx, name):
        method = self._method(name)
        if method is not None:
            return method
        if name == "__class__":
            return wrap_constant_like(tx, self.cls)
        return super().var_getattr(tx, name)

    def call_method(self, tx, name, args, kwargs):
        method = self._method(name)
        if method is not None:
            return method.call_function(tx, args, kwargs)
        return super().call_method(tx, name, args, kwargs)

    def call_function(self, tx, args, kwargs):
        call = _own_attr(self.cls, "__call__")
        if not inspect.isfunction(call):
            unimplemented(f"calling a {self.cls.__name__} (no __call__ of its own)")
        return inline_call(tx, call, [self, *args], kwargs, None)

    def reconstruct(self, cg):
        if self.source is not None:
            self.source.reconstruct(cg)
            return
        cg.load_object(self.cls, push_null=True)
        for item in self.items:
            cg.reconstruct(item)
        cg.extend(emit.build_list(len(self.items)))
        cg.extend(emit.call(1))

    def __repr__(self):
        return f"ListSubclassVariable({self.cls.__name__}, {len(self.items)} items)"


def make_instance(tx, cls_var, args, kwargs):
    """`Cls(iterable)` of a plain list subclass, else None."""
    cls = cls_var.value
    if not plain_list_subclass(cls):
        return None
    if kwargs or len(args) > 1:
        unimplemented(f"{cls.__name__}() with these arguments")
    items = list(args[0].unpack_var_sequence(tx)) if args else []
    return ListSubclassVariable(items, cls)


INSTANCE_MAKERS.append(make_instance)


def is_plain_input(value):
    """Whether `value` (from outside the frame) is traced as a ListSubclassVariable."""
    return (
        isinstance(value, list)
        and type(value) is not list
        and plain_list_subclass(type(value))
        and not vars(value)
    )


def wrap_input(tx, value, source):
    """An instance from outside the frame (Note [Lists: subclass instances from outside ...])."""
    guards = tx.output.guards
    guards.add(GuardKind.LIST_LENGTH, source, (type(value), len(value)))
    guards.add(GuardKind.DICT_KEYS, AttrSource(source, "__dict__"), (dict, ()))
    items = [wrap_value(tx, v, GetItemSource(source, i)) for i, v in enumerate(value)]
    return ListSubclassVariable(items, type(value), source=source)
