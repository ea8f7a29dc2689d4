"""Checks of tensor values kept in the graph as run-time assertions: `torch._assert_async` and
Python's `assert` on a tensor (Note [Asserts: operators every backend runs] in
kiln/symbolic/assert_ops.py)."""

import torch

from kiln.exc import unimplemented
from kiln.frontend.variables import torch as torch_vars
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.tensor import TensorVariable
from kiln.symbolic import assert_ops, shape_env


def _one_element(what, cond):
    """Break unless `cond` is a plain traced tensor of one element (eager raises otherwise)."""
    if not isinstance(cond, TensorVariable) or type(cond) is not TensorVariable:
        unimplemented(f"{what} of {cond}")
    if cond.wrapper_subclass or getattr(cond, "torch_function_class", None) is not None:
        unimplemented(f"{what} of a tensor subclass value")
    sizes = [shape_env.from_torch(s) for s in cond.example.shape]
    if any(isinstance(s, shape_env.SymNode) for s in sizes):
        unimplemented(f"{what} of a tensor with a symbolic size")
    numel = 1
    for s in sizes:
        numel *= s
    if numel != 1:
        unimplemented(f"{what} of a tensor of {numel} elements (eager raises)")


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
# message (an f-string of values) keeps the graph break.
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


def assert_statement(tx, cond, want):
    """Whether the conditional jump (taken when bool(cond) == want) guards an `assert` on a
    traced tensor: if so the assertion is in the graph and the caller takes the jump."""
    if not isinstance(cond, TensorVariable):
        return False
    msg, ok = _assert_message(tx.instructions, tx.ip)
    if not ok:
        return False
    _one_element("assert", cond)
    if not want:
        cond = torch_vars.call_tensor_op(tx, "call_function", torch.logical_not, [cond], {})
    _add_assert(tx, assert_ops.assert_true, (cond.proxy, msg))
    return True
