"""`object.__new__(cls)` while tracing: a new instance of a plain user class.

Note [Objects: a class's own __new__]
`C(*args)` of a class whose Python `__new__` (its own or a base's) is the only thing kiln would
not model runs type.__call__'s steps: C.__new__ is inlined with (C, *args); when it returns an
instance of C made in the trace (by `object.__new__(cls)` or `super().__new__(cls)`, this
module), C.__init__ runs on it; when it returns anything else (an object of another class, an
existing object), that is the result and __init__ does not run, as in Python (which checks the
real type, never a metaclass __instancecheck__: such metaclasses are not plain and stay a
break). `object.__new__` with more arguments than the class raises in Python and is a break
here. Objects made this way are rebuilt without calling the Python __new__ again
(`make_object`).
"""

from kiln.exc import unimplemented
from kiln.frontend.variables.base import VariableTracker
from kiln.frontend.variables.dicts import NEW_OBJECT

__all__ = ["ObjectNewVariable"]


class ObjectNewVariable(VariableTracker):
    """`object.__new__` (read from object, or `super().__new__` reaching it)."""

    def call_function(self, tx, args, kwargs):
        if len(args) != 1 or kwargs or not args[0].is_python_constant():
            unimplemented("object.__new__ with arguments besides the class")
        cls = args[0].as_python_constant()
        if not isinstance(cls, type):
            unimplemented(f"object.__new__({cls!r})")
        made = NEW_OBJECT["make"](cls)
        if made is None:
            unimplemented(f"object.__new__ of {cls.__qualname__}")
        return made

    def reconstruct(self, cg):
        cg.load_object(object.__new__)

    def __repr__(self):
        return "ObjectNewVariable()"
