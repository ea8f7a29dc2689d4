"""Run-time assertions as graph operators: `kiln::assert_true` (a Python `assert` on a tensor)
and the facts of `torch._check` on values read from tensor data (`kiln::assert_scalar`).

Note [Asserts: operators every backend runs]
A check of tensor *values* cannot be answered while tracing (there are none), so a graph holds
it as an operator that checks when the graph runs, before anything after it can be seen:
  - `torch._assert_async(cond[, msg])` stays torch's own op (`aten._assert_async`), which raises
    RuntimeError as eagerly;
  - `assert t, "msg"` is `kiln::assert_true(t, "msg")`: it raises AssertionError("msg") (no
    argument without a message) when bool(t) is false, as Python's `assert` does;
  - `torch._check(u > 0)` on an unbacked value is `kiln::assert_scalar(cond, msg)` (RuntimeError).
The operators have no outputs. Dead-code elimination keeps them (`is_assert`), the partitioner
keeps them in the forward graph, the kiln backend runs them as extern calls in graph order (an
extern call is a barrier the scheduler keeps in place: nothing after it runs first), so a failing
check raises before a later output or mutation exists.
"""

import torch

_LIB = torch.library.Library("kiln", "FRAGMENT")
_LIB.define("assert_true(Tensor cond, str? msg) -> ()")
_LIB.define("assert_scalar(SymBool cond, str msg) -> ()")


def _assert_true(cond, msg):
    if not bool(cond):
        raise AssertionError(msg) if msg is not None else AssertionError()


def _assert_true_meta(cond, msg):
    return None


def _assert_scalar(cond, msg):
    if not cond:
        raise RuntimeError(msg)


_LIB.impl("assert_true", _assert_true, "CompositeExplicitAutograd")
_LIB.impl("assert_true", _assert_true_meta, "Meta")
_LIB.impl("assert_scalar", _assert_scalar, "CompositeExplicitAutograd")

assert_true = torch.ops.kiln.assert_true.default
assert_scalar = torch.ops.kiln.assert_scalar.default

_ASSERT_OPS = {
    assert_true,
    assert_scalar,
    torch.ops.aten._assert_async.default,
    torch.ops.aten._assert_async.msg,
    torch.ops.aten._assert_scalar.default,
    torch._assert_async,
}


def is_assert(target):
    """Whether a graph node's target is a run-time assertion (kept by dead-code elimination)."""
    return target in _ASSERT_OPS
