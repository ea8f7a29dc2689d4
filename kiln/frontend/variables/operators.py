"""Python's operators on traced values: `a + b`, `a == b`, `a is b`, `x in c`, `-x`."""

import collections
import enum
import operator
import types

import torch

from kiln.exc import unimplemented
from kiln.frontend.dispatch_modes import modes_traced
from kiln.frontend.guards import GuardKind
from kiln.frontend.variables import (
    class_queries,
    dict_views,
    dicts,
    function_modes,
    numpy_vars,
    sequence_ops,
    set_subclass,
    sym,
    unbacked,
    unspec_float,
)
from kiln.frontend.variables.constant import BINARY_OPS, ConstantVariable, fold, is_literal
from kiln.frontend.variables.dict_views import DictViewVariable
from kiln.frontend.variables.dicts import ConstDictVariable, IdentityKeyedDictVariable
from kiln.frontend.variables.exceptions import ExceptionVariable, raise_observed
from kiln.frontend.variables.lists import (
    BaseListVariable,
    ListVariable,
    TupleVariable,
)
from kiln.frontend.variables.misc import (
    ConstantObjectVariable,
    ObjectIdVariable,
    is_frozen,
    wrap_frozen,
)
from kiln.frontend.variables.sets import SetVariable
from kiln.frontend.variables.sym import SymNodeVariable
from kiln.frontend.variables.symfloat import SizeFloatVariable
from kiln.frontend.variables.sys_modules import SysModulesVariable
from kiln.frontend.variables.tensor import TensorVariable
from kiln.frontend.variables.torch import (
    call_tensor_op,
    torch_function_involved,
    torch_function_operator,
)
from kiln.frontend.variables.unspec_float import SymFloatVariable
from kiln.frontend.variables.user_defined import NewObjectVariable, UserDefinedObjectVariable
from kiln.frontend.variables.user_protocol import user_binary_op

_SEQUENCE_OPS = {operator.add, operator.iadd, operator.mul, operator.imul}
_IS_OPS = {operator.is_, operator.is_not}


def _all_const(vars_):
    return all(v.is_python_constant() for v in vars_)


def binary_op(tx, fn, a, b):
    """a <op> b for an operator-module function."""
    if numpy_vars.involved(a, b):  # Note [NumPy: arrays as tensors]
        return numpy_vars.operator_call(tx, fn, [a, b])
    if isinstance(b, TensorVariable) and not isinstance(a, TensorVariable) and fn in _INPLACE:
        fn = _INPLACE[fn]  # `n += t` for a number n is `n = n + t` (no in-place, a new tensor)
    if modes_traced(tx) and _under_modes(tx, a, b):  # (modes first, as torch does)
        return function_modes.operator_call(tx, fn, a, b)  # Note [Frames: tracing a user's ...]
    if torch_function_involved([a, b]):  # Note [Tensors: subclasses with __torch_function__]
        return torch_function_operator(tx, fn, a, b)
    if isinstance(a, TensorVariable) or isinstance(b, TensorVariable):
        return call_tensor_op(tx, "call_function", fn, [a, b], {})
    if isinstance(a, SymFloatVariable) or isinstance(b, SymFloatVariable):
        result = unspec_float.binary(tx, fn, a, b)  # Note [Shapes: unspecialised floats]
        if result is not None:
            return result
    if hasattr(a, "op_argument") or hasattr(b, "op_argument"):  # a float `.item()`
        result = unbacked.float_binary(tx, fn, a, b)  # Note [Shapes: item() in the graph]
        if result is not None:
            return result
    if fn is operator.and_ and (hasattr(a, "fact_and") or hasattr(b, "fact_and")):
        result = (a if hasattr(a, "fact_and") else b).fact_and(a, b)  # torch's sym_and in a check
        if result is not None:
            return result
    if isinstance(a, SymNodeVariable | SizeFloatVariable) or isinstance(
        b, SymNodeVariable | SizeFloatVariable
    ):
        return sym.binary(tx, fn, a, b)  # Note [Shapes: SymNodeVariable]
    if sym.has_symbolic(a) or sym.has_symbolic(b):
        a, b = sym.as_sequence(a), sym.as_sequence(b)  # `(-1,) + x.shape[1:]`: item by item
    if isinstance(a, ConstantVariable) and isinstance(b, ConstantVariable):
        return fold(fn, a.value, b.value)
    if set_subclass.involved(a, b):  # Note [Sets: subclass instances]
        result = set_subclass.binary_op(tx, fn, a, b)
        if result is not None:
            return result
    if fn in _INPLACE and (
        isinstance(a, DictViewVariable)
        or (isinstance(b, DictViewVariable) and isinstance(a, SetVariable))
    ):
        fn = _INPLACE[fn]  # views have no in-place operators, set's take sets only: `a = a op b`
    if isinstance(a, DictViewVariable) or isinstance(b, DictViewVariable):
        result = dict_views.set_op(tx, fn, a, b) if fn in dict_views._SET_OPS else None
        if result is not None:
            return result
    if fn in (operator.or_, operator.ior) and _dict_object_vs_builtin(a, b):
        names = f"'{a.python_type().__name__}' and '{b.python_type().__name__}'"
        raise_observed(tx, TypeError, f"unsupported operand type(s) for |: {names}")
    if fn is operator.ior and isinstance(a, NewObjectVariable) and a.dict_items is not None:
        if getattr(a.cls, "__ior__", None) is dict.__ior__:  # `sd |= d`: its items, in place
            return a.var_getattr(tx, "__ior__").call_function(tx, [b], {})
    if fn in _DICT_OBJECT_OPS:
        a, b = _dict_objects_as_dicts(a, b, _DICT_OBJECT_OPS[fn])
    if fn in _SET_CMP and isinstance(a, ConstDictVariable) and isinstance(b, ConstDictVariable):
        same = _dicts_equal(tx, a, b)  # Note [Dicts: equality]
        return ConstantVariable(same if fn is operator.eq else not same)
    if fn in _SET_CMP and _set_vs_other(a, b):
        return ConstantVariable(fn is operator.ne)  # NotImplemented both ways: identity, distinct
    if isinstance(a, SetVariable) and fn in _SET_OPS and (_not_a_set(b) or _plain_non_set(b)):
        if fn in _SET_CMP:
            return ConstantVariable(fn is operator.ne)  # `{1} == 1`: NotImplemented both ways
        names = f"'{a.python_type().__name__}' and '{b.python_type().__name__}'"
        symbol = _SET_SYMBOLS[fn]
        if fn in (operator.le, operator.lt, operator.ge, operator.gt):
            raise_observed(tx, TypeError, f"'{symbol}' not supported between instances of {names}")
        raise_observed(tx, TypeError, f"unsupported operand type(s) for {symbol}: {names}")
    if isinstance(a, SetVariable) and fn in _SET_OPS and not _is_set(b):
        result = user_binary_op(tx, fn, a, b)  # set's own slots decline: the other side's
        if result is not None:
            return result
        unimplemented(f"{getattr(fn, '__name__', fn)} of {a} and {b}")
    if isinstance(a, SetVariable) and fn in _SET_OPS:
        result = a.call_method(tx, _SET_OPS[fn], [b], {})
        return a if _SET_OPS[fn].endswith("update") else result
    if (
        fn is operator.or_
        and isinstance(a, ConstDictVariable)
        and isinstance(b, ConstDictVariable)
        and issubclass(b.user_cls, a.user_cls)
        and b.user_cls is not a.user_cls
        and getattr(b.user_cls, "__ror__", None) is not getattr(a.user_cls, "__ror__", None)
    ):
        return b.call_method(tx, "__ror__", [a], {})  # a subclass's reflected method first
    if isinstance(a, ConstDictVariable) and fn in (operator.or_, operator.ior):
        result = a.call_method(tx, "__ior__" if fn is operator.ior else "__or__", [b], {})
        if result.is_python_constant() and result.as_python_constant() is NotImplemented:
            if isinstance(b, (ConstantVariable, BaseListVariable, SetVariable)):
                # a builtin literal, list, tuple or set declines a dict too: TypeError
                names = f"'{a.python_type().__name__}' and '{b.python_type().__name__}'"
                raise_observed(tx, TypeError, f"unsupported operand type(s) for |: {names}")
            unimplemented(f"{getattr(fn, '__name__', fn)} of {a} and {b}")
        return result
    if fn in (operator.add, operator.iadd):  # `() + t + ()`: a constant tuple/list joins items
        a, b = _constant_sequence(a, b), _constant_sequence(b, a)
    if fn in _SEQUENCE_OPS and (isinstance(a, BaseListVariable) or isinstance(b, BaseListVariable)):
        result = sequence_ops.sequence_op(tx, fn, a, b)  # Note [Sequences: + and *]
        if result is not None:
            return result
    if _frozen_pair(a, b):
        return a.binary_op(fn, b)
    if _frozen_and_literal(a, b):  # (`torch.__version__ >= "2.1"`: the object's own operator)
        try:
            result = fn(a.as_python_constant(), b.as_python_constant())
        except Exception as e:
            unimplemented(f"{getattr(fn, '__name__', fn)} of {a} and {b} raised {e!r}")
        return wrap_frozen(result, f"{getattr(fn, '__name__', fn)} of {a} and {b}")
    if _all_const([a, b]):
        ca, cb = a.as_python_constant(), b.as_python_constant()
        if _foldable(ca) and _foldable(cb):
            return fold(fn, ca, cb)
        if fn in (operator.mod, operator.imod) and type(ca) is str and _is_exception(b):
            return fold(fn, ca, cb)  # "error: %s" % e (a modelled exception's str/repr)
    if fn in (operator.or_, operator.ior):
        union = class_queries.union_of_classes(a, b)  # Note [Classes: unions of classes]
        if union is not None:
            return class_queries.UnionVariable(union)
    result = user_binary_op(tx, fn, a, b)  # Note [Objects: operator protocol]
    if result is not None:
        return result
    unimplemented(f"{getattr(fn, '__name__', fn)} of {a} and {b}")


# Note [Dicts: equality]
# `a == b` of two dicts is dict's own comparison: equal lengths, then for each key of `a` in its
# order, the key is in `b` and the two values are equal (the same object, else `==` traced, so a
# user __eq__ is inlined and a tensor's truth breaks as it would anywhere). Two OrderedDicts also
# need their keys in the same order. `!=` is its negation. A dict subclass with its own __eq__
# breaks.
_DICT_EQS = {dict.__eq__, collections.OrderedDict.__eq__}


def _dicts_equal(tx, a, b, ordered=None):
    """Whether two traced dicts compare equal (Note [Dicts: equality]); `ordered=False` is
    dict.__eq__'s comparison, which ignores an OrderedDict's order."""
    for d in (a, b):
        if getattr(d.user_cls, "__eq__", None) not in _DICT_EQS:
            unimplemented(f"== of a {d.user_cls.__name__} (its own __eq__)")
    if len(a.items) != len(b.items):
        return False
    if ordered is None:
        ordered = all(issubclass(d.user_cls, collections.OrderedDict) for d in (a, b))
    if ordered:
        a.check_order("compared")
        b.check_order("compared")
    if ordered and list(a.items) != list(b.items):
        return False
    for key, value in a.items.items():
        if key not in b.items:
            return False
        if _identical(value, b.items[key]):
            continue  # (PyObject_RichCompareBool: the same object is equal)
        if not compare_vars(tx, operator.eq, value, b.items[key]).truthy(tx):
            return False
    return True


dicts.EQUALITY["dicts"] = _dicts_equal

# operator -> the dict dunders it runs (forward, reflected)
_DICT_OBJECT_OPS = {
    operator.eq: ("__eq__",),
    operator.ne: ("__ne__",),
    operator.or_: ("__or__", "__ror__"),
}


def _dict_objects_as_dicts(a, b, dunders):
    """`a <op> b` of dicts where a side is an instance of a dict subclass made while tracing
    whose class keeps dict's `dunders`: dict's C operator reads its items only, so it stands as a
    plain dict of them (`SimpleDict(x=1) == {"x": 1}`, `sd | d` a plain dict). Else unchanged."""

    def items_of(var):
        if isinstance(var, ConstDictVariable):
            return var
        if isinstance(var, dicts.MappingProxyVariable):
            return var.dict_var  # its operators are its dict's (Note [Dicts: mappingproxy])
        if isinstance(var, NewObjectVariable) and var.dict_items is not None:
            cls = var.python_type()
            if all(getattr(cls, d, None) is getattr(dict, d) for d in dunders):
                return ConstDictVariable(var.dict_items)
        return None

    a2, b2 = items_of(a), items_of(b)
    if a2 is None or b2 is None or (a2 is a and b2 is b):
        return a, b
    return a2, b2


def _dict_object_vs_builtin(a, b):
    """`sd | 1`: a dict-subclass instance made while tracing that keeps dict's `|`, and a
    builtin literal, list, tuple or set, which declines a dict too (TypeError)."""
    if not (isinstance(a, NewObjectVariable) and a.dict_items is not None):
        return False
    if any(getattr(a.cls, d, None) is not getattr(dict, d) for d in ("__or__", "__ior__")):
        return False
    return isinstance(b, (ConstantVariable, BaseListVariable, SetVariable))


def _constant_sequence(value, other):
    """A constant tuple (list) as a TupleVariable (ListVariable) when added to traced items of
    the same type; else `value` unchanged."""
    if not isinstance(value, ConstantVariable) or not isinstance(other, BaseListVariable):
        return value
    if type(value.value) is tuple and isinstance(other, TupleVariable):
        return TupleVariable([ConstantVariable(v) for v in value.value])
    if type(value.value) is list and type(other) is ListVariable:
        return ListVariable([ConstantVariable(v) for v in value.value])
    return value


def _is_exception(var):
    return isinstance(var, ExceptionVariable)


def _frozen_pair(a, b):
    """Two frozen objects of one type (DispatchKeySets): their operators fold."""
    return (
        isinstance(a, ConstantObjectVariable)
        and isinstance(b, ConstantObjectVariable)
        and type(a.value) is type(b.value)
        and is_frozen(a.value)
    )


def _frozen_and_literal(a, b):
    """A frozen object and a literal constant (a str, a tuple of ints): Python's operator on
    the two values folds."""
    for x, y in ((a, b), (b, a)):
        if isinstance(x, ConstantObjectVariable) and is_frozen(x.value):
            return isinstance(y, ConstantVariable) and is_literal(y.value)
    return False


def _foldable(value):
    if isinstance(value, (torch.finfo, torch.iinfo)):
        return True  # immutable records of constants (`torch.finfo(a) == torch.finfo(b)`)
    return is_literal(value) or (
        isinstance(value, (torch.Size, tuple, list)) and all(_foldable(v) for v in value)
    )


def compare_vars(tx, fn, a, b):
    """a <cmp> b, including `is` / `is not`."""
    if fn in _IS_OPS:
        same = _identical(a, b)
        if same is None:
            unimplemented(f"`is` between {a} and {b}")
        if a.source is not None and b.source is not None and a.source != b.source:
            # identity between two inputs is what it was: same objects, or distinct ones
            kind = GuardKind.ALIASING if same else GuardKind.DISTINCT
            tx.output.guards.add(kind, a.source, b.source)
        return ConstantVariable(same if fn is operator.is_ else not same)
    if modes_traced(tx) and _under_modes(tx, a, b):  # (modes first, as torch does)
        return function_modes.operator_call(tx, fn, a, b)  # Note [Frames: tracing a user's ...]
    if torch_function_involved([a, b]):  # Note [Tensors: subclasses with __torch_function__]
        return torch_function_operator(tx, fn, a, b)
    if isinstance(a, ObjectIdVariable) and isinstance(b, ObjectIdVariable) and fn in _SET_CMP:
        same = a.same_as(tx, b)  # Note [Builtins: id() of objects made in the frame]
        return ConstantVariable(same == (fn is operator.eq))
    if isinstance(a, DictViewVariable) or isinstance(b, DictViewVariable):
        result = dict_views.compare(tx, fn, a, b)  # Note [Dicts: views]
        if result is not None:
            return result
    if sym.has_symbolic(a) or sym.has_symbolic(b):
        result = sym.compare(tx, fn, a, b)  # a fact on the sizes: a shape guard
        if result is not None:
            return result
    if fn in (operator.eq, operator.ne) and _plain_classes(a, b):
        same = a.as_python_constant() is b.as_python_constant()  # type.__eq__: identity
        return ConstantVariable(same == (fn is operator.eq))
    if fn in (operator.eq, operator.ne) and _class_and_literal(a, b):
        # type.__eq__ and the literal's own __eq__ both give NotImplemented: identity, distinct
        return ConstantVariable(fn is operator.ne)
    if fn in (operator.eq, operator.ne) and not isinstance(a, TensorVariable):
        if not isinstance(b, TensorVariable) and not (_all_const([a, b])):
            same = _identical(a, b)
            if same is True and _eq_by_identity(_exact_type(a)):
                return ConstantVariable(fn is operator.eq)
    if fn in (operator.eq, operator.ne) and _plain_modules(a, b):
        same = a.value is b.value  # (object.__eq__: identity, guarded as `is` is)
        if a.source is not None and b.source is not None and a.source != b.source:
            kind = GuardKind.ALIASING if same else GuardKind.DISTINCT
            tx.output.guards.add(kind, a.source, b.source)
        return ConstantVariable(same == (fn is operator.eq))
    if fn in (operator.eq, operator.ne) and _builtin_callables(a, b):
        # (`func == torch.add` in a torch function mode's handler: these compare as objects)
        return ConstantVariable((a.value == b.value) == (fn is operator.eq))
    return binary_op(tx, fn, a, b)


_CALLABLE_TYPES = (
    types.BuiltinFunctionType,
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
    types.MethodWrapperType,
    types.FunctionType,
)


def _builtin_callables(a, b):
    """Two functions or method objects (not constants) whose == compares what they call."""
    return all(
        not isinstance(v, ConstantVariable) and type(getattr(v, "value", None)) in _CALLABLE_TYPES
        for v in (a, b)
    )


def _plain_modules(a, b):
    """Two nn.Module variables whose classes compare them by identity."""
    values = [getattr(v, "value", None) for v in (a, b)]
    return all(isinstance(v, torch.nn.Module) and type(v).__eq__ is object.__eq__ for v in values)


def _plain_classes(a, b):
    """Two classes whose metaclass compares them as `type` does (by identity)."""
    for v in (a, b):
        # (asked of class variables only: is_python_constant() specialises a symbolic value)
        if isinstance(v, ConstantVariable) or not isinstance(
            getattr(v, "value", getattr(v, "fn", None)), type
        ):
            return False
        if not v.is_python_constant():
            return False
        c = v.as_python_constant()
        if not isinstance(c, type) or type(c).__eq__ is not type.__eq__:
            return False
    return True


def _class_and_literal(a, b):
    """A plain class (compared as `type` compares) and a literal that is no class (None, a
    number, a string): `==` between them is False."""
    for x, y in ((a, b), (b, a)):
        if isinstance(y, ConstantVariable) and is_literal(y.value) and _plain_classes(x, x):
            return True
    return False


# Note [Operators: tensor identity]
# Two traced tensors are the same object when they are the same variable: inputs are one variable
# per object, an in-place op returns its operand's variable. An op that returns its operand
# unchanged in eager (`x.float()` of a float tensor, `.to()` of its own dtype, `.contiguous()` of
# a contiguous one) is a graph node whose output may or may not be that object (autocast, the
# backend): its variable remembers the operand (`may_be`), and `is` between the two is not
# answered (a break: Python decides).
def tensor_origin(var):
    """The variable a traced tensor may be the very object of (itself when none)."""
    while getattr(var, "may_be", None) is not None:
        var = var.may_be
    return var


# constants of which each value is one object: `is` between two of them is `==`
_SINGLETONS = (bool, type(None), type(Ellipsis), enum.Enum, torch.dtype, torch.layout)
_SINGLETONS += (torch.memory_format,)


def _identical(a, b):
    """Whether two traced values are the same object (None when it cannot be known)."""
    if a is b:
        return True
    for x, y in ((a, b), (b, a)):
        if isinstance(x, ConstantVariable) and x.value is None:
            if isinstance(y, ConstantVariable):
                return y.value is None
            return False
    for x, y in ((a, b), (b, a)):
        if isinstance(x, _RUN_TIME_NUMBERS):
            other = _exact_type(y)
            if other is not None and not issubclass(other, (int, float, complex)):
                return False  # a number is not a list, a tensor, ... (`x.size(0) is xs`)
            return None  # a number known only at run time has an identity known only then
    va, vb = getattr(a, "value", _MISSING), getattr(b, "value", _MISSING)
    if va is not _MISSING and vb is not _MISSING:
        if isinstance(a, ConstantVariable) and isinstance(b, ConstantVariable):
            if type(va) is not type(vb):
                return False
            if isinstance(va, _SINGLETONS) or va is vb:
                return va is vb  # (enum members are singletons: OptState.READY is ...)
            if type(va) in (int, str, bytes, float, complex) and va == va and vb == vb != va:
                return False  # two values: two objects (equal ones may or may not be one; NaN)
            return None
        return va is vb
    if isinstance(a, TensorVariable) and isinstance(b, TensorVariable):
        return None if tensor_origin(a) is tensor_origin(b) else False
    if isinstance(a, NewObjectVariable) and isinstance(b, NewObjectVariable):
        return False  # two objects made while tracing (one variable per object)
    if isinstance(a, TupleVariable) and isinstance(b, TupleVariable):
        # (two variables may be one tuple: equal constants are one object in a code object, and
        # CPython hands some tuples back from `t[:]` or `t + ()`: Python decides)
        return None
    if (
        not isinstance(a, ConstantVariable)
        and not isinstance(b, ConstantVariable)
        and a.is_python_constant()
        and b.is_python_constant()
    ):
        return a.as_python_constant() is b.as_python_constant()  # functions, classes, builtins
    if type(a) is not type(b) and (isinstance(a, TensorVariable) or isinstance(b, TensorVariable)):
        return False
    if _exact_type(a) is not _exact_type(b) and _exact_type(a) and _exact_type(b):
        return False  # objects of two types are two objects
    return None


def _eq_by_identity(t):
    """Whether `x == x` is True for every x of type t without running user code: object's own
    __eq__/__ne__, or a builtin container (its items compare with the identity shortcut). A
    class with its own __eq__ is asked (it may answer False, raise, or record the call)."""
    if t in (list, tuple, dict, set, frozenset):
        return True
    return t is not None and t.__eq__ is object.__eq__ and t.__ne__ is object.__ne__


def _exact_type(var):
    try:
        return var.python_type()
    except Exception:
        return None


_MISSING = object()
_RUN_TIME_NUMBERS = (SymNodeVariable, SymFloatVariable, SizeFloatVariable)


def _frozen_membership(container, item):
    """A constant looked up in a frozenset reached from a source (immutable: its identity is
    guarded, so the answer is a constant)."""
    if not isinstance(container, UserDefinedObjectVariable) or container.source is None:
        return False
    if type(container.value) is not frozenset or not item.is_python_constant():
        return False
    try:
        hash(item.as_python_constant())
    except TypeError:
        return False
    return True


def _in_turn(tx, it):
    while (item := it.next_item(tx)) is not None:
        yield item


def contains(tx, container, item):
    """`item in container`."""
    if isinstance(container, (ConstDictVariable, IdentityKeyedDictVariable)):
        return container.call_method(tx, "__contains__", [item], {})
    if isinstance(container, TensorVariable):
        unimplemented("`in` on a tensor reads tensor data")
    if isinstance(container, ConstantVariable) and item.is_python_constant():
        # the container's own __contains__: substring for str/bytes, membership otherwise
        value = item.as_python_constant()
        if _foldable(value):
            return fold(operator.contains, container.value, value)
    if _frozen_membership(container, item):  # `type(v) in _ATOMIC_TYPES` (3.13's dataclasses)
        tx.output.guards.add(GuardKind.ID_MATCH, container.source, container.value)
        return ConstantVariable(item.as_python_constant() in container.value)
    if isinstance(container, (UserDefinedObjectVariable, NewObjectVariable, SysModulesVariable)):
        return container.call_method(tx, "__contains__", [item], {})
    if isinstance(container, SetVariable) and (
        item.is_python_constant()
        or isinstance(item, TensorVariable)
        or isinstance(getattr(item, "value", None), torch.nn.Module)  # Note [Sets: modules ...]
    ):
        return container.call_method(tx, "__contains__", [item], {})  # (hash, then ==)
    if getattr(container, "steps_lazily", False) and not isinstance(item, SymNodeVariable):
        items = _in_turn(tx, container)  # a generator: stepped only until the item is found
    else:
        items = container.unpack_var_sequence(tx)
    if isinstance(item, SymNodeVariable):
        result = sym.contains(tx, items, item)
        if result is not None:
            return result
    for i in items:
        same = _identical(i, item)
        if same:
            return ConstantVariable(True)
        if not (i.is_python_constant() and item.is_python_constant()):
            unimplemented(f"`in` comparing {i} and {item}")
        if i.as_python_constant() == item.as_python_constant():
            return ConstantVariable(True)
    return ConstantVariable(False)


def _under_modes(tx, a, b):
    """A tensor operand while the user's torch function modes are active."""
    tensors = isinstance(a, TensorVariable) or isinstance(b, TensorVariable)
    return tensors and bool(function_modes.active(tx))


def unary_op(tx, fn, obj):
    """-x, +x, ~x, abs(x)."""
    if numpy_vars.involved(obj):
        return numpy_vars.operator_call(tx, fn, [obj])
    if modes_traced(tx) and _under_modes(tx, obj, None):
        return function_modes.operator_call(tx, fn, obj)  # Note [Frames: tracing a user's ...]
    if torch_function_involved([obj]):  # Note [Tensors: subclasses with __torch_function__]
        return torch_function_operator(tx, fn, obj)
    if isinstance(obj, TensorVariable):
        return call_tensor_op(tx, "call_function", fn, [obj], {})
    if isinstance(obj, SymNodeVariable):
        return sym.unary(tx, fn, obj)
    result = unspec_float.unary(tx, fn, obj)  # Note [Shapes: unspecialised floats]
    if result is not None:
        return result
    if obj.is_python_constant():
        return fold(fn, obj.as_python_constant())
    unimplemented(f"{fn.__name__} of {obj}")


_INPLACE = {
    BINARY_OPS[k + "="]: BINARY_OPS[k]
    for k in ("+", "-", "*", "/", "//", "%", "**", "@", "<<", ">>", "&", "|", "^")
}
_SET_OPS = {
    operator.or_: "__or__",
    operator.and_: "__and__",
    operator.sub: "__sub__",
    operator.xor: "__xor__",
    operator.ior: "update",
    operator.iand: "intersection_update",
    operator.isub: "difference_update",
    operator.ixor: "symmetric_difference_update",
    operator.eq: "__eq__",
    operator.ne: "__ne__",
    operator.le: "__le__",
    operator.lt: "__lt__",
    operator.ge: "__ge__",
    operator.gt: "__gt__",
}
_SET_CMP = {operator.eq, operator.ne}
_SET_SYMBOLS = {
    operator.or_: "|",
    operator.and_: "&",
    operator.sub: "-",
    operator.xor: "^",
    operator.ior: "|=",
    operator.iand: "&=",
    operator.isub: "-=",
    operator.ixor: "^=",
    operator.le: "<=",
    operator.lt: "<",
    operator.ge: ">=",
    operator.gt: ">",
}


def _set_vs_other(a, b):
    """A set compared with a list, tuple, dict or non-set literal (never equal)."""
    for x, y in ((a, b), (b, a)):
        if isinstance(x, SetVariable) and (
            _not_a_set(y) or isinstance(y, (BaseListVariable, ConstDictVariable))
        ):
            return True
    return False


def _is_set(var):
    """A set or frozenset (set operators take only these)."""
    if isinstance(var, SetVariable):
        return True
    return isinstance(var, ConstantVariable) and isinstance(var.value, (set, frozenset))


def _plain_non_set(var):
    """A list, tuple or dict of Python's own classes: set operators reject it (TypeError)."""
    return isinstance(var, (BaseListVariable, ConstDictVariable)) and var.python_type() in (
        list,
        tuple,
        dict,
        collections.OrderedDict,
        collections.defaultdict,
    )


def _not_a_set(var):
    """A literal that is no set (an int, a str, None ...): set operators reject it."""
    if not isinstance(var, ConstantVariable):
        return False
    return not isinstance(var.value, (set, frozenset))
