"""Exception instances made and raised while tracing (Note [Blocks: exceptions while tracing]).

raise KeyError("k")   -> ExceptionVariable(KeyError, [ConstantVariable("k")])
except KeyError as e: -> str(e), e.args, type(e), isinstance(e, LookupError) read it
"""

import inspect
import types

from kiln.exc import unimplemented
from kiln.frontend.variables.base import VariableTracker

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
# builtin exceptions whose constructor does more than keep its args (errno mapping, keyword
# arguments, positions): not modelled
_SPECIAL_BUILTINS = (OSError, ImportError, SyntaxError, UnicodeError, BaseExceptionGroup)


class ObservedException(Exception):
    """An exception raised by traced code, unwinding the translators' block stacks."""

    def __init__(self, var):
        super().__init__(var.cls.__name__)
        self.var = var


def modelled(cls):
    """Whether kiln can make instances of exception class `cls` from their arguments."""
    for k in cls.__mro__:
        if k.__module__ == "builtins":
            if issubclass(k, _SPECIAL_BUILTINS):
                return False
            continue
        if any(n.startswith("__") and n.endswith("__") and n not in _HARMLESS for n in vars(k)):
            return False
    return True


def make_exception(tx, cls, args, kwargs):
    """`cls(*args)` for an exception class while tracing."""
    if kwargs or not modelled(cls):
        unimplemented(f"creating an instance of {cls.__qualname__} while tracing")
    return ExceptionVariable(cls, args)


def raise_observed(tx, cls, *args):
    """Raise `cls(*args)` (constants) from a modelled builtin, as Python would."""
    from kiln.frontend.variables.constant import ConstantVariable

    raise ObservedException(ExceptionVariable(cls, [ConstantVariable(a) for a in args]))


def observe(exc):
    """Raise a real exception `exc` (from running a pure builtin on constants) in the traced code,
    if kiln models its class and its args are literals; else return."""
    from kiln.frontend.variables.constant import ConstantVariable, is_literal

    cls = type(exc)
    if cls.__module__ == "builtins" and modelled(cls) and all(is_literal(a) for a in exc.args):
        var = ExceptionVariable(cls, [ConstantVariable(a) for a in exc.args])
        raise ObservedException(var) from None


class ExceptionVariable(VariableTracker):
    """An exception instance: its class, its args and the attributes Python sets on it."""

    def __init__(self, cls, args, **kw):
        from kiln.frontend.variables.constant import ConstantVariable

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
        return all(a.is_python_constant() for a in self.args)

    def as_python_constant(self):
        """A real instance with the same class and args (what str(), repr(), f-strings read)."""
        return self.cls(*[a.as_python_constant() for a in self.args])

    def truthy(self, tx):
        return True

    def var_getattr(self, tx, name):
        from kiln.frontend.variables.builder import wrap_constant_like
        from kiln.frontend.variables.constant import ConstantVariable, is_literal
        from kiln.frontend.variables.lists import TupleVariable

        if name == "args":
            return TupleVariable(list(self.args))
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
            from kiln.frontend.variables.base import BoundMethodVariable

            return BoundMethodVariable(self, name)
        unimplemented(f"attribute {name!r} of a {self.cls.__name__} made while tracing")

    def call_method(self, tx, name, args, kwargs):
        from kiln.frontend.variables.constant import ConstantVariable

        if name in ("__str__", "__repr__") and not args and not kwargs:
            if not self.is_python_constant():
                unimplemented(f"{name} of a {self.cls.__name__} with non-constant args")
            fn = str if name == "__str__" else repr
            return ConstantVariable(fn(self.as_python_constant()))
        if name == "with_traceback" and len(args) == 1 and not kwargs:
            return self
        unimplemented(f"method {name!r} of a {self.cls.__name__} made while tracing")

    def reconstruct(self, cg):
        """`cls(*args)` in the transformed code (a break at the `raise` that raises it)."""
        from kiln.bytecode import emit

        if self.caught or any(
            not (v.is_python_constant() and v.as_python_constant() in (None, False))
            for k, v in self.attrs.items()
        ):
            unimplemented(f"rebuilding a {self.cls.__name__} that was raised (traceback, context)")
        cg.load_object(self.cls, push_null=True)
        for a in self.args:
            cg.reconstruct(a)
        cg.extend(emit.call(len(self.args)))

    def __repr__(self):
        return f"ExceptionVariable({self.cls.__name__}, {self.args!r})"
