"""`SymNode`: the Python value of a symbolic size in traced code, and conversions between
SymNodes, torch SymInts and ints (the ShapeEnv that makes them is in shape_env.py)."""

import math
import operator

import sympy
import torch


def _expr(value):
    """The sympy expr of an int or a SymNode."""
    if isinstance(value, SymNode):
        return value.expr
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"not a size: {value!r}")
    return sympy.Integer(value)


def _binary(fn, pyfn):
    """A SymNode operator computing `fn` on exprs (`pyfn` on a specialised value with a float)."""

    def op(self, other):
        if isinstance(other, float):  # a float result is no size: specialise
            return pyfn(int(self), other)
        if not isinstance(other, SymNode | int) or isinstance(other, bool):
            return NotImplemented
        return self.env.wrap(fn(self.expr, _expr(other)))

    def rop(self, other):
        if isinstance(other, float):
            return pyfn(other, int(self))
        if not isinstance(other, SymNode | int) or isinstance(other, bool):
            return NotImplemented
        return self.env.wrap(fn(_expr(other), self.expr))

    return op, rop


def _compare(rel):
    """A SymNode comparison: evaluated on the hints and recorded as a guard."""

    def op(self, other):
        if not isinstance(other, SymNode | int) or isinstance(other, bool):
            return NotImplemented
        return self.env.evaluate(rel(self.expr, _expr(other)))

    return op


class SymNode:
    """A symbolic size in traced code: a sympy expr over size symbols, bound to its ShapeEnv.

    `kind` is "int" (a size; the Python operators below compute and compare it), "bool" (a fact
    made by torch's node protocol; `bool()` evaluates it with a guard) or "float". The lower-case
    methods are torch's SymNode protocol; see Note [Shapes: torch's SymNode protocol].
    """

    __slots__ = ("expr", "env", "kind")

    def __init__(self, expr, env, kind="int"):
        self.expr = expr
        self.env = env
        self.kind = kind

    __add__, __radd__ = _binary(operator.add, operator.add)
    __sub__, __rsub__ = _binary(operator.sub, operator.sub)
    __mul__, __rmul__ = _binary(operator.mul, operator.mul)
    __floordiv__, __rfloordiv__ = _binary(lambda a, b: sympy.floor(a / b), operator.floordiv)
    __mod__, __rmod__ = _binary(sympy.Mod, operator.mod)
    __eq__ = _compare(sympy.Eq)
    __ne__ = _compare(sympy.Ne)
    __lt__ = _compare(sympy.Lt)
    __le__ = _compare(sympy.Le)
    __gt__ = _compare(sympy.Gt)
    __ge__ = _compare(sympy.Ge)
    __hash__ = None  # like torch.SymInt: unhashable (hashing would silently specialise)

    def __neg__(self):
        return self.env.wrap(-self.expr)

    def __pos__(self):
        return self

    def __truediv__(self, other):
        """True division leaves sizes: specialise (a float result of a size is rare)."""
        return int(self) / (int(other) if isinstance(other, SymNode) else other)

    def __rtruediv__(self, other):
        return other / int(self)

    def __bool__(self):
        if self.kind == "bool":
            return self.guard_bool("", 0)
        return self.env.evaluate(sympy.Ne(self.expr, 0))

    def __pow__(self, other):
        if isinstance(other, int) and not isinstance(other, bool) and other >= 0:
            return self.env.wrap(self.expr**other)
        return int(self) ** (int(other) if isinstance(other, SymNode) else other)

    def __int__(self):
        if self.kind != "int":
            return int(self.guard_float("", 0) if self.kind == "float" else self.guard_bool("", 0))
        return self.env.specialize(self.expr)

    def __float__(self):
        return self.guard_float("", 0) if self.kind == "float" else float(int(self))

    __index__ = __int__

    @property
    def hint(self):
        """The value on the hints (no guard)."""
        value = self.env.hint(self.expr)
        if self.kind == "float":
            return float(value)
        return bool(value) if self.kind == "bool" else value

    def __repr__(self):
        return str(self.expr)

    # -- torch's SymNode protocol: kinds and constants ----------------------------------------
    @property
    def pytype(self):
        """The Python type this node stands for (int, bool or float)."""
        return {"int": int, "bool": bool, "float": float}[self.kind]

    @property
    def constant(self):
        """The value if the expr is a constant (torch unwraps such nodes), else None."""
        return self.maybe_as_bool() if self.kind == "bool" else self._number()

    def _number(self):
        if isinstance(self.expr, sympy.Number):
            return float(self.expr) if self.kind == "float" else int(self.expr)
        return None

    def is_int(self):
        return self.kind == "int"

    def is_bool(self):
        return self.kind == "bool"

    def is_float(self):
        return self.kind == "float"

    def is_nested_int(self):
        return False

    def nested_int(self):
        return None

    def is_symbolic(self):
        return True

    def is_constant(self):
        return self.constant is not None

    def has_hint(self):
        return not (self.env.unbacked and self.expr.free_symbols & self.env.unbacked)

    def maybe_as_int(self):
        return self._number() if self.kind == "int" else None

    def maybe_as_float(self):
        return self._number() if self.kind == "float" else None

    def maybe_as_bool(self):
        if self.expr is sympy.true or self.expr is sympy.false:
            return bool(self.expr)
        return None

    def _new(self, expr, kind):
        """A node of this env (kept a node even when constant: torch unwraps constants)."""
        expr = sympy.sympify(expr)
        if kind != "float":
            expr = self.env.simplify(expr)
        else:
            expr = exact_floats(expr)
        if isinstance(expr, sympy.logic.boolalg.BooleanAtom):
            kind = "bool"
        return SymNode(expr, self.env, kind)

    def wrap_int(self, num):
        return SymNode(sympy.Integer(num), self.env, "int")

    def wrap_bool(self, num):
        return SymNode(sympy.true if num else sympy.false, self.env, "bool")

    def wrap_float(self, num):
        return SymNode(exact_floats(sympy.Float(num)), self.env, "float")

    def clone(self):
        return self

    def str(self):
        return str(self.expr)

    def __str__(self):
        return str(self.expr)

    def _graph_repr(self):
        return str(self.expr)

    # -- torch's SymNode protocol: arithmetic -------------------------------------------------
    def _arith(self, other, fn, kind=None):
        kind = kind or ("float" if "float" in (self.kind, other.kind) else "int")
        return self._new(fn(_as_number(self), _as_number(other)), kind)

    def add(self, other):
        return self._arith(other, operator.add)

    def sub(self, other):
        return self._arith(other, operator.sub)

    def mul(self, other):
        return self._arith(other, operator.mul)

    def mod(self, other):
        if "float" in (self.kind, other.kind):
            return self.wrap_float(float(self.guard_float("", 0)) % other.guard_float("", 0))
        return self._arith(other, sympy.Mod)

    def floordiv(self, other):
        if "float" in (self.kind, other.kind):  # Python's float floordiv: specialise
            return self.wrap_float(float(self.guard_float("", 0) // other.guard_float("", 0)))
        return self._arith(other, lambda a, b: sympy.floor(a / b))

    int_floordiv = floordiv

    def truediv(self, other):
        return self._arith(other, lambda a, b: a / b, "float")

    int_truediv = float_truediv = truediv

    def pow(self, other):
        if other.kind == "int" and self.kind == "int" and other.guard_int("", 0) >= 0:
            return self._arith(other, operator.pow)
        return self._arith(other, operator.pow, "float")

    pow_by_natural = float_pow = pow

    def neg(self):
        return self._new(-_as_number(self), self.kind)

    def pos(self):
        return self

    def abs(self):
        return self._new(sympy.Abs(_as_number(self)), self.kind)

    def sym_min(self, other):
        return self._arith(other, sympy.Min)

    def sym_max(self, other):
        return self._arith(other, sympy.Max)

    def sym_float(self):
        return self._new(_as_number(self), "float")

    def _to_int(self, fn, rounding=None):
        """An int from a float: symbolic when the float is an exact rational of sizes."""
        if self.kind == "int":
            return self
        if rounding is not None and self.expr.free_symbols and not self.expr.has(sympy.Float):
            return self._new(rounding(self.expr), "int")  # Note [Shapes: float sizes]
        return self.wrap_int(int(fn(self.guard_float("", 0))))  # a float: specialise

    def ceil(self):
        return self._to_int(math.ceil, sympy.ceiling)

    def floor(self):
        return self._to_int(math.floor, sympy.floor)

    def _trunc_rounding(self):
        """floor for a float known nonnegative (trunc == floor there), else None (specialise)."""
        nonneg = self.env.static_value(sympy.Ge(self.expr, 0)) if self.kind == "float" else None
        return sympy.floor if nonneg else None

    def trunc(self):
        return self._to_int(math.trunc, self._trunc_rounding())

    def sym_int(self):
        return self._to_int(math.trunc, self._trunc_rounding())

    def round(self, ndigits=None):
        value = round(self.guard_float("", 0), ndigits)
        return self.wrap_int(value) if ndigits is None else self.wrap_float(value)

    def is_integer(self):
        return self.wrap_bool(float(self.guard_float("", 0)).is_integer())

    # -- torch's SymNode protocol: facts --------------------------------------------------------
    def _rel(self, other, rel):
        if "float" in (self.kind, other.kind):  # facts over floats: specialise, then compare
            a, b = self.guard_float("", 0), other.guard_float("", 0)
            return self.wrap_bool(bool(rel(sympy.Float(a), sympy.Float(b))))
        return self._new(rel(_as_number(self), _as_number(other)), "bool")

    def eq(self, other):
        return self._rel(other, sympy.Eq)

    def ne(self, other):
        return self._rel(other, sympy.Ne)

    def lt(self, other):
        return self._rel(other, sympy.Lt)

    def le(self, other):
        return self._rel(other, sympy.Le)

    def gt(self, other):
        return self._rel(other, sympy.Gt)

    def ge(self, other):
        return self._rel(other, sympy.Ge)

    def sym_and(self, other):
        return self._new(sympy.And(self.expr, other.expr), "bool")

    def sym_or(self, other):
        return self._new(sympy.Or(self.expr, other.expr), "bool")

    and_, or_ = sym_and, sym_or

    def sym_not(self):
        return self._new(sympy.Not(self.expr), "bool")

    def sym_ite(self, then_node, else_node):
        return then_node if self.guard_bool("", 0) else else_node

    def is_contiguous(self, sizes, strides):
        return self.wrap_bool(_is_contiguous(sizes, strides))

    def is_channels_last_contiguous_2d(self, sizes, strides):
        return self.wrap_bool(_is_contiguous(sizes, strides, (1, 3, 2, 0)))

    def is_channels_last_contiguous_3d(self, sizes, strides):
        return self.wrap_bool(_is_contiguous(sizes, strides, (1, 4, 3, 2, 0)))

    def is_channels_last_strides_2d(self, sizes, strides):
        return self.wrap_bool(len(sizes) == 4 and _is_contiguous(sizes, strides, (1, 3, 2, 0)))

    def is_channels_last_strides_3d(self, sizes, strides):
        return self.wrap_bool(len(sizes) == 5 and _is_contiguous(sizes, strides, (1, 4, 3, 2, 0)))

    def is_non_overlapping_and_dense_indicator(self, sizes, strides):
        return self.wrap_int(int(_is_dense(sizes, strides)))

    def is_non_overlapping_and_dense(self, sizes, strides):
        return self.wrap_bool(_is_dense(sizes, strides))

    # -- torch's SymNode protocol: guards -------------------------------------------------------
    def guard_int(self, file, line):
        if self.kind == "float":
            return int(self.guard_float(file, line))
        if self.kind == "bool":
            return int(self.guard_bool(file, line))
        return self.env.specialize(self.expr)

    def guard_float(self, file, line):
        """A float's value; its size symbols are specialised (float facts are not rendered)."""
        for sym in sorted(self.expr.free_symbols, key=str):
            self.env.specialize(sym)
        return float(self.env.hint(self.env.simplify(self.expr)))

    def guard_bool(self, file, line):
        if self.kind != "bool":
            return bool(self.guard_int(file, line))
        if self.expr is sympy.true or self.expr is sympy.false:
            return bool(self.expr)
        return self.env.evaluate(self.expr)

    def expect_true(self, file, line):
        return self.guard_bool(file, line)

    def expect_size(self, file, line):
        return self.ge(self.wrap_int(0)).expect_true(file, line)

    def guard_size_oblivious(self, file, line):
        return self.guard_bool(file, line)  # our symbols are >= 2: static_value is size-oblivious

    def _static(self):
        if self.kind != "bool":
            return None
        return self.env.static_value(self.expr)

    def guard_or_false(self, file, line):
        """The static truth of the fact, else False without a guard (torch's definition)."""
        static = self._static()
        return False if static is None else static

    def guard_or_true(self, file, line):
        """The static truth of the fact, else True without a guard (torch's definition)."""
        static = self._static()
        return True if static is None else static

    def statically_known_true(self, file, line):
        return self._static() is True

    def int_(self):
        return self.guard_int("", 0)

    def bool_(self):
        return self.guard_bool("", 0)


# Note [Shapes: torch's SymNode protocol]
# torch.SymInt(node) / SymBool / SymFloat carry any Python object as `node`; torch's C++ (composite
# ops, view and autograd formulas, the wrapper-subclass constructor) and the Python SymInt magic
# methods call the node's protocol: `add`, `eq` (a bool-kind node), `guard_bool`, `wrap_int`... Our
# SymNode implements it on sympy exprs, so a ProxyTensor's SymInt sizes flow through torch intact.
# Every concrete answer torch asks for (`guard_*`, `expect_true`, `int_`, `bool_`) goes through
# ShapeEnv.evaluate/specialize and is a shape guard; `guard_or_false/true` and
# `statically_known_true` answer from the static facts only (no guard), as torch defines them.
# Floats never become guards: a fact or value over a float specialises its size symbols.


# Note [Shapes: float sizes]
# A float computed from sizes (`1.0 / n`, `n / (n - 1)`, `s * 1.5`) is a float-kind SymNode. A
# float constant that is a small dyadic rational (p / q, both < 2**20: 2.0, 1.5, 0.25 ...) is
# made that exact sympy Rational, since its products with sizes are exact in a double; the
# expression is then an exact rational function of the sizes: `floor`/`ceil` of it are exact
# int size expressions (`floor(s*3/2)`), no guard, and a graph can compute the float itself with
# one correctly rounded division (Note [Tracer: float sizes]). Another float constant (0.1)
# stays a sympy Float: rounding it would not be exact, so it specialises, as before.
EXACT_FLOAT_LIMIT = 2**20


def exact_floats(expr):
    """`expr` with each float constant that is a small dyadic rational made that Rational."""

    def exact(f):
        p, q = float(f).as_integer_ratio()
        ok = abs(p) < EXACT_FLOAT_LIMIT and q < EXACT_FLOAT_LIMIT
        return sympy.Rational(p, q) if ok else f

    floats = expr.atoms(sympy.Float)
    return expr.xreplace({f: exact(f) for f in floats}) if floats else expr


def _as_number(node):
    return node.expr


def _is_contiguous(sizes, strides, order=None):
    """Whether sizes/strides (nodes) are dense in `order` (innermost first; None: row-major)."""
    if order is not None and len(order) != len(sizes):
        return False
    order = order or tuple(reversed(range(len(sizes))))
    expected = 1
    for d in order:
        size, stride = from_torch(_node_value(sizes[d])), from_torch(_node_value(strides[d]))
        if size == 1:
            continue
        if size == 0:
            return True
        if not stride == expected:
            return False
        expected = expected * size
    return True


def _is_dense(sizes, strides):
    """Non-overlapping and dense: contiguous in the order of the strides' hints."""
    values = [from_torch(_node_value(s)) for s in strides]
    order = sorted(range(len(sizes)), key=lambda d: hint_of(values[d]))
    return _is_contiguous(sizes, strides, tuple(order))


def _node_value(x):
    """A protocol argument (our SymNode or torch's constant node) as int or SymNode."""
    if isinstance(x, SymNode):
        return x.constant if x.is_constant() else x
    if hasattr(x, "maybe_as_int"):
        return x.maybe_as_int()
    return x


def to_torch(v):
    """An int, or a SymNode as torch.SymInt / SymBool / SymFloat (for torch's C++)."""
    if not isinstance(v, SymNode):
        return v
    if v.is_constant():
        return v.constant
    return {"int": torch.SymInt, "bool": torch.SymBool, "float": torch.SymFloat}[v.kind](v)


def from_torch(v):
    """A torch.SymInt/SymBool/SymFloat carrying our SymNode as that SymNode (constants as values)."""
    if isinstance(v, torch.SymInt | torch.SymBool | torch.SymFloat):
        node = v.node
        if isinstance(node, SymNode):
            return node.constant if node.is_constant() else node
        const = node.maybe_as_int() if hasattr(node, "maybe_as_int") else None
        if const is None:
            raise TypeError(f"a symbolic value not made by kiln: {v!r}")
        return const
    return v


def sym_max(a, b):
    """max of two sizes without a guard."""
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    env = (a if isinstance(a, SymNode) else b).env
    return env.wrap(sympy.Max(_expr(a), _expr(b)))


def sym_min(a, b):
    """min of two sizes without a guard."""
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    env = (a if isinstance(a, SymNode) else b).env
    return env.wrap(sympy.Min(_expr(a), _expr(b)))


def is_symbolic(value):
    """Whether `value` is a symbolic size."""
    return isinstance(value, SymNode)


def hint_of(value):
    """The concrete value of an int or SymNode (no guard)."""
    if not isinstance(value, SymNode):
        return value
    return value.hint if value.has_hint() else value.env.fallback_hint(value.expr)


def contiguous_strides(sizes):
    """Row-major strides for `sizes` (ints or SymNodes), as torch computes them."""
    strides = []
    acc = 1
    for s in reversed(sizes):
        strides.append(acc)
        acc = acc * (s if isinstance(s, SymNode) else max(s, 1))
    return tuple(reversed(strides))
