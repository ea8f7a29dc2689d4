"""Symbolic sizes in traced code: `x.shape[0]`, `n // 2`, `max(a, b)` as FX nodes with SymNode values.

Note [Shapes: SymNodeVariable]
A size read from a tensor with a dynamic dimension (`x.size(0)`, `x.shape`, `len(x)`, `x.numel()`)
is a SymNodeVariable: an FX node of the graph (`call_method size`, `operator.floordiv` ...) and its
traced value, a `kiln.symbolic.shape_env.SymNode` (a sympy expression over the frame's size symbols).
Arithmetic that keeps an int (`+ - * // %`, unary minus, `max/min`) stays symbolic: one more node.
What needs a concrete answer evaluates on the hints and the ShapeEnv records the fact as a guard:
comparisons and `bool()` (a fact such as `s0 > 5`), `int()`, a use as a Python index, range bound
or anything else kiln does not model (`as_python_constant`: a specialisation `Eq(s0, 10)`). Passed
to a tensor op, the node goes into the op's FX arguments and `torch.SymInt(node)` into its fake run.
Left on the stack or in a local at a graph break, the size is an int output of the graph.
"""

import builtins
import operator

import sympy
import torch

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.variables import symfloat
from kiln.frontend.variables.base import VariableTracker
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.lists import BaseListVariable, SizeVariable, TupleVariable
from kiln.frontend.variables.symfloat import SizeFloatVariable
from kiln.symbolic import shape_env

# Operators whose result is again a size (int in, int out): recorded as nodes.
ARITH_OPS = {
    operator.add: operator.add,
    operator.sub: operator.sub,
    operator.mul: operator.mul,
    operator.floordiv: operator.floordiv,
    operator.mod: operator.mod,
    operator.iadd: operator.add,
    operator.isub: operator.sub,
    operator.imul: operator.mul,
    operator.ifloordiv: operator.floordiv,
    operator.imod: operator.mod,
    operator.pow: operator.pow,  # (a nonnegative int exponent only: see binary)
    operator.ipow: operator.pow,
}

COMPARE_OPS = {operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge}


def _value(v):
    """The traced value of an int-like variable: a SymNode or an int."""
    return v.value


def _arg(v):
    """The FX argument of an int-like variable: its node, or the constant."""
    return v.proxy if isinstance(v, SymNodeVariable) else v.value


def is_int_like(v):
    """A SymNodeVariable or an int constant (not a bool)."""
    if isinstance(v, SymNodeVariable):
        return True
    return isinstance(v, ConstantVariable) and type(v.value) is int


class SymNodeVariable(VariableTracker):
    """A symbolic int in the graph: an FX node and its SymNode value (Note [Shapes: SymNodeVariable])."""

    def __init__(self, proxy, value, **kw):
        super().__init__(**kw)
        self.proxy = proxy
        self.value = value

    @staticmethod
    def create(tx, node, value):
        """A SymNodeVariable for `node` computing `value`; a constant when the value is an int."""
        value = shape_env.from_torch(value)
        if not isinstance(value, shape_env.SymNode):
            if not node.users:
                tx.output.graph.erase_node(node)
            return ConstantVariable(value)
        node.meta["example_value"] = shape_env.to_torch(value)
        return SymNodeVariable(node, value)

    # --- what the value is -----------------------------------------------------------------
    def python_type(self):
        return int

    def is_python_constant(self):
        return False

    def as_python_constant(self):
        """Used where kiln needs a concrete int: specialise (a guard `Eq(s, hint)`)."""
        return self.evaluate()

    def evaluate(self):
        """The hint as an int, recorded as the guard `Eq(expr, hint)`."""
        return int(self.value)

    def truthy(self, tx):
        return bool(self.value)

    def bool_in_graph(self, tx):
        """`bool(n)` of an int read by `.item()`: Note [Shapes: a bool read from tensor data]."""
        if self.value.has_hint():
            return None
        from kiln.frontend.variables import data_bools, unbacked

        return data_bools.scalar_bool(tx, self, lambda: unbacked.scalar_leaf(tx, self, torch.int64))

    def unpack_var_sequence(self, tx):
        unimplemented("iteration over an int")

    # --- operations ------------------------------------------------------------------------
    def var_getattr(self, tx, name):
        if name in ("real", "numerator"):
            return self
        return ConstantVariable(self.evaluate()).var_getattr(tx, name)

    def call_method(self, tx, name, args, kwargs):
        if name == "__index__" or name == "__int__":
            return ConstantVariable(self.evaluate())
        return ConstantVariable(self.evaluate()).call_method(tx, name, args, kwargs)

    def reconstruct(self, cg):
        cg.reconstruct_tensor(self)  # an int output of the graph

    def __repr__(self):
        return f"SymNodeVariable({self.proxy.name}, {self.value})"


def specialised(v):
    """A SymNodeVariable (or size float) as the constant of its value (a guard); else v itself."""
    if isinstance(v, SizeFloatVariable):
        return ConstantVariable(v.as_python_constant())
    return ConstantVariable(v.evaluate()) if isinstance(v, SymNodeVariable) else v


def binary(tx, fn, a, b):
    """`a <fn> b` with at least one SymNodeVariable and no tensor (Note [Shapes: SymNodeVariable])."""
    from kiln.frontend.variables.operators import binary_op

    result = symfloat.binary(tx, fn, a, b)  # Note [Shapes: float sizes in traced code]
    if result is not None:
        return result
    op = ARITH_OPS.get(fn)
    if op is None or not (is_int_like(a) and is_int_like(b)):
        # a float, a sequence repeat, a shift ...: the size as its concrete value
        return binary_op(tx, fn, specialised(a), specialised(b))
    if op is operator.pow and not (isinstance(b, ConstantVariable) and b.value >= 0):
        return binary_op(tx, fn, specialised(a), specialised(b))  # (a float result)
    if op in (operator.floordiv, operator.mod) and _exact_division(tx, a, b):
        if op is operator.mod:  # Note [Shapes: exact division by an unbacked divisor]
            return ConstantVariable(0)
    elif op in (operator.floordiv, operator.mod):
        # the divisor must be known nonzero; Python's floor semantics with negative operands are
        # not modelled by the size expressions: specialise those
        if isinstance(b, ConstantVariable) and b.value <= 0:
            return binary_op(tx, fn, specialised(a), b)
        if isinstance(b, SymNodeVariable) and _unknown_sign(b.value):
            return _opaque_division(tx, op, a, b)  # Note [Shapes: exact division by an ...]
        if isinstance(b, SymNodeVariable) and not bool(b.value > 0):
            return binary_op(tx, fn, specialised(a), specialised(b))
    try:
        value = op(_value(a), _value(b))
    except (TypeError, ValueError, ZeroDivisionError) as e:
        unimplemented(f"{op.__name__} of sizes raised {type(e).__name__}: {e}")
    node = tx.output.create_node("call_function", op, (_arg(a), _arg(b)), {})
    return SymNodeVariable.create(tx, node, value)


# Note [Shapes: exact division by an unbacked divisor]
# `a % b` and `a // b` with b over values read from tensor data (`u0 + 10`) cannot take the sign
# of b from a hint, which Python's floor semantics need. When b divides a as polynomials
# (`(u0 + 10) * (u0 + 10)` by `u0 + 10`), every sign gives the same answer: `a % b` is 0 and
# `a // b` the exact quotient, for any b but 0 (where eager raises ZeroDivisionError). So the
# result is folded, with `b != 0` known from the facts or else made a fact by a division the
# graph computes first (unused, kept: it raises eager's ZeroDivisionError). Otherwise, when the
# facts do not give b's sign, the graph computes `a // b` itself and its value is a new unbacked
# int (`torch._check((2 * u0) // (u0 + u1) != 0)` then asserts and assumes a fact about it).
def _exact_division(tx, a, b):
    """Whether `a % b` / `a // b` has its divisor over unbacked values, dividing a exactly, and
    known (or asserted at run time) nonzero."""
    if not isinstance(b, SymNodeVariable) or not is_int_like(a):
        return False
    divisor = b.value
    env = divisor.env
    if not (divisor.expr.free_symbols & env.unbacked):
        return False
    dividend = _value(a)
    dividend = dividend.expr if isinstance(dividend, shape_env.SymNode) else sympy.Integer(dividend)
    if sympy.fraction(sympy.cancel(dividend / divisor.expr))[1] != 1:
        return False
    nonzero = env.simplify(sympy.Ne(divisor.expr, 0))
    if env.static_value(nonzero) is not True:
        _opaque_division(tx, operator.mod, a, b)  # (raises eager's ZeroDivisionError on 0)
        env.assume(nonzero)
    return True


def _unknown_sign(divisor):
    """A divisor over unbacked values whose sign the facts do not give."""
    env = divisor.env
    if not (divisor.expr.free_symbols & env.unbacked):
        return False
    return env.static_value(sympy.Gt(divisor.expr, 0)) is None


def _opaque_division(tx, op, a, b):
    """`a // b` / `a % b` by a divisor of unknown sign: the graph computes it (Python's operator
    on the run-time ints: eager's floor semantics and ZeroDivisionError), its value a new
    unbacked int that facts and checks may name."""
    output = tx.output
    key = (op, *(sympy.sympify(getattr(v, "expr", v)) for v in (_value(a), _value(b))))
    made = output.__dict__.setdefault("opaque_divisions", {})  # (the same one: the same value)
    if key not in made:
        node = output.create_node("call_function", op, (_arg(a), _arg(b)), {})
        value = output.shape_env.create_unbacked("int")
        node.meta["example_value"] = shape_env.to_torch(value)
        node.meta["kiln_may_raise"] = True  # (kept when unused: it raises as eager's does)
        output.__dict__.setdefault("item_nodes", {})[value.expr] = node
        made[key] = (node, value)
    return SymNodeVariable(*made[key])


def has_symbolic(v):
    """A SymNodeVariable, or a sequence (`x.shape`) holding one."""
    if isinstance(v, SymNodeVariable):
        return True
    return isinstance(v, BaseListVariable) and any(isinstance(i, SymNodeVariable) for i in v.items)


def _compare_sequences(tx, fn, a, b):
    """`x.shape == y.shape` (and !=) item by item: each equality a fact."""
    if fn not in (operator.eq, operator.ne):
        return None
    a, b = as_sequence(a), as_sequence(b)
    if not (isinstance(a, BaseListVariable) and isinstance(b, BaseListVariable)):
        return None
    same_kind = issubclass(a.python_type(), tuple) == issubclass(b.python_type(), tuple)
    equal = same_kind and len(a.items) == len(b.items)
    for x, y in zip(a.items, b.items) if equal else ():
        r = compare(tx, operator.eq, x, y) if has_symbolic(x) or has_symbolic(y) else None
        if r is None:
            if not (x.is_python_constant() and y.is_python_constant()):
                return None
            r = ConstantVariable(x.as_python_constant() == y.as_python_constant())
        if not r.value:
            equal = False
            break
    return ConstantVariable(equal if fn is operator.eq else not equal)


def as_sequence(v):
    """A constant tuple (`(4, 3)`, a torch.Size) as a TupleVariable of constants."""
    if isinstance(v, ConstantVariable) and type(v.value) in (tuple, torch.Size):
        cls = SizeVariable if type(v.value) is torch.Size else TupleVariable
        return cls([ConstantVariable(i) for i in v.value])
    return v


def contains(tx, items, item):
    """`n in (a, b)` for a size: == against each item (facts), Python's semantics for ints."""
    for i in items:
        r = compare(tx, operator.eq, i, item)
        if r is None:
            return None
        if r.value:
            return ConstantVariable(True)
    return ConstantVariable(False)


def compare(tx, fn, a, b):
    """`a <cmp> b` of sizes: evaluated on the hints, recorded as a fact (a shape guard)."""
    if fn in (operator.is_, operator.is_not):
        return None
    if fn not in COMPARE_OPS:
        return None
    if not (isinstance(a, SymNodeVariable) or isinstance(b, SymNodeVariable)):
        return _compare_sequences(tx, fn, a, b)
    if not (is_int_like(a) and is_int_like(b)):
        if isinstance(a, ConstantVariable | SymNodeVariable) and isinstance(
            b, ConstantVariable | SymNodeVariable
        ):
            ca = a.evaluate() if isinstance(a, SymNodeVariable) else a.value
            cb = b.evaluate() if isinstance(b, SymNodeVariable) else b.value
            return ConstantVariable(fn(ca, cb))
        return None
    if _DEFERRED_FACTS:  # Note [Shapes: torch._check of an unbacked fact]
        deferred = _DEFERRED_FACTS[0](tx, fn, _value(a), _value(b))
        if deferred is not None:
            return deferred
    return ConstantVariable(bool(fn(_value(a), _value(b))))


# fn(tx, op, a, b) -> a variable for a comparison on unbacked values that torch._check will assert
# at run time, or None (registered by runtime_asserts.py)
_DEFERRED_FACTS = []


def register_deferred_facts(fn):
    _DEFERRED_FACTS[:] = [fn]


def unary(tx, fn, v):
    """-n, +n; anything else (abs, ~) on its concrete value."""
    if fn is operator.pos:
        return v
    if fn is operator.neg:
        node = tx.output.create_node("call_function", operator.neg, (v.proxy,), {})
        return SymNodeVariable.create(tx, node, -v.value)
    return ConstantVariable(fn(v.evaluate()))


def min_max(tx, fn, items):
    """`max(a, b, ...)` / `min(...)` of sizes without a guard (torch.sym_max / sym_min nodes)."""
    if not all(is_int_like(i) for i in items) or not items:
        return None
    target = torch.sym_max if fn is builtins.max else torch.sym_min
    pick = shape_env.sym_max if fn is builtins.max else shape_env.sym_min
    acc = items[0]
    for item in items[1:]:
        if isinstance(acc, ConstantVariable) and isinstance(item, ConstantVariable):
            acc = ConstantVariable(fn(acc.value, item.value))
            continue
        value = pick(_value(acc), _value(item))
        node = tx.output.create_node("call_function", target, (_arg(acc), _arg(item)), {})
        acc = SymNodeVariable.create(tx, node, value)
    return acc


class SliceVariable(VariableTracker):
    """`a:b:c` with a symbolic bound (`mask[:T, :T]`): unpacked into a tensor op's arguments."""

    def __init__(self, parts, **kw):
        super().__init__(**kw)
        self.parts = list(parts)

    def python_type(self):
        return slice

    def as_python_constant(self):
        return slice(*[p.as_python_constant() for p in self.parts])

    def fx_and_value(self):
        """(slice of FX arguments, slice of traced values for the fake run)."""
        fx = [
            p.proxy if isinstance(p, SymNodeVariable) else p.as_python_constant()
            for p in self.parts
        ]
        vals = [
            shape_env.to_torch(p.value)
            if isinstance(p, SymNodeVariable)
            else p.as_python_constant()
            for p in self.parts
        ]
        return slice(*fx), slice(*vals)

    def reconstruct(self, cg):
        for p in self.parts:
            cg.reconstruct(p)
        cg.extend(emit.build_slice(len(self.parts)))

    def __repr__(self):
        return f"SliceVariable({self.parts!r})"


def build_slice(parts):
    """BUILD_SLICE: a constant slice, or a SliceVariable when a bound is a symbolic size."""
    if any(isinstance(p, SymNodeVariable) for p in parts):
        return SliceVariable(parts)
    return ConstantVariable(slice(*[p.as_python_constant() for p in parts]))
