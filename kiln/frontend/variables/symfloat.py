"""Floats computed from a symbolic size in traced code: `float(n)`, `n * 1.5`, `n / 3`, floored back.

Note [Shapes: float sizes in traced code]
`int(h * 1.5)`, `math.floor(float(n) * 0.5)`, `math.ceil(n / 4)` compute an int size through a
float. A SizeFloatVariable is such a float, `size * p / q` (p, q small positive ints), with the
Python steps that made it. `math.floor`/`math.ceil`/`int()` of it (of a nonnegative float, trunc is
floor) is the exact int size expression `(size * p) // q` (ceil: `(size * p + q - 1) // q`): an
int SymNodeVariable, no guard. Exact because Python's float arithmetic here rounds at most once:
every step is exact (a multiplication or division by a small power-of-two ratio, e.g. `* 1.5`,
`/ 2`) except possibly the LAST, a division by a small int (`/ 3`), whose single correctly rounded
result has the same floor and ceiling as the exact rational (an integer result is exact, and a
non-integer one is at least 1/q away from the next integer). Anything else (a scale like 0.1, a
step after an inexact division, a comparison, a use as a tensor op's argument) replays the Python
steps on the size's value: a specialisation, with its guard, as for any size used as a constant.
"""

import fractions
import math
import operator

from kiln.frontend.variables.base import VariableTracker
from kiln.frontend.variables.constant import ConstantVariable

LIMIT = 2**20  # bound on p and q: products with any size stay exact in a double

_FLOAT_OPS = {operator.mul, operator.truediv, operator.imul, operator.itruediv}


def _dyadic(f):
    """Whether a positive Fraction is p/q with small p and a power-of-two q."""
    return (
        f.numerator < LIMIT and f.denominator < LIMIT and f.denominator & (f.denominator - 1) == 0
    )


class SizeFloatVariable(VariableTracker):
    """`size * ratio` as a float (Note [Shapes: float sizes in traced code])."""

    def __init__(self, size, ratio, steps, exact=True, **kw):
        super().__init__(**kw)
        self.size = size  # a SymNodeVariable
        self.ratio = ratio  # a positive fractions.Fraction
        self.steps = tuple(steps)  # ((operator, constant), ...) applied to float(size)
        self.exact = exact  # every step so far was exact (see the note)

    def python_type(self):
        return float

    def is_python_constant(self):
        return True  # any use kiln does not model takes the specialised value

    def as_python_constant(self):
        """Python's own float on the size's value (specialises the size: a guard)."""
        value = float(self.size.evaluate())
        for fn, c in self.steps:
            value = fn(value, c)
        return value

    def truthy(self, tx):
        return bool(self.as_python_constant())

    def reconstruct(self, cg):
        cg.reconstruct(ConstantVariable(self.as_python_constant()))

    def __repr__(self):
        return f"SizeFloatVariable({self.size!r} * {self.ratio})"


def to_float(size):
    """`float(n)` of a SymNodeVariable."""
    return SizeFloatVariable(size, fractions.Fraction(1), ())


def _constant_ratio(fn, c):
    """The Fraction a step `x <fn> c` multiplies by, and whether the step is exact; None if not
    modelled (a negative, zero or non-finite constant, a bool)."""
    if isinstance(c, bool) or not isinstance(c, int | float) or not math.isfinite(c) or c <= 0:
        return None
    f = fractions.Fraction(c)
    if fn is operator.mul:
        return (f, True) if _dyadic(f) else None
    if _dyadic(1 / f):
        return 1 / f, True
    if float(c).is_integer() and c < LIMIT:
        return 1 / f, False  # a division by a small int: exact as the last step only
    return None


def binary(tx, fn, a, b):
    """`a <fn> b` where one side is a size float or an int size combined with a float; else None."""
    from kiln.frontend.variables.sym import SymNodeVariable

    fn = {operator.imul: operator.mul, operator.itruediv: operator.truediv}.get(fn, fn)
    if fn not in (operator.mul, operator.truediv):
        return None
    if fn is operator.mul and not isinstance(a, SizeFloatVariable | SymNodeVariable):
        a, b = b, a  # `1.5 * n`
    if isinstance(a, SymNodeVariable):
        if not isinstance(b, ConstantVariable):
            return None
        if fn is operator.mul and not isinstance(b.value, float):
            return None  # int * int stays an int size
        a = to_float(a)
    if not isinstance(a, SizeFloatVariable) or not isinstance(b, ConstantVariable):
        return None
    step = _constant_ratio(fn, b.value)
    if step is None or not a.exact:
        return ConstantVariable(fn(a.as_python_constant(), b.value))
    ratio, exact = step
    return SizeFloatVariable(a.size, a.ratio * ratio, (*a.steps, (fn, b.value)), exact)


def to_int(tx, rounding, v):
    """`math.floor`/`math.ceil`/`int()` (trunc) of a size float: an int size (see the note)."""
    from kiln.frontend.variables.sym import binary as int_binary

    p, q = v.ratio.numerator, v.ratio.denominator
    out = int_binary(tx, operator.mul, v.size, ConstantVariable(p)) if p != 1 else v.size
    if q == 1:
        return out
    if rounding is math.ceil:
        out = int_binary(tx, operator.add, out, ConstantVariable(q - 1))
    return int_binary(tx, operator.floordiv, out, ConstantVariable(q))


ROUNDINGS = {math.floor: math.floor, math.ceil: math.ceil, math.trunc: math.floor, int: math.floor}
