"""Operators and builtins on user objects: the Python dunders their classes define, inlined."""

import builtins
import collections.abc
import operator
import types

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.variables.base import VariableTracker
from kiln.frontend.variables.constant import BINARY_OPS, COMPARE_OPS, ConstantVariable
from kiln.frontend.variables.exceptions import ObservedException, raise_observed
from kiln.frontend.variables.functions import inline_call
from kiln.frontend.variables.lists import ListIteratorVariable, TupleVariable

# Note [Objects: operator protocol]
# An operator or builtin applied to a user object runs the Python dunder its class defines
# (inlined): bool() -> __bool__ or __len__, iteration -> __iter__ (returning an iterator over a
# list or a generator), str()/repr() -> __str__/__repr__, a <op> b -> a.__op__(b), else
# b.__rop__(a) when that returns NotImplemented. A dunder implemented in C (a builtin base
# class) is not modelled: a break. A class defining none falls back to object's behaviour
# (truthy, identity equality).
_OPAQUE = object()
_REFLECTED = {"__lt__": "__gt__", "__le__": "__ge__", "__gt__": "__lt__", "__ge__": "__le__"}
_REFLECTED.update({"__eq__": "__eq__", "__ne__": "__ne__"})
_BINARY_DUNDERS = {
    operator.add: "add",
    operator.sub: "sub",
    operator.mul: "mul",
    operator.truediv: "truediv",
    operator.floordiv: "floordiv",
    operator.mod: "mod",
    operator.matmul: "matmul",
    operator.and_: "and",
    operator.or_: "or",
    operator.xor: "xor",
}
_INPLACE_DUNDERS = {getattr(operator, f"i{n}"): n for n in _BINARY_DUNDERS.values()}
_COMPARE_DUNDERS = {
    operator.eq: "__eq__",
    operator.ne: "__ne__",
    operator.lt: "__lt__",
    operator.le: "__le__",
    operator.gt: "__gt__",
    operator.ge: "__ge__",
}


def is_user_object(var):
    """A user object whose class's dunders kiln may inline."""
    from kiln.frontend.variables.user_defined import NewObjectVariable, UserDefinedObjectVariable

    return isinstance(var, (NewObjectVariable, UserDefinedObjectVariable))


def user_method(var, name):
    """The Python function `name` of the object's class, None when only `object` has it (or
    nothing), _OPAQUE when a C base class implements it."""
    for k in var.python_type().__mro__:
        if name in vars(k):
            v = vars(k)[name]
            if isinstance(v, types.FunctionType):
                return v
            return None if k is object else _OPAQUE
    return None


def call_dunder(tx, var, name, args):
    """Inline `var.name(*args)` when its class defines it in Python; else None."""
    fn = user_method(var, name)
    if fn is _OPAQUE:
        if var.python_type() in (set, frozenset):  # (Note [Sets: inputs] in builder)
            unimplemented(
                f"{var.python_type().__name__}.{name} of a set holding tensors or objects: only "
                "sets of constants, functions and classes are traced (the order of other items "
                "follows their hashes, ids for tensors)"
            )
        unimplemented(f"{var.python_type().__name__}.{name} (implemented in C)")
    if fn is None:
        return None
    return inline_call(tx, fn, [var, *args], {}, var._class_attr_source(name))


def _builtin_base_compares(cls):
    """Whether a builtin base of `cls` (dict, list ...) has its own C __eq__, which answers when
    the Python dunders return NotImplemented."""
    return any(
        k is not object
        and "__eq__" in vars(k)
        and not isinstance(vars(k)["__eq__"], types.FunctionType)
        for k in cls.__mro__
    )


def _not_implemented(result):
    return result.is_python_constant() and result.as_python_constant() is NotImplemented


def _object_ne(tx, obj, other):
    """`object.__ne__(obj, other)`: the class's __eq__, inverted, or NotImplemented with it."""
    eq = call_dunder(tx, obj, "__eq__", [other])
    if eq is None:  # object.__eq__: True for the object itself, else NotImplemented
        return ConstantVariable(False) if obj is other else ConstantVariable(NotImplemented)
    if _not_implemented(eq):
        return eq
    if not eq.is_python_constant():
        unimplemented(f"!= of a {obj.python_type().__name__}: __eq__ returned {eq}")
    return ConstantVariable(not eq.as_python_constant())


def user_binary_op(tx, fn, a, b):
    """`a <op> b` with a user object on either side (Note [Objects: operator protocol]), or
    None when neither side defines the operator."""
    if fn in _COMPARE_DUNDERS:
        fwd = _COMPARE_DUNDERS[fn]
        rev = _REFLECTED[fwd]
    elif fn in _BINARY_DUNDERS or fn in _INPLACE_DUNDERS:
        n = _BINARY_DUNDERS.get(fn) or _INPLACE_DUNDERS[fn]
        fwd, rev = f"__{n}__", f"__r{n}__"
        if fn in _INPLACE_DUNDERS and is_user_object(a):
            result = call_dunder(tx, a, f"__i{n}__", [b])
            if result is not None and not _not_implemented(result):
                return result
    else:
        return None
    ta, tb = a.python_type(), b.python_type()
    if ta is not tb and issubclass(tb, ta) and is_user_object(b):
        unimplemented(f"{fwd} between {ta.__name__} and its subclass {tb.__name__}")
    for obj, other, name in ((a, b, fwd), (b, a, rev)):
        if is_user_object(obj):
            if name == "__ne__" and user_method(obj, "__ne__") is None:
                result = _object_ne(tx, obj, other)
            else:
                result = call_dunder(tx, obj, name, [other])
            if result is not None and not _not_implemented(result):
                return result
    if fn in (operator.eq, operator.ne):
        for obj in (a, b):
            if is_user_object(obj) and _builtin_base_compares(obj.python_type()):
                # (dict.__eq__(d, counter) compares the items: not object's identity)
                unimplemented(f"{fwd} of a {obj.python_type().__name__} falls to its C base's")
    if fn in (operator.eq, operator.ne) and (is_user_object(a) or is_user_object(b)):
        from kiln.frontend.variables.operators import compare_vars
        from kiln.frontend.variables.user_defined import NewObjectVariable

        same = operator.is_ if fn is operator.eq else operator.is_not  # NotImplemented both ways
        if isinstance(a, NewObjectVariable) or isinstance(b, NewObjectVariable):
            return ConstantVariable(same(a, b))  # (an object made while tracing is itself only)
        return compare_vars(tx, same, a, b)  # identity (guarded)
    if _number_declines(a, b):
        ta, tb = ta.__name__, tb.__name__
        if fn in _COMPARE_DUNDERS:
            raise_observed(
                tx,
                TypeError,
                f"'{_SYMBOLS[fn]}' not supported between instances of '{ta}' and '{tb}'",
            )
        raise_observed(
            tx, TypeError, f"unsupported operand type(s) for {_SYMBOLS[fn]}: '{ta}' and '{tb}'"
        )
    return None


# Note [Objects: operators no side takes]
# When the user object's dunders return NotImplemented (or it has none) and the other operand is
# an int, float, complex, bool or None, the number's own slots decline too (they take numbers
# only), so Python raises TypeError: `OrderedSet() - 1`. The error is raised in the traced code
# with Python's message. Other operands (str, tuple, list: concatenation and repetition have
# their own rules and messages) stay a graph break.
_NUMBERS = (int, float, complex, bool, type(None))
_SYMBOLS = {fn: symbol for symbol, fn in {**BINARY_OPS, **COMPARE_OPS}.items()}
_SYMBOLS[operator.pow] = "** or pow()"


def _number_declines(a, b):
    """A user object and a number (or None): Note [Objects: operators no side takes]."""
    for obj, other in ((a, b), (b, a)):
        if is_user_object(obj) and isinstance(other, ConstantVariable):
            return type(other.value) in _NUMBERS
    return False


class ObjectCompareVariable(VariableTracker):
    """`object.__eq__` / `object.__ne__` bound to a user object (`super().__ne__(other)`):
    __eq__ is identity (else NotImplemented); __ne__ inverts the class's __eq__ (NotImplemented
    kept), as object's rich comparison does."""

    def __init__(self, obj, name, **kw):
        super().__init__(**kw)
        self.obj = obj
        self.name = name

    def _identity(self, other):
        from kiln.frontend.variables.user_defined import NewObjectVariable

        if other is self.obj:
            return ConstantVariable(True)
        if isinstance(self.obj, NewObjectVariable) or isinstance(other, NewObjectVariable):
            return ConstantVariable(NotImplemented)  # (one variable per object made in the trace)
        unimplemented(f"object.__eq__ of {self.obj} and {other}")

    def call_function(self, tx, args, kwargs):
        if kwargs or len(args) != 1:
            unimplemented(f"object.{self.name} with these arguments")
        eq = call_dunder(tx, self.obj, "__eq__", args)
        if self.name == "__eq__" or eq is None:
            eq = self._identity(args[0])
        if self.name == "__eq__" or _not_implemented(eq):
            return eq
        return ConstantVariable(not eq.truthy(tx))


def user_truthy(tx, var):
    """bool(obj): __bool__, else __len__ != 0, else True."""
    result = call_dunder(tx, var, "__bool__", [])
    name = "__bool__"
    if result is None:
        name = "__len__"
        result = call_dunder(tx, var, "__len__", [])
        if result is None:
            return True
    if not result.is_python_constant():
        unimplemented(f"bool() of a {var.python_type().__name__}: not a constant")
    value = result.as_python_constant()
    # (Python checks what the method returned: a bool, or a non-negative int)
    if name == "__bool__" and type(value) is not bool:
        raise_observed(
            tx, TypeError, f"__bool__ should return bool, returned {type(value).__name__}"
        )
    if name == "__len__" and not isinstance(value, int):
        raise_observed(
            tx, TypeError, f"'{type(value).__name__}' object cannot be interpreted as an integer"
        )
    if name == "__len__" and value < 0:
        raise_observed(tx, ValueError, "__len__() should return >= 0")
    return bool(value)


def user_iter_items(tx, var):
    """The items of `iter(obj)` when __iter__ is a Python function returning a list iterator
    or a generator (stepped to its end: Note [Generators: lazy])."""
    it = call_dunder(tx, var, "__iter__", [])
    if not isinstance(it, ListIteratorVariable):
        unimplemented(f"iteration over a {var.python_type().__name__} ({it})")
    return it.unpack_var_sequence(tx)


def user_text(tx, var, name):
    """str(obj) / repr(obj) by the class's Python __str__ / __repr__, or None."""
    result = call_dunder(tx, var, name, [])
    if result is None and name == "__str__":
        result = call_dunder(tx, var, "__repr__", [])
    if result is None:
        return None
    if not (result.is_python_constant() and isinstance(result.as_python_constant(), str)):
        unimplemented(f"{name} of a {var.python_type().__name__} returned {result}")
    return result


# Note [Objects: iterator protocol]
# `for x in obj` / `iter(obj)` on a user object calls its Python __iter__ once; when that returns
# a user object with a Python __next__ (often `self`), the loop steps it as Python does: each
# FOR_ITER / next(it) inlines `__next__`, whose StopIteration (observed in the traced code) ends
# the loop or gives next()'s default. Its state lives in the object's attributes (side effects,
# read back by the body), so __next__ and the loop body interleave exactly as in eager.
# Unpacking such an iterator at once (list(it), zip(it, ...)) is not modelled (a break).


def is_user_iterator(var):
    """A user object whose class defines __next__ in Python."""
    return is_user_object(var) and isinstance(user_method(var, "__next__"), types.FunctionType)


def user_iter(tx, var):
    """iter(obj) of a user object with a Python __iter__: a list iterator (a list's, a
    generator's items) or a user iterator; None when the class has no Python __iter__."""
    if not isinstance(user_method(var, "__iter__"), types.FunctionType):
        return None
    it = call_dunder(tx, var, "__iter__", [])
    if isinstance(it, ListIteratorVariable) or is_user_iterator(it):
        return it
    unimplemented(f"iter() of a {var.python_type().__name__} returned {it}")


def user_next(tx, it):
    """next(it) of a user iterator: the item, or None at its end (StopIteration)."""
    try:
        return call_dunder(tx, it, "__next__", [])
    except ObservedException as e:
        if not issubclass(e.var.cls, StopIteration):
            raise
        return None


def user_iter_builtin(tx, fn, args, kwargs):
    """`next(it[, default])` / `iter(obj)` on user objects (Note [Objects: iterator protocol]);
    None for any other call. (Reached from the translator's calls: builtin's own next/iter know
    kiln's list iterators only.)"""
    from kiln.frontend.variables.builtin import BuiltinVariable

    if type(fn) is not BuiltinVariable or kwargs or not args or not is_user_object(args[0]):
        return None
    if fn.fn is builtins.next and len(args) <= 2 and is_user_iterator(args[0]):
        item = user_next(tx, args[0])
        if item is not None:
            return item
        if len(args) == 2:
            return args[1]
        raise_observed(tx, StopIteration)
    if fn.fn is builtins.iter and len(args) == 1:
        return user_iter(tx, args[0])
    return None


# Note [Objects: mapping views of user mappings]
# collections.abc.Mapping's keys()/values()/items() return KeysView/ValuesView/ItemsView(self):
# live views whose iteration runs the mapping's Python __iter__ and __getitem__. kiln keeps the
# view as the mapping plus a kind and reads the mapping at each use (iteration, len, `in` on
# keys), as Python does, so a mapping changed after the view was made is seen changed.
_VIEW_KINDS = {
    collections.abc.KeysView: "keys",
    collections.abc.ValuesView: "values",
    collections.abc.ItemsView: "items",
}


class MappingViewVariable(VariableTracker):
    """KeysView / ValuesView / ItemsView(mapping) of a user mapping object."""

    def __init__(self, cls, mapping, **kw):
        super().__init__(**kw)
        self.cls = cls
        self.mapping = mapping

    def python_type(self):
        return self.cls

    def unpack_var_sequence(self, tx):
        keys = user_iter_items(tx, self.mapping)
        kind = _VIEW_KINDS[self.cls]
        if kind == "keys":
            return keys
        values = [self.mapping.call_method(tx, "__getitem__", [k], {}) for k in keys]
        if kind == "values":
            return values
        return [TupleVariable([k, v]) for k, v in zip(keys, values)]

    def call_method(self, tx, name, args, kwargs):
        if name == "__len__" and not args and not kwargs:
            return self.mapping.call_method(tx, "__len__", [], {})
        if name == "__iter__" and not args and not kwargs:
            return ListIteratorVariable(self.unpack_var_sequence(tx))
        if name == "__contains__" and len(args) == 1 and _VIEW_KINDS[self.cls] == "keys":
            return self.mapping.call_method(tx, "__contains__", args, {})
        unimplemented(f"{self.cls.__name__}.{name}")

    def reconstruct(self, cg):
        cg.load_object(self.cls, push_null=True)
        cg.reconstruct(self.mapping)
        cg.extend(emit.call(1))


def mapping_view(cls, args, kwargs):
    """`KeysView(m)` (...) of a user mapping object, or None."""
    if cls in _VIEW_KINDS and len(args) == 1 and not kwargs and is_user_object(args[0]):
        return MappingViewVariable(cls, args[0])
    return None
