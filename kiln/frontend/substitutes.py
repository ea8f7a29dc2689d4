"""`kiln.substitute_in_graph`: a Python function kiln traces in place of a C function.

Note [Substitutes: Python stand-ins for C functions]
kiln cannot trace into a function written in C (`bisect.bisect_left`, a C extension's helper):
a call to one breaks the graph. A user who has the same function in Python registers it with
`@kiln.substitute_in_graph(c_function)`; from then on, traced code calling the C function traces
the Python one instead (calls outside compiled code still run the C function: the substitute is
only what kiln reads). The two must take the same parameters (checked when the C function has a
signature: the same names and defaults; a positional-only or keyword-only parameter may be a
plain one in the substitute); that they compute the same is the user's promise. A traced call
whose arguments the C function's signature would not take is a break (Python raises the error).
"""

import inspect
import types

from kiln.exc import unimplemented
from kiln.frontend.variables.functions import UserFunctionVariable

_SUBSTITUTES = {}  # id(C function) -> (C function, Python substitute)


def substitute_in_graph(original_fn, *, skip_signature_check=False):
    """Register the decorated Python function as what kiln traces for calls of `original_fn`
    (Note [Substitutes: Python stand-ins for C functions]); returns it unchanged."""
    if isinstance(original_fn, types.FunctionType) or not callable(original_fn):
        raise TypeError(
            f"kiln.substitute_in_graph expects a function written in C, got {original_fn!r} "
            "(a Python function is traced as it is)"
        )

    def register(substitute):
        if not isinstance(substitute, types.FunctionType):
            raise TypeError(f"kiln.substitute_in_graph: {substitute!r} is not a Python function")
        if not skip_signature_check:
            _check_signatures(original_fn, substitute)
        _SUBSTITUTES[id(original_fn)] = (original_fn, substitute)
        return substitute

    return register


def _check_signatures(original_fn, substitute):
    try:
        want = inspect.signature(original_fn)
    except (TypeError, ValueError):
        return  # (a C function without a text signature: nothing to compare)
    got = inspect.signature(substitute)
    plain = inspect.Parameter.POSITIONAL_OR_KEYWORD
    a, b = list(want.parameters.values()), list(got.parameters.values())
    if len(a) != len(b) or any(
        p.name != q.name or p.default != q.default or q.kind not in (p.kind, plain)
        for p, q in zip(a, b)
    ):
        raise TypeError(
            f"kiln.substitute_in_graph: Signature mismatch: {original_fn.__name__}{want} "
            f"vs {substitute.__name__}{got}"
        )


def substitute_of(value):
    """The traced stand-in of the C function `value` (SubstituteVariable), or None."""
    entry = _SUBSTITUTES.get(id(value))
    if entry is None or entry[0] is not value:
        return None
    return SubstituteVariable(entry[1], original=value)


class SubstituteVariable(UserFunctionVariable):
    """A C function's registered substitute: calls the C function would take are traced."""

    def __init__(self, fn, *, original, **kw):
        super().__init__(fn, **kw)
        self.original = original

    def call_function(self, tx, args, kwargs):
        try:
            sig = inspect.signature(self.original)
        except (TypeError, ValueError):
            sig = None
        if sig is not None:
            try:
                sig.bind(*args, **kwargs)
            except TypeError:
                unimplemented(f"call to {self.original.__name__} with arguments it does not take")
        return super().call_function(tx, args, kwargs)

    def python_type(self):
        return type(self.original)

    def as_python_constant(self):
        return self.original  # (the value is the C function; only its calls are substituted)

    def var_getattr(self, tx, name):
        unimplemented(f"attribute {name!r} of {self.original.__name__} (a substituted C function)")

    def reconstruct(self, cg):
        cg.load_object(self.original)
