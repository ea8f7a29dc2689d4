"""Python constants: numbers, strings, None, dtypes, devices, slices, Ellipsis, types of them."""

import operator
import sys
import weakref

import torch

from kiln import config
from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.variables.base import PythonValueVariable, wrap_constant_like

# Classes made for real while tracing that the transformed code cannot make again (Note [Enums:
# classes made by the functional API]): neither they nor their instances may leave the frame.
MADE_WHILE_TRACING = weakref.WeakSet()
# Classes made for real while tracing by a pure factory the transformed code calls again (Note
# [Namedtuples: classes made in the frame]): class -> a callable of no arguments that makes it.
REMADE_CLASSES = weakref.WeakKeyDictionary()

CONSTANT_TYPES = (
    int,
    float,
    bool,
    complex,
    str,
    bytes,
    type(None),
    type(Ellipsis),
    type(NotImplemented),
    slice,
    range,
    torch.dtype,
    torch.device,
    torch.layout,
    torch.memory_format,
)


def is_literal(value):
    """Whether a value is an immutable constant kiln may fold (tuples/frozensets of them too)."""
    if isinstance(value, (tuple, frozenset)) and type(value) in (tuple, frozenset):
        return all(is_literal(v) for v in value)
    if type(value) is slice:  # (a slice may hold anything: a 0-d tensor bound is no constant)
        return all(is_literal(v) for v in (value.start, value.stop, value.step))
    return type(value) in CONSTANT_TYPES


# Methods of immutable constants that are pure (folded at trace time).
_PURE_TYPES = (int, float, bool, complex, str, bytes, tuple, frozenset, torch.dtype, torch.device)


# Note [Constants: string identity]
# A string made while tracing (`a[:3] + b[3:]`, `str(b"__add__", "ascii")`) is a new object, as in
# eager; written as a code constant it would lose that: code objects intern their name-like string
# constants and the assembler merges equal ones, so `c is a` would hold. A string equal to an
# interned one but not that object is loaded as the object itself (`sys.intern(s) is s` asks
# without changing the answer: if s is not interned it becomes the interned copy, which is what
# the code constant would have made of it anyway). Non-empty tuples and frozensets are always
# loaded as the objects themselves: the assembler would merge a frozenset made while tracing with
# an equal global's (`fs.union() is FS`), and an input's own tuple must come back as itself.


class ConstantVariable(PythonValueVariable):
    """A Python constant known while tracing (guarded by its source if it came from one)."""

    def var_getattr(self, tx, name):
        if name == "__class__":
            return wrap_constant_like(tx, type(self.value))
        try:
            attr = getattr(self.value, name)
        except AttributeError:
            unimplemented(f"constant {self.value!r} has no attribute {name!r}")
        if callable(attr) and type(self.value) in _PURE_TYPES:
            from kiln.frontend.variables.misc import ConstantMethodVariable

            return ConstantMethodVariable(self.value, name, receiver=self)
        if is_literal(attr):
            return ConstantVariable(attr)
        unimplemented(f"attribute {name!r} of constant {self.value!r}")

    def unpack_var_sequence(self, tx):
        if isinstance(self.value, (str, range, tuple, bytes, frozenset)):
            if isinstance(self.value, range) and not short_range(self.value):
                unimplemented(f"iteration over {self.value!r} (too long to unroll)")
            return [ConstantVariable(v) for v in self.value]
        unimplemented(f"iteration over {self.value!r}")

    def reconstruct(self, cg):
        if type(self.value) in MADE_WHILE_TRACING:
            unimplemented(f"{self.value!r} of a class made while tracing leaves the frame")
        if type(self.value) in REMADE_CLASSES:  # a namedtuple: made with the class made again
            remake_instance(cg, type(self.value), lambda: cg.load_object(tuple(self.value)))
            return
        if type(self.value) is str and sys.intern(self.value) is not self.value:
            cg.load_object(self.value)  # Note [Constants: string identity]
        elif type(self.value) in (frozenset, tuple) and self.value:
            cg.load_object(self.value)  # (the object itself: code constants equal are merged)
        elif is_literal(self.value) and not isinstance(self.value, (torch.dtype, torch.device)):
            cg.extend(emit.load_const(self.value))
        else:
            cg.load_object(self.value)

    def __repr__(self):
        return f"ConstantVariable({self.value!r})"


def load_remade(cg, cls):
    """Push a class of REMADE_CLASSES as the transformed code makes it (once per code)."""
    temp = cg.class_temps.get(id(cls))
    if temp is None:
        cg.load_object(REMADE_CLASSES[cls], push_null=True)
        cg.extend(emit.call(0))
        temp = cg.class_temps[id(cls)] = cg.new_temp()
        cg.extend(emit.store_fast(temp))
    cg.extend(emit.load_fast(temp))


def remake_instance(cg, cls, load_items):
    """Push an instance of a namedtuple class of REMADE_CLASSES: `cls._make(items)` of the class
    the transformed code makes again; `load_items` pushes the tuple of its items."""
    cg.load_object(_make_instance, push_null=True)
    load_remade(cg, cls)
    load_items()
    cg.extend(emit.call(2))


def _make_instance(cls, items):
    return cls._make(items)


def fold(fn, *values):
    """Apply a pure function to constants (e.g. operator.add) and wrap the result."""
    try:
        return ConstantVariable(fn(*values))
    except Exception as e:
        from kiln.frontend.variables.exceptions import observe

        observe(e)  # a builtin exception of constants: raised in the traced code, as in eager
        unimplemented(
            f"constant folding {getattr(fn, '__name__', fn)} raised {type(e).__name__}: {e}"
        )


BINARY_OPS = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "//": operator.floordiv,
    "%": operator.mod,
    "**": operator.pow,
    "@": operator.matmul,
    "<<": operator.lshift,
    ">>": operator.rshift,
    "&": operator.and_,
    "|": operator.or_,
    "^": operator.xor,
    "+=": operator.iadd,
    "-=": operator.isub,
    "*=": operator.imul,
    "/=": operator.itruediv,
    "//=": operator.ifloordiv,
    "%=": operator.imod,
    "**=": operator.ipow,
    "@=": operator.imatmul,
    "<<=": operator.ilshift,
    ">>=": operator.irshift,
    "&=": operator.iand,
    "|=": operator.ior,
    "^=": operator.ixor,
}

COMPARE_OPS = {
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    ">=": operator.ge,
}


def short_range(r):
    """Whether a range has at most config.range_items_limit items (they are kept one by one)."""
    try:
        return len(r) <= config.range_items_limit
    except OverflowError:  # (more than sys.maxsize items)
        return False
