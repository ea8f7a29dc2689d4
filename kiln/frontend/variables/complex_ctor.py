"""`complex(...)` of constants while tracing: the number itself (folded), as Python makes it.

The arguments must all be Python constants (numbers or a string); Python's own complex() makes
the value, so its rules hold (`complex("1+2j")`, `complex(imag=2)`). Anything it rejects (three
arguments, a list, a malformed string: a TypeError or ValueError eagerly) is a break that names
the error, and so is an argument kiln only knows as a traced value (a tensor, a number read
from tensor data).
"""

from kiln.exc import unimplemented
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.user_defined import INSTANCE_MAKERS


def make_complex(tx, cls_var, args, kwargs):
    """complex(*args, **kwargs) folded to a constant (or None: not complex itself)."""
    if cls_var.value is not complex:
        return None
    values = [*args, *kwargs.values()]
    if not all(v.is_python_constant() for v in values):
        unimplemented("complex() of a value that is not a Python constant")
    cargs = [a.as_python_constant() for a in args]
    ckwargs = {k: v.as_python_constant() for k, v in kwargs.items()}
    if not all(type(v) in (int, float, complex, bool, str) for v in [*cargs, *ckwargs.values()]):
        unimplemented("complex() of a value that is not a number or a string")
    try:
        value = complex(*cargs, **ckwargs)
    except (TypeError, ValueError) as e:
        unimplemented(f"complex() raises {type(e).__name__}: {e}")
    return ConstantVariable(value)


INSTANCE_MAKERS.append(make_complex)
