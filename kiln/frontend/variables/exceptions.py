"""Exception instances made and raised while tracing (Note [Blocks: exceptions while tracing]).

raise KeyError("k")   -> ExceptionVariable(KeyError, [ConstantVariable("k")])
except KeyError as e: -> str(e), e.args, type(e), isinstance(e, LookupError) read it
"""

import inspect
import types

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.variables.base import BoundMethodVariable, VariableTracker, wrap_constant_like
from kiln.frontend.variables.constant import ConstantVariable, is_literal

# dunders a user exception class may define and still be made by kiln (anything else, e.g.
# __init__, __str__ or __new__, is user code the instance would run: not modelled)
_HARMLESS = {
    "__module__",
    "__qualname__",
    "__doc__",
    "__dict__",
    "__weakref__",
    "__firstlineno__",
    "__static_attributes__",
}
# Python methods that are inlined when called (str(e), repr(e)); the instance is then never
# folded into a real constant (its text depends on attributes the fold would not have)
_TEXT = ("__str__", "__repr__")
# builtin exceptions whose constructor does more than keep its args (errno mapping, keyword
# arguments, positions): not modelled
_SPECIAL_BUILTINS = (OSError, ImportError, SyntaxError, UnicodeError, BaseExceptionGroup)


class ObservedException(Exception):
    """An exception raised by traced code, unwinding the translators' block stacks."""

    def __init__(self, var):
        super().__init__(var.cls.__name__)
        self.var = var


def modelled(cls, allow_init=False):
    """Whether kiln can make instances of exception class `cls` from their arguments (or, with
    allow_init, by running a Python __init__ of the class)."""
    for k in cls.__mro__:
        if k.__module__ == "builtins":
            if issubclass(k, _SPECIAL_BUILTINS):
                return False
            continue
        for n, v in vars(k).items():
            if n.startswith("__") and n.endswith("__") and n not in _HARMLESS:
                python = isinstance(v, types.FunctionType)
                if not ((allow_init and n == "__init__" or n in _TEXT) and python):
                    return False
    return True


def _python_init(cls):
    """The first __init__ in the MRO when it is a Python function, else None."""
    for k in cls.__mro__:
        if "__init__" in vars(k):
            init = vars(k)["__init__"]
            return init if isinstance(init, types.FunctionType) else None
    return None


def make_exception(tx, cls, args, kwargs):
    """`cls(*args)` for an exception class while tracing (a Python __init__ is inlined; its
    `super().__init__(...)` sets args: ExceptionInitVariable)."""
    init = _python_init(cls)
    if init is not None and modelled(cls, allow_init=True):
        from kiln.frontend.variables.functions import inline_call

        exc = ExceptionVariable(cls, list(args))  # (args stay these unless super() sets them)
        inline_call(tx, init, [exc, *args], kwargs, None)
        return exc
    if kwargs or not modelled(cls):
        unimplemented(f"creating an instance of {cls.__qualname__} while tracing")
    return ExceptionVariable(cls, args)


class ExceptionInitVariable(VariableTracker):
    """`super().__init__(*args)` of a builtin exception class, inside a user __init__."""

    def __init__(self, exc, **kw):
        super().__init__(**kw)
        self.exc = exc

    def call_function(self, tx, args, kwargs):
        if kwargs or not isinstance(self.exc, ExceptionVariable):
            unimplemented("BaseException.__init__ with keywords, or on another object")
        self.exc.args = list(args)
        return ConstantVariable(None)


def make_exception_object(cls, args, attrs):
    """The transformed code's way to rebuild an exception made while tracing (its __init__ is
    not run again: args and attributes as traced)."""
    exc = cls.__new__(cls, *args)
    exc.args = args
    for k, v in attrs.items():
        setattr(exc, k, v)
    return exc


def raise_observed(tx, cls, *args):
    """Raise `cls(*args)` (constants) from a modelled builtin, as Python would."""
    raise ObservedException(ExceptionVariable(cls, [ConstantVariable(a) for a in args]))


def observe(exc):
    """Raise a real exception `exc` (from running a pure builtin on constants) in the traced code,
    if kiln models its class and its args are literals; else return."""
    cls = type(exc)
    if cls.__module__ == "builtins" and modelled(cls) and all(is_literal(a) for a in exc.args):
        var = ExceptionVariable(cls, [ConstantVariable(a) for a in exc.args])
        raise ObservedException(var) from None


def _text_method(cls, name):
    """The __str__ / __repr__ that instances of `cls` use (the first in the MRO)."""
    return next(vars(k)[name] for k in cls.__mro__ if name in vars(k))


_CHAINING = ("__cause__", "__context__", "__suppress_context__")  # set by assignment too


class ExceptionVariable(VariableTracker):
    """An exception instance: its class, its args and the attributes Python sets on it."""

    keeps_identity = True  # rebuilt once: `e2.__cause__ = e; return e, e2` gives e twice

    def __init__(self, cls, args, **kw):
        super().__init__(**kw)
        self.cls = cls
        self.args = list(args)
        none = ConstantVariable(None)
        self.attrs = {"__cause__": none, "__context__": none, "__traceback__": none}
        self.attrs["__suppress_context__"] = ConstantVariable(False)
        self.caught = False  # raised and caught while tracing: it has a traceback in eager

    def python_type(self):
        return self.cls

    def is_python_constant(self):
        return not self.custom_text() and all(a.is_python_constant() for a in self.args)

    def custom_text(self):
        """Whether the class defines __str__ or __repr__ in Python."""
        return any(isinstance(_text_method(self.cls, n), types.FunctionType) for n in _TEXT)

    def as_python_constant(self):
        """A real instance with the same class and args (what str(), repr(), f-strings read)."""
        if self.custom_text():
            unimplemented(f"a {self.cls.__name__} (Python __str__/__repr__) as a constant")
        return self._rebuilt()

    def _rebuilt(self):
        args = tuple(a.as_python_constant() for a in self.args)
        return make_exception_object(self.cls, args, {})

    def setattr(self, tx, name, value):
        """`exc.name = value` (in a user __init__ or elsewhere): kept symbolically."""
        if name.startswith("__") or inspect.getattr_static(self.cls, name, None) is not None:
            if name not in ("__cause__", "__context__", "__suppress_context__"):
                unimplemented(f"assignment to {self.cls.__name__}.{name}")
        tx.output.side_effects.mutate_new_object(self)
        self.attrs[name] = value
        if name == "__cause__":  # (as BaseException's setter does)
            self.attrs["__suppress_context__"] = ConstantVariable(True)

    def truthy(self, tx):
        return True

    def var_getattr(self, tx, name):
        from kiln.frontend.variables.lists import TupleVariable

        if name == "args":
            return TupleVariable(list(self.args))
        if name == "__traceback__" and self.caught:
            # Note [Exceptions: tracebacks are not traced]
            # Eager's traceback links the frames the exception passed through; a raise kiln
            # traced passed through none, so the attribute would read None. Reading it is a
            # break, and as a caught exception cannot be rebuilt, the frame runs in Python.
            unimplemented(f"the traceback of a {self.cls.__name__} raised while tracing")
        if name in self.attrs:
            return self.attrs[name]
        if name == "__class__":
            return wrap_constant_like(tx, self.cls)
        if name == "value" and issubclass(self.cls, StopIteration):
            return self.args[0] if self.args else ConstantVariable(None)
        static = inspect.getattr_static(self.cls, name, None)
        if isinstance(static, types.FunctionType):
            from kiln.frontend.variables.functions import UserMethodVariable

            return UserMethodVariable(static, self)
        if is_literal(static) and self.cls.__module__ != "builtins":
            return ConstantVariable(static)
        if name in ("__str__", "__repr__", "with_traceback", "add_note"):
            return BoundMethodVariable(self, name)
        unimplemented(f"attribute {name!r} of a {self.cls.__name__} made while tracing")

    def call_method(self, tx, name, args, kwargs):
        if name in _TEXT and not args and not kwargs:
            fn = _text_method(self.cls, name)
            if isinstance(fn, types.FunctionType):
                from kiln.frontend.variables.functions import inline_call

                return inline_call(tx, fn, [self], {}, None)
            if not all(a.is_python_constant() for a in self.args):
                unimplemented(f"{name} of a {self.cls.__name__} with non-constant args")
            return ConstantVariable(fn(self._rebuilt()))  # (the builtin class's own method)
        if name == "with_traceback" and len(args) == 1 and not kwargs:
            return self
        unimplemented(f"method {name!r} of a {self.cls.__name__} made while tracing")

    def reconstruct(self, cg):
        """The exception in the transformed code (a break at the `raise` that raises it)."""
        traceback = self.attrs["__traceback__"]
        if self.caught or not (
            traceback.is_python_constant() and traceback.as_python_constant() is None
        ):
            unimplemented(f"rebuilding a {self.cls.__name__} that was raised (traceback)")
        # user attributes, and the chaining ones the code set (`e.__context__ = other`)
        user = {
            k: v
            for k, v in self.attrs.items()
            if not k.startswith("__")
            or (
                k in _CHAINING
                and not (v.is_python_constant() and v.as_python_constant() in (None, False))
            )
        }
        cg.load_object(make_exception_object, push_null=True)
        cg.load_object(self.cls)
        for a in self.args:
            cg.reconstruct(a)
        cg.extend(emit.build_tuple(len(self.args)))
        for k, v in user.items():
            cg.extend(emit.load_const(k))
            cg.reconstruct(v)
        cg.extend(emit.build_map(len(user)))
        cg.extend(emit.call(3))

    def __repr__(self):
        return f"ExceptionVariable({self.cls.__name__}, {self.args!r})"
