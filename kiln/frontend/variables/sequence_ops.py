"""`+`, `+=`, `*` and `*=` of traced lists, tuples and deques (Note [Sequences: + and *])."""

import collections
import operator

import torch

from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.exceptions import raise_observed
from kiln.frontend.variables.lists import (
    BaseListVariable,
    DequeVariable,
    ListVariable,
    RangeVariable,
    SizeVariable,
    TupleVariable,
)

# Note [Sequences: + and *]
# The rules are the builtins' own (Objects/listobject.c, tupleobject.c, _collectionsmodule.c):
# - `a + b` takes a `b` of a's kind (a list subclass for a list, a tuple subclass for a tuple, a
#   deque for a deque); another builtin sequence is a TypeError ("can only concatenate ..."). A
#   deque's result is a copy of `a` (its maxlen too) extended by `b`: a full one keeps the last
#   maxlen items.
# - `a += b` of a list or deque is `a.extend(b)` (any iterable) on the same object; a tuple's is
#   `a = a + b`.
# - `a * n` / `n * a` repeat the items n times (none for n <= 0); a deque keeps its maxlen and the
#   last maxlen items. `a *= n` of a list or deque changes the object in place.
# - an exact tuple is its own result where CPython returns it: `t * 1`, `t * n` of an empty t,
#   `t + ()`, `() + t` (and `t[:]`, TupleVariable.getitem): `is` and id() see the same object.
# A range, or anything else, is left to the caller (which breaks where it does not know).

_KINDS = (collections.deque, list, tuple)


def _kind(var):
    """The builtin sequence type whose rules `var` follows (deque, list or tuple), or None."""
    t = var.python_type()
    return next((k for k in _KINDS if issubclass(t, k)), None)


def _repeat(seq, n):
    """seq's items n times, as a new sequence of seq's kind."""
    items = seq.items * n
    if isinstance(seq, DequeVariable):
        return DequeVariable(items, seq.maxlen)  # (the constructor keeps the last maxlen)
    if isinstance(seq, SizeVariable):
        return SizeVariable(items)
    return ListVariable(items) if _kind(seq) is list else TupleVariable(items)


def _repeat_counts(d, n):
    """Whether `d *= n` counts as a change of deque `d` (it clears it, or appends to it)."""
    size = len(d.items)
    if n <= 0 or size == 1:
        return size > 0 and (n <= 0 or n > 1)
    if size == 0 or n == 1:
        return False
    if d.maxlen is not None and n * size > d.maxlen:
        n = (d.maxlen + size - 1) // size  # (CPython repeats no more than maxlen needs)
    return n > 1


def _count(var):
    """A repeat count: a constant int (a bool too), else None."""
    if isinstance(var, ConstantVariable) and isinstance(var.value, int):
        return var.value
    return None


def _own_op(var, dunder):
    """Whether var's class has its own `dunder` (not its builtin kind's; torch.Size's is known)."""
    t = var.python_type()
    return t is not torch.Size and getattr(t, dunder, None) is not getattr(_kind(var), dunder, None)


def sequence_op(tx, fn, a, b):
    """`a <fn> b` for fn in + += * *= where a side is a traced list, tuple or deque; None when the
    rules above do not decide it (the caller breaks)."""
    if fn in (operator.mul, operator.imul):
        if isinstance(b, BaseListVariable) and fn is operator.mul:
            a, b = b, a  # `n * seq`
        if not isinstance(a, BaseListVariable) or isinstance(a, RangeVariable) or _kind(a) is None:
            return None
        n = _count(b)
        if n is None or _own_op(a, "__mul__"):
            return None
        if fn is operator.imul and _kind(a) is not tuple:
            if isinstance(a, DequeVariable):
                a.state += _repeat_counts(a, n)  # Note [Deques: iterators]
            a._mutate(tx, a.items if n <= 0 else (), "__imul__")
            a.items[:] = _repeat(a, n).items
            return a
        if a.python_type() is tuple and (n == 1 or not a.items):
            return a  # (tuple_repeat gives an exact tuple back)
        return _repeat(a, n)
    if not isinstance(a, BaseListVariable) or isinstance(a, RangeVariable) or _kind(a) is None:
        return None
    kind = _kind(a)
    if fn is operator.iadd and kind is not tuple:
        if _own_op(a, "__iadd__"):
            return None
        a.call_method(tx, "extend", [b], {})
        return a
    if not isinstance(b, BaseListVariable) or isinstance(b, RangeVariable) or _own_op(a, "__add__"):
        return None
    if SizeVariable in (type(a), type(b)):
        if _kind(b) is tuple and kind is tuple and not _own_op(b, "__radd__"):
            return SizeVariable(a.items + b.items)  # torch.Size's + (either side) is a Size
        return None
    if _kind(b) is not kind:
        if getattr(b.python_type(), "__radd__", None) is not None:
            return None  # a sequence subclass with its own reflected +: not modelled here
        name, other = kind.__name__, b.python_type().__name__
        raise_observed(tx, TypeError, f'can only concatenate {name} (not "{other}") to {name}')
    if isinstance(a, DequeVariable):
        return DequeVariable(a.items + b.items, a.maxlen)
    if kind is tuple:
        if not a.items and b.python_type() is tuple:
            return b  # (tupleconcat gives an exact tuple back when the other is empty)
        if not b.items and a.python_type() is tuple:
            return a
    return ListVariable(a.items + b.items) if kind is list else TupleVariable(a.items + b.items)
