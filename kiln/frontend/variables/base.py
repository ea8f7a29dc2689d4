"""VariableTracker: the symbolic value on the interpreter's stack, with the Source it came from."""

import itertools
import types

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.source import AttrSource

_serial = itertools.count()

# Note [Variables: the builder is registered]
# Every family turns Python values into trackers with builder.py's `wrap_value` and
# `wrap_constant_like`, and builder.py dispatches to every family, so it sits above them all. The
# families call the two through the forwarders below, bound by builder.py when it is imported (the
# translator imports it before any tracing), instead of importing builder.py inside functions.
_builder = {}


def register_builder(wrap_value, wrap_constant_like):
    """Bind the forwarders below to builder.py's functions."""
    _builder.update(wrap_value=wrap_value, wrap_constant_like=wrap_constant_like)


def wrap_value(tx, value, source):
    """builder.wrap_value (Note [Variables: the builder is registered])."""
    return _builder["wrap_value"](tx, value, source)


def wrap_constant_like(tx, value):
    """builder.wrap_constant_like (Note [Variables: the builder is registered])."""
    return _builder["wrap_constant_like"](tx, value)


def wrap_loaded(tx, value, source):
    """`wrap_value` for what a load instruction (LOAD_DEREF, LOAD_GLOBAL, LOAD_ATTR) reads from
    `source` into a variable nothing else keeps: a plain function is remembered on `tx` with the
    guards its wrapping added (Note [Hooks: read from their source at run time])."""
    guards = tx.output.guards
    mark = len(guards)
    var = wrap_value(tx, value, source)
    if type(value) is types.FunctionType and getattr(var, "fn", None) is value:
        if var.source is source and hasattr(tx, "fresh_function"):
            tx.fresh_function = (var, guards.added_since(mark))
    return var


def next_serial():
    """A number larger than that of every VariableTracker made so far."""
    return next(_serial)


class VariableTracker:
    """Base of every traced value. Subclasses override what they understand; the rest breaks."""

    def __init__(self, *, source=None):
        self.source = source
        self.serial = next(_serial)  # creation order (see SideEffects.mutate_container)

    # --- what the value is -----------------------------------------------------------------
    def python_type(self):
        unimplemented(f"python_type of {self}")

    def is_python_constant(self):
        return False

    def as_python_constant(self):
        unimplemented(f"{self} is not a Python constant")

    def truthy(self, tx):
        """bool(value) while tracing, if known statically."""
        if self.is_python_constant():
            return bool(self.as_python_constant())
        unimplemented(f"bool() of {self}")

    # --- operations ------------------------------------------------------------------------
    exact_type = False  # python_type() is the value's class itself (its `__class__`)

    def var_getattr(self, tx, name):
        """Default: a method of the value's Python type, called through `call_method`."""
        try:
            typ = self.python_type()
        except Exception:
            typ = None
        if name == "__class__" and self.exact_type and typ is not None:
            return wrap_constant_like(tx, typ)  # (`x.__class__(items)` rebuilds like x)
        if typ is not None and callable(getattr(typ, name, None)):
            return BoundMethodVariable(self, name)
        unimplemented(f"attribute {name!r} of {self}")

    def call_function(self, tx, args, kwargs):
        unimplemented(f"call of {self}")

    def call_method(self, tx, name, args, kwargs):
        if name == "__getattribute__" or name == "__getattr__":
            unimplemented(f"{name} of {self}")
        fn = self.var_getattr(tx, name)
        if isinstance(fn, BoundMethodVariable) and fn.obj is self:
            unimplemented(f"method {name!r} of {self}")
        return fn.call_function(tx, args, kwargs)

    def unpack_var_sequence(self, tx):
        unimplemented(f"iteration over {self}")

    def has_unpack_var_sequence(self, tx):
        try:
            self.unpack_var_sequence(tx)
            return True
        except Exception:
            return False

    def _class_attr_source(self, name, *more):
        """Source of a function found on the value's class: `obj.__class__.name[.more]`."""
        if self.source is None:
            return None
        src = AttrSource(AttrSource(self.source, "__class__"), name)
        for m in more:
            src = AttrSource(src, m)
        return src

    # --- code generation ------------------------------------------------------------------
    def reconstruct(self, cg):
        """Emit bytecode that puts this value on the stack of the transformed code."""
        if self.source is not None:
            self.source.reconstruct(cg)
            return
        unimplemented(f"cannot rebuild {self} in the transformed code")

    def __repr__(self):
        return f"{type(self).__name__}()"


class PythonValueVariable(VariableTracker):
    """A value known while tracing, held as the Python object itself (constants, torch callables,
    user classes): its type and constant-ness come from that object."""

    def __init__(self, value, **kw):
        super().__init__(**kw)
        self.value = value

    def python_type(self):
        return type(self.value)

    def is_python_constant(self):
        return True

    def as_python_constant(self):
        return self.value


class BoundMethodVariable(VariableTracker):
    """`obj.method` of a traced container/iterator before it is called."""

    def __init__(self, obj, name, **kw):
        super().__init__(**kw)
        self.obj = obj
        self.name = name

    def call_function(self, tx, args, kwargs):
        return self.obj.call_method(tx, self.name, args, kwargs)

    def var_getattr(self, tx, name):
        if name == "__name__":  # (unittest's assertRaises names the callable it was given)
            return _constant(self.name)
        if name == "__qualname__":
            return _constant(f"{self.obj.python_type().__qualname__}.{self.name}")
        return super().var_getattr(tx, name)

    def reconstruct(self, cg):
        cg.reconstruct(self.obj)
        cg.extend(emit.load_attr(self.name))

    def __repr__(self):
        return f"BoundMethodVariable({self.obj!r}.{self.name})"


def _constant(value):
    return wrap_constant_like(None, value)


def probe(value, name, default=None):
    """getattr(value, name, default) for a user value kiln only inspects: a user __getattr__
    that raises something else than AttributeError (a KeyError) reads as the attribute missing,
    and a lookup that would run Python code of the value's class (a __getattr__ or
    __getattribute__, a property) reads as missing too (the user's code runs when the program
    runs it, not when kiln looks)."""
    cls = type(value)
    if cls.__flags__ & _HEAPTYPE and _lookup_runs_code(cls, value, name):
        return default
    try:
        return getattr(value, name, default)
    except Exception:
        return default


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class defined in Python
_ABSENT = object()
_SLOT_WRAPPER = type(object.__getattribute__)


def _class_lookup(cls, name):
    for k in cls.__mro__:
        d = vars(k)
        if name in d:
            return d[name]
    return _ABSENT


def lookup_hooked(cls):
    """Whether reading any attribute of a cls instance (isinstance reads `__class__` when the type
    does not match) runs Python code: a __getattribute__ of its own, or a `__class__` property."""
    if not cls.__flags__ & _HEAPTYPE:
        return False
    if type(_class_lookup(cls, "__getattribute__")) is not _SLOT_WRAPPER:
        return True
    return _class_lookup(cls, "__class__") is not object.__dict__["__class__"]


def _lookup_runs_code(cls, value, name):
    """Whether getattr(value, name) would call Python code of cls."""
    if type(_class_lookup(cls, "__getattribute__")) is not _SLOT_WRAPPER:
        return True  # (a Python function, or any other object standing for it)
    static = _class_lookup(cls, name)
    if static is not _ABSENT:
        kind = type(static)
        return kind is property or bool(kind.__flags__ & _HEAPTYPE and hasattr(kind, "__get__"))
    if _class_lookup(cls, "__getattr__") is _ABSENT:
        return False
    try:
        return name not in object.__getattribute__(value, "__dict__")
    except Exception:
        return True
