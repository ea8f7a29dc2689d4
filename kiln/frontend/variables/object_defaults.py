"""What `object` gives a user object kiln traces: its default str()/repr(), and type(obj) read
through the object's source (so `type(obj).__dict__` is guarded like `Cls.__dict__`).

Note [Objects: the default str() and repr()]
`str(obj)` / `repr(obj)` of an object whose class defines neither in Python is
`object.__repr__(obj)`: "<module.Qualname object at 0x...>", the object's address included. An
object made in the frame has no address while tracing, and an input object's address differs
from call to call under the same guards, so the text is no constant of the trace. It is a value
the transformed code computes: `object.__repr__(obj)` with obj rebuilt (an object made in the
frame is rebuilt once, so the text names the object the frame returns). The text only depends on
the object's class and identity, which nothing in the traced code changes, so computing it after
the graph gives eager's text. Using the text inside the trace (slicing, formatting, comparing it)
is a graph break.

Note [Objects: type(obj) through its source]
`type(obj)` of an input object is its class, guarded already by the object's type guard; as a
constant it has no source, so reads of the class's own state (`type(obj).__dict__`, whose keys
and values may change after compiling) could not be guarded and broke. With the source
`obj.__class__` (when no class in the MRO defines a `__class__`) or, for an object made in the
frame, where `Cls(...)` read its class, those reads are guarded as reads of `Cls` are.
"""

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.source import AttrSource
from kiln.frontend.variables.base import VariableTracker
from kiln.frontend.variables.user_defined import (
    NewObjectVariable,
    UserDefinedObjectVariable,
    plain_class_attr,
)


class DefaultTextVariable(VariableTracker):
    """`object.__repr__(obj)` computed by the transformed code (Note [Objects: the default str()
    and repr()])."""

    def __init__(self, obj, **kw):
        super().__init__(**kw)
        self.obj = obj

    def python_type(self):
        return str

    def var_getattr(self, tx, name):
        unimplemented(f"str.{name} of the default text of a {self.obj.python_type().__name__}")

    def reconstruct(self, cg):
        cg.load_object(object.__repr__, push_null=True)
        cg.reconstruct(self.obj)
        cg.extend(emit.call(1))

    def __repr__(self):
        return f"DefaultTextVariable({self.obj!r})"


def class_source(obj):
    """A source for `type(obj)` (Note [Objects: type(obj) through its source]), or None."""
    if isinstance(obj, NewObjectVariable):
        return obj.class_source if obj.source is None else None
    if isinstance(obj, UserDefinedObjectVariable) and obj.source is not None:
        cls = type(obj.value)
        if type(cls) is type and plain_class_attr(cls):
            return AttrSource(obj.source, "__class__")
    return None
