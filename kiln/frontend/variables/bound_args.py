"""`inspect.Signature.bind` while tracing: a BoundArguments made in the frame.

Note [Signatures: bind]
`sig.bind(*args, **kwargs)` (and bind_partial) of a signature kiln holds as a constant maps the
arguments to the parameters by the signature alone: kiln lets Python's own `bind` do it over
stand-ins (one marker object per argument), so its errors (a missing or unexpected argument,
TypeError) are Python's own, then puts the traced values back where the markers landed: the
`arguments` dict is a dict made in the frame (parameter name -> value, a tuple for *args, a dict
for **kwargs). BoundArguments' own behaviour is read from that dict as its Python code reads it:
`.args` and `.kwargs` walk the signature's parameters over it, `apply_defaults()` puts a new dict
in its place with the defaults filled in (defaults are the signature's constants). A
BoundArguments that leaves the frame is rebuilt as `inspect.BoundArguments(sig, arguments)`.
"""

import inspect

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.variables.base import BoundMethodVariable, VariableTracker, wrap_constant_like
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.dicts import ConstDictVariable
from kiln.frontend.variables.exceptions import raise_observed
from kiln.frontend.variables.lists import TupleVariable
from kiln.frontend.variables.misc import OBJECT_METHODS

_P = inspect.Parameter


class _Slot:
    """A stand-in for one argument while Python's bind places it."""

    __slots__ = ("var",)

    def __init__(self, var):
        self.var = var


def _back(value):
    """The traced value(s) a bound argument holds, its stand-ins replaced."""
    if type(value) is _Slot:
        return value.var
    if type(value) is tuple:  # *args
        return TupleVariable([_back(v) for v in value])
    if type(value) is dict:  # **kwargs
        return ConstDictVariable({k: _back(v) for k, v in value.items()})
    unimplemented(f"Signature.bind placed a {type(value).__name__}")


def bind(tx, sig_var, name, args, kwargs):
    """`sig.bind(...)` / `sig.bind_partial(...)` (Note [Signatures: bind])."""
    sig = sig_var.value
    try:
        bound = getattr(sig, name)(*map(_Slot, args), **{k: _Slot(v) for k, v in kwargs.items()})
    except TypeError as e:
        raise_observed(tx, TypeError, str(e))
    arguments = ConstDictVariable({k: _back(v) for k, v in bound.arguments.items()})
    return BoundArgumentsVariable(sig_var, arguments)


def _default(tx, param):
    """The value apply_defaults gives a parameter left out, or None when it gives none."""
    if param.default is not _P.empty:
        return wrap_constant_like(tx, param.default)
    if param.kind is _P.VAR_POSITIONAL:
        return TupleVariable([])
    if param.kind is _P.VAR_KEYWORD:
        return ConstDictVariable({})
    return None


class BoundArgumentsVariable(VariableTracker):
    """An inspect.BoundArguments made in the frame (Note [Signatures: bind])."""

    keeps_identity = True

    def __init__(self, sig_var, arguments, **kw):
        super().__init__(**kw)
        self.sig_var = sig_var
        self.arguments = arguments

    def python_type(self):
        return inspect.BoundArguments

    def _params(self):
        return self.sig_var.value.parameters.items()

    def _args(self):
        out = []
        for name, param in self._params():
            if param.kind in (_P.VAR_KEYWORD, _P.KEYWORD_ONLY) or name not in self.arguments.items:
                break
            value = self.arguments.items[name]
            if param.kind is _P.VAR_POSITIONAL:
                out.extend(self._unpack(value))
            else:
                out.append(value)
        return TupleVariable(out)

    def _kwargs(self):
        out = {}
        started = False
        for name, param in self._params():
            if not started:
                if param.kind in (_P.VAR_KEYWORD, _P.KEYWORD_ONLY):
                    started = True
                elif name not in self.arguments.items:
                    started = True
                    continue
            if not started or name not in self.arguments.items:
                continue
            value = self.arguments.items[name]
            if param.kind is _P.VAR_KEYWORD:
                if not isinstance(value, ConstDictVariable):
                    unimplemented("BoundArguments.kwargs over a **kwargs that is no dict")
                out.update(value.items)
            else:
                out[name] = value
        return ConstDictVariable(out)

    @staticmethod
    def _unpack(value):
        if not isinstance(value, TupleVariable):
            unimplemented("BoundArguments.args over a *args that is no tuple")
        return value.items

    def var_getattr(self, tx, name):
        if name == "arguments":
            return self.arguments
        if name == "signature":
            return self.sig_var
        if name == "args":
            return self._args()
        if name == "kwargs":
            return self._kwargs()
        if name == "apply_defaults":
            return BoundMethodVariable(self, name)
        unimplemented(f"BoundArguments.{name}")

    def call_method(self, tx, name, args, kwargs):
        if name == "apply_defaults" and not args and not kwargs:
            filled = {}
            for pname, param in self._params():
                value = self.arguments.items.get(pname)
                if value is None:
                    value = _default(tx, param)
                if value is not None:
                    filled[pname] = value
            self.arguments = ConstDictVariable(filled)
            return ConstantVariable(None)
        unimplemented(f"BoundArguments.{name}")

    def reconstruct(self, cg):
        cg.load_object(inspect.BoundArguments, push_null=True)
        cg.reconstruct(self.sig_var)
        cg.reconstruct(self.arguments)
        cg.extend(emit.call(2))

    def __repr__(self):
        return f"BoundArgumentsVariable({self.sig_var.value})"


OBJECT_METHODS[(inspect.Signature, "bind")] = bind
OBJECT_METHODS[(inspect.Signature, "bind_partial")] = bind
