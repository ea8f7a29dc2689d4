"""Checks of tensor values kept in the graph as run-time assertions: `torch._assert_async`,
`torch._assert`, Python's `assert` on a tensor (Note [Asserts: operators every backend runs] in
kiln/symbolic/assert_ops.py) and `torch._check` of values read from tensor data."""

import builtins
import operator

import sympy
import torch

from kiln.exc import DataDependentError, unimplemented
from kiln.frontend.variables import sym
from kiln.frontend.variables import torch as torch_vars
from kiln.frontend.variables.base import VariableTracker
from kiln.frontend.variables.constant import ConstantVariable, is_literal
from kiln.frontend.variables.exceptions import raise_observed
from kiln.frontend.variables.sym import SymNodeVariable
from kiln.frontend.variables.tensor import TensorVariable
from kiln.symbolic import assert_ops, shape_env


def _not_one_element(cond):
    """Why `cond` is not a plain traced tensor of one element, or None when it is."""
    if not isinstance(cond, TensorVariable) or type(cond) is not TensorVariable:
        return str(cond)
    if cond.wrapper_subclass or getattr(cond, "torch_function_class", None) is not None:
        return "a tensor subclass value"
    sizes = [shape_env.from_torch(s) for s in cond.example.shape]
    if any(isinstance(s, shape_env.SymNode) for s in sizes):
        return "a tensor with a symbolic size"
    numel = 1
    for s in sizes:
        numel *= s
    return None if numel == 1 else f"a tensor of {numel} elements (eager raises)"


def _one_element(what, cond):
    """Break unless `cond` is a plain traced tensor of one element (eager raises otherwise)."""
    why = _not_one_element(cond)
    if why is not None:
        unimplemented(f"{what} of {why}")


def _add_assert(tx, target, args):
    node = tx.output.create_node("call_function", target, args, {})
    node.meta["example_value"] = None
    return ConstantVariable(None)


def assert_async(tx, fn, args, kwargs):
    """`torch._assert_async(cond[, msg])`: torch's op, kept in the graph (it raises
    RuntimeError when the graph runs and cond is zero)."""
    msg = kwargs.pop("assert_msg", None) if len(args) == 1 else None
    if msg is not None:
        args = [*args, msg]
    if kwargs or len(args) not in (1, 2):
        unimplemented("torch._assert_async with unexpected arguments")
    _one_element("torch._assert_async", args[0])
    node_args = [args[0].proxy]
    if len(args) == 2:
        if not args[1].is_python_constant() or not isinstance(args[1].as_python_constant(), str):
            unimplemented("torch._assert_async with a message that is not a constant string")
        node_args.append(args[1].as_python_constant())
    return _add_assert(tx, torch._assert_async, tuple(node_args))


torch_vars.register_function(torch._assert_async, assert_async)


# Note [Asserts: a Python assert on a tensor]
# `assert t, "msg"` compiles to a jump over `raise AssertionError("msg")` taken when bool(t) is
# true. With t a traced one-element tensor and the message a constant (or none), the jump is
# traced as taken and the graph gets `kiln::assert_true(t, "msg")`, which raises that
# AssertionError when the graph runs and bool(t) is false; `assert not t` checks
# `logical_not(t)` (bool() of one element is `!= 0`, NaN true, as logical_not has it). Any other
# message (an f-string of values) keeps the graph break ("assert with non-string message").
def _assert_message(insts, i):
    """The message of the `raise AssertionError(...)` starting at insts[i]: (msg or None,
    True) when it is an assert's constant message (or none), else (None, False)."""
    names = [inst.opname for inst in insts[i : i + 5]]
    if names[:1] != ["LOAD_ASSERTION_ERROR"]:
        return None, False
    if names[1:2] == ["RAISE_VARARGS"] and insts[i + 1].arg == 1:
        return None, True
    const = insts[i + 1] if len(insts) > i + 1 else None
    if const is None or const.opname != "LOAD_CONST" or not isinstance(const.argval, str):
        return None, False
    rest = [n for n in names[2:] if n != "PRECALL"]
    if rest[:2] != ["CALL", "RAISE_VARARGS"]:
        return None, False
    return const.argval, True


def checked_branch(tx, cond, want, target):
    """A conditional jump on a traced tensor, taken when bool(cond) == want, to instruction
    `target` (else on to tx.ip): True (take it) or False (go on) when the branch is a check kept
    in the graph (an `assert`: Note [Asserts: a Python assert on a tensor]; a side that only
    raises: Note [Asserts: a branch that only raises]), else None (bool() of tensor data)."""
    if not isinstance(cond, TensorVariable):
        return None
    if _in_graph(tx, cond, want, tx.ip):
        return True
    return _raising_side_checked(tx, cond, want, tx.ip, target)


def assert_after_to_bool(tx, cond):
    """3.13's `TO_BOOL` of a traced tensor right before a check's jump (see checked_branch): the
    check in the graph and the bool that sends the jump the checked way, else None."""
    insts, i = tx.instructions, tx.ip
    if not isinstance(cond, TensorVariable) or i >= len(insts):
        return None
    if insts[i].opname not in ("POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE"):
        return None
    want = insts[i].opname == "POP_JUMP_IF_TRUE"
    if _in_graph(tx, cond, want, i + 1):
        return want
    taken = _raising_side_checked(tx, cond, want, i + 1, insts[i].target_index)
    return None if taken is None else want == taken


def _in_graph(tx, cond, want, raise_at):
    msg, ok = _assert_message(tx.instructions, raise_at)
    if not ok:
        insts = tx.instructions
        if raise_at < len(insts) and insts[raise_at].opname == "LOAD_ASSERTION_ERROR":
            if _checkable_branch(tx, cond):  # (the raising side, rerun: checked_branch)
                return False
            unimplemented(
                "assert with non-string message: bool() of a tensor reads tensor data, and the "
                "message is made only when the assert fails"
            )
        return False
    _one_element("assert", cond)
    _assert_true(tx, cond, want, msg)
    return True


def _assert_true(tx, cond, want, msg):
    """`kiln::assert_true(bool(cond) == want, msg)` in the graph."""
    if not want:
        cond = torch_vars.call_tensor_op(tx, "call_function", torch.logical_not, [cond], {})
    _add_assert(tx, assert_ops.assert_true, (cond.proxy, msg))


# Note [Asserts: a branch that only raises]
# `if not torch._is_all_true(valid): raise ValueError(f"... {value}")` (torch.distributions'
# argument checks), `if (x < 0).any(): raise ValueError(...)`: a branch on tensor data whose one
# side runs straight into a `raise` (no jump, return or yield on the way). That side is the
# exceptional one: the trace takes the other, and the graph gets `kiln::assert_true` of the
# condition at the branch. When it fails at run time, the compiled code has had no effect yet
# (the graph writes nothing and draws nothing; it is called before any replayed side effect), so
# the entry marked `rerun_on_error` runs the whole frame again in Python, which takes the raising
# side and raises eager's own error, message and all (Note [Blocks: ops inside try blocks] has
# the mechanism). Where the frame cannot run again (a graph with effects traces again without
# reruns; a generator; a closure compiled by its code), the branch stays a graph break.
# (torch.compile turns torch.distributions' checks off globally instead, in eager code too.)
_RERUN_MESSAGE = (
    "kiln: a check of tensor values failed in the compiled code; the call runs again in Python "
    "(Note [Asserts: a branch that only raises])"
)
_LEAVES = {"RETURN_VALUE", "RETURN_CONST", "YIELD_VALUE", "FOR_ITER", "SEND", "RERAISE"}


def _only_raises(insts, i):
    """Whether the instructions from insts[i] run straight into a `raise X` (no jump, return or
    yield before it)."""
    for inst in insts[i : i + 256]:
        name = inst.opname
        if name == "RAISE_VARARGS":
            return inst.arg >= 1
        if "JUMP" in name or name in _LEAVES:
            return False
    return False


def _checkable_branch(tx, cond):
    """Whether a branch on `cond` can be a check with a rerun: a plain one-element tensor, a
    frame that can run again."""
    return tx.output.eager_rerun_ok and _not_one_element(cond) is None


def _raising_side_checked(tx, cond, want, fall_through, target):
    """The direction of a jump whose one side only raises, the check of the other in the graph
    (Note [Asserts: a branch that only raises]); None where it is no such branch."""
    insts = tx.instructions
    raises_after, raises_at_target = _only_raises(insts, fall_through), _only_raises(insts, target)
    if raises_after == raises_at_target or not _checkable_branch(tx, cond):
        return None
    take = raises_after  # the side that does not raise
    _assert_true(tx, cond, want if take else not want, _RERUN_MESSAGE)
    tx.output.rerun_on_error = True
    return take


# Note [Shapes: torch._check of an unbacked fact]
# `torch._check(u > 0)` with u read from tensor data (`.item()`, an unbacked symbol) cannot be
# answered while tracing. When the comparison is the one argument of a `torch._check` call being
# made (the function below it on the stack, a one-argument call next) and its fact is made of
# such symbols, integers, + and *, the comparison is a CheckedFactVariable instead of a graph
# break. The call then puts the check in the graph on the values themselves (the `.item()`
# nodes, so a later in-place write to their tensor changes nothing),
#     sub = item - 1;  ge = sub >= 0;  kiln.assert_scalar(ge, "<eager's message>")
# (RuntimeError with eager's text when false), and records the fact in the shape environment
# (ShapeEnv.assume): later questions it decides are static (Note [Shapes: checked facts on
# unbacked symbols]). Any other use of such a comparison is the data-dependent graph break it
# was. (The AOT backends do not trace `.item()` yet: such a graph runs as the frontend made it.)
_EAGER_CHECK_MESSAGE = (
    "Expected cond to be True, but got False. (Could this error message be improved? If so, "
    "please report an enhancement request to PyTorch.)"
)
_RELATIONS = {
    sympy.Ge: operator.ge,
    sympy.Gt: operator.gt,
    sympy.Le: operator.le,
    sympy.Lt: operator.lt,
    sympy.Eq: operator.eq,
    sympy.Ne: operator.ne,
}


class CheckedFactVariable(VariableTracker):
    """A comparison of unbacked values on its way into torch._check (see the note); `facts`: the
    conjuncts when several were joined by `&` (torch's sym_and)."""

    def __init__(self, fact, facts=None, **kw):
        super().__init__(**kw)
        self.fact = fact
        self.facts = facts or (fact,)

    def fact_and(self, a, b):
        """`a & b` with a checked fact on either side (sym_and's operator.and_), else None."""
        facts = []
        for v in (a, b):
            if isinstance(v, CheckedFactVariable):
                facts.extend(v.facts)
            elif isinstance(v, ConstantVariable) and type(v.value) is bool:
                if not v.value:
                    return ConstantVariable(False)  # (torch._check(False) raises, as eagerly)
            else:
                return None
        return CheckedFactVariable(sympy.And(*facts), tuple(facts))

    def python_type(self):
        return bool

    def truthy(self, tx):
        raise DataDependentError(f"data-dependent: {self.fact} needs a value read from tensor data")

    def reconstruct(self, cg):
        unimplemented(f"data-dependent: {self.fact} live at a graph break")


def _translatable(expr, sources):
    if expr.is_Integer:
        return True
    if expr.is_Symbol:
        return expr in sources
    if isinstance(expr, (sympy.Add, sympy.Mul)):
        return all(_translatable(a, sources) for a in expr.args)
    if isinstance(expr, sympy.floor):  # `a // k`: floor((a)/k) with a positive integer k
        num, den = sympy.fraction(sympy.together(expr.args[0]))
        return den.is_Integer and den > 0 and _translatable(sympy.expand(num), sources)
    return False


class _SymbolNodes:
    """The FX values of a fact's symbols: a `.item()` node, or for a size symbol of an input
    (`x.size()[0]`, an int input) the graph's `x.size(0)` node or the int's placeholder, made
    when first asked for (a fact mixing both: `torch._check(u0 == x.size(0) + y.size(0))`)."""

    def __init__(self, tx):
        self.tx = tx
        self.items = tx.output.__dict__.get("item_nodes", {})

    def __contains__(self, sym):
        return sym in self.items or self._input_of(sym) is not None

    def __getitem__(self, sym):
        if sym in self.items:
            return self.items[sym]
        var, dim = self._input_of(sym)
        if dim is None:
            return var.proxy
        return var.call_method(self.tx, "size", [ConstantVariable(dim)], {}).proxy

    def _input_of(self, sym):
        """(variable, dim) of the input a backed symbol is the size of ((variable, None): an int
        input's own symbol), or None."""
        output = self.tx.output
        text = output.shape_env.var_to_source.get(sym)
        if text is None or sym in output.shape_env.replacements:
            return None
        name, dim = text, None
        if text.endswith("]") and ".size()[" in text:
            name, _, rest = text.rpartition(".size()[")
            dim = int(rest[:-1])
        for source, value, node in output.graph_inputs:
            if source.name() != name:
                continue
            if dim is None:
                var = SymNodeVariable(node, shape_env.from_torch(node.meta["example_value"]))
                return (var, None) if isinstance(value, int) else None
            known = output._input_by_id.get(id(value))
            return None if known is None else (known[0], dim)
        return None


def _checkable(tx, fact):
    """(lhs - rhs, sources) when the fact can be checked as tensor ops, else None."""
    sources = _SymbolNodes(tx)
    if type(fact) not in _RELATIONS:
        return None
    diff = sympy.expand(fact.lhs - fact.rhs)
    if not diff.free_symbols or not _translatable(diff, sources):
        return None
    return diff, sources


def _as_node(tx, expr, sources):
    """The FX argument (a node or an int) computing a translatable expr from `.item()` nodes."""
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        return sources[expr]
    if isinstance(expr, sympy.floor):
        num, den = sympy.fraction(sympy.together(expr.args[0]))
        num = _as_node(tx, sympy.expand(num), sources)
        return tx.output.create_node("call_function", operator.floordiv, (num, int(den)), {})
    fn = operator.add if isinstance(expr, sympy.Add) else operator.mul
    parts = sorted(expr.args, key=lambda a: a.is_Integer)  # (a symbol first)
    acc = _as_node(tx, parts[0], sources)
    for a in parts[1:]:
        acc = tx.output.create_node("call_function", fn, (acc, _as_node(tx, a, sources)), {})
    return acc


def _feeds_check(tx):
    """Whether the value being computed is the one argument of a torch._check call."""
    # (3.11/3.12 keep the NULL below the callable, 3.13 above it)
    top = tx.stack[-2:]
    if top and type(top[-1]).__name__ == "NullVariable":
        top = top[:-1]
    if not (top and _is_check(top[-1])):
        # an argument of a call inside the check's argument: torch._check(sym_and(u0 >= 3, ...))
        return any(_is_check(v) for v in tx.stack[:-2])
    insts = tx.instructions
    nxt = insts[tx.ip] if tx.ip < len(insts) else None
    return nxt is not None and nxt.opname in ("PRECALL", "CALL") and nxt.arg == 1


def _is_check(v):
    return getattr(v, "value", None) is torch._check and type(v).__name__ == "TorchVariable"


_RELATION_OF = {
    operator.ge: sympy.Ge,
    operator.gt: sympy.Gt,
    operator.le: sympy.Le,
    operator.lt: sympy.Lt,
    operator.eq: sympy.Eq,
    operator.ne: sympy.Ne,
}


def _deferred_fact(tx, fn, a, b):
    """`a <fn> b` (SymNodes or ints) as a CheckedFactVariable when it is torch._check's argument
    and needs unbacked values; else None."""
    nodes = [v for v in (a, b) if isinstance(v, shape_env.SymNode)]
    if not nodes or fn not in _RELATION_OF or any(n.kind != "int" for n in nodes):
        return None
    env = nodes[0].env
    if not env.unbacked or not _feeds_check(tx):
        return None
    exprs = [v.expr if isinstance(v, shape_env.SymNode) else sympy.Integer(v) for v in (a, b)]
    fact = env.simplify(_RELATION_OF[fn](*exprs))
    if not isinstance(fact, tuple(_RELATIONS)) or not (fact.free_symbols & env.unbacked):
        return None
    if env.static_value(fact) is not None or _checkable(tx, fact) is None:
        return None
    return CheckedFactVariable(fact)


sym.register_deferred_facts(_deferred_fact)


def _assert_fact(tx, fact, message=_EAGER_CHECK_MESSAGE):
    diff, sources = _checkable(tx, fact)
    value = _as_node(tx, diff, sources)
    cond = tx.output.create_node("call_function", _RELATIONS[type(fact)], (value, 0), {})
    _add_assert(tx, assert_ops.assert_scalar, (cond, message))
    tx.output.shape_env.assume(fact)
    return ConstantVariable(None)


def assert_nonnegative_size(tx, expr, message):
    """`expr >= 0` for a size made of `.item()` values: asserted at run time (RuntimeError with
    `message`) and assumed, where it does not follow already; False where it cannot be checked
    as tensor ops (Note [Shapes: a factory's size read from tensor data])."""
    env = tx.output.shape_env
    fact = env.simplify(sympy.Ge(expr, 0))
    if env.static_value(fact) is True:
        return True
    if not isinstance(fact, tuple(_RELATIONS)) or _checkable(tx, fact) is None:
        return False
    _assert_fact(tx, fact, message)
    return True


def _check(tx, fn, args, kwargs):
    """`torch._check(<a CheckedFactVariable>)`: the fact asserted at run time and assumed."""
    if len(args) == 1 and not kwargs and isinstance(args[0], CheckedFactVariable):
        for fact in args[0].facts:
            _assert_fact(tx, fact)
        return ConstantVariable(None)
    return None


torch_vars.register_function(torch._check, _check)


def _check_is_size(tx, fn, args, kwargs):
    """`torch._check_is_size(u[, max=m])` of a value read from tensor data: eager's
    `torch._check(u >= 0)` (and `u <= m`), asserted at run time and assumed."""
    if len(args) != 1 or set(kwargs) - {"max"} or not isinstance(args[0], sym.SymNodeVariable):
        return None  # (an int: torch's own function, traced as written)
    bound = kwargs.get("max")
    if bound is not None and not bound.is_python_constant():
        return None
    value = args[0].value
    env = value.env
    facts = [sympy.Ge(value.expr, 0)]
    if bound is not None and bound.as_python_constant() is not None:
        facts.append(sympy.Le(value.expr, bound.as_python_constant()))
    facts = [env.simplify(f) for f in facts]
    if any(env.static_value(f) is False for f in facts):
        return None
    pending = [f for f in facts if env.static_value(f) is not True]
    if any(not isinstance(f, tuple(_RELATIONS)) or _checkable(tx, f) is None for f in pending):
        return None
    for fact in pending:
        _assert_fact(tx, fact)
    return ConstantVariable(None)


torch_vars.register_function(torch._check_is_size, _check_is_size)


def _sym_min_max(builtin):
    """`torch.sym_max(a, b)` / `torch.sym_min`: as builtin max/min of ints and sizes, no guard."""

    def call(tx, fn, args, kwargs):
        if kwargs or len(args) != 2:
            return None
        return sym.min_max(tx, builtin, list(args))

    return call


torch_vars.register_function(torch.sym_max, _sym_min_max(builtins.max))
torch_vars.register_function(torch.sym_min, _sym_min_max(builtins.min))


# Note [Asserts: torch._assert]
# `torch._assert(cond, msg)` is Python's `assert cond, msg` (for a cond without
# __torch_function__). A cond known while tracing (a bool of sizes, guarded as any branch is)
# folds: nothing when true, AssertionError(msg) raised in the traced code when false. A traced
# one-element tensor is `kiln::assert_true(cond, msg)` in the graph, as a Python assert on it
# (Note [Asserts: a Python assert on a tensor]); its message must then be a constant string.
def _torch_assert(tx, fn, args, kwargs):
    """`torch._assert(condition, message)` (Note [Asserts: torch._assert])."""
    names = ("condition", "message")
    if len(args) + len(kwargs) != 2 or set(kwargs) - set(names[len(args) :]):
        return None  # (torch's own TypeError: the call as it is)
    cond, msg = [*args, *(kwargs[n] for n in names[len(args) :])]
    text = msg.as_python_constant() if msg.is_python_constant() else None
    if isinstance(cond, TensorVariable):
        if not isinstance(text, str):
            unimplemented("torch._assert on a tensor with a message that is not a constant string")
        _one_element("torch._assert", cond)
        return _add_assert(tx, assert_ops.assert_true, (cond.proxy, text))
    if cond.truthy(tx):
        return ConstantVariable(None)
    if text is None or not is_literal(text):
        unimplemented("torch._assert failing with a message that is not a constant")
    raise_observed(tx, AssertionError, text)


torch_vars.register_function(torch._assert, _torch_assert)
