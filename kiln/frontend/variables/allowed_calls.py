"""Calls of what `kiln.allow_in_graph` marked: one opaque call in the graph.

Note [allow_in_graph: one opaque call]
`kiln.allow_in_graph(fn)` (or on a torch.autograd.Function class) is the user's word that fn is
tensor code safe to run as a unit: a call to it is not traced but recorded as ONE call_function
node whose target is fn itself (for a Function class, a function calling `MyFn.apply`), run at
run time with the graph's values. Its output metadata comes from running it once at trace time
on the meta examples of its arguments (as Dynamo runs it on fakes), under the frame's grad mode,
so a Function's outputs require grad as eager's do. So fn must run on meta tensors: code that
reads tensor data, or fails there, is a graph break with the meta run's error as reason (the call
then runs in Python); so are arguments other than tensors, constants and lists/tuples of those,
results other than tensors (and constants beside them), a result that is an argument itself
(identity or in place: kiln would not know the input changed) and frames with symbolic sizes
(the meta run could specialise a size kiln does not guard). A plain function called without any
tensor argument is traced as before (nothing for the graph to run it on).
"""

from kiln.exc import unimplemented
from kiln.frontend.variables.constant import ConstantVariable, is_literal
from kiln.frontend.variables.lists import BaseListVariable


def _tensor_cls():
    from kiln.frontend.variables.tensor import TensorVariable

    return TensorVariable


def _argument_ok(v):
    if isinstance(v, _tensor_cls()):
        return True
    if isinstance(v, ConstantVariable) or (
        v.is_python_constant() and is_literal(v.as_python_constant())
    ):
        return True
    if isinstance(v, BaseListVariable) and v.python_type() in (list, tuple):
        return all(_argument_ok(i) for i in v.items)
    return False


def _has_tensor(v):
    if isinstance(v, _tensor_cls()):
        return True
    return isinstance(v, BaseListVariable) and any(_has_tensor(i) for i in v.items)


def allowed_call(
    tx, target, args, kwargs, name, *, inline_without_tensors=False, what="allow_in_graph"
):
    """The opaque node `target(*args, **kwargs)` (Note [allow_in_graph: one opaque call]); None
    where a plain function is to be traced as before (no tensor argument). `what` names the
    mark in break reasons."""
    from kiln.frontend.variables.torch import call_tensor_op

    values = [*args, *kwargs.values()]
    if inline_without_tensors and not any(_has_tensor(v) for v in values):
        return None
    for v in values:
        if not _argument_ok(v):
            unimplemented(f"{what} {name} called with {v} (tensors and constants only)")
    if tx.output.fake_inputs and not getattr(target, "_kiln_nonstrict_body", False):
        unimplemented(f"{what} {name} in a frame with symbolic sizes")
    result = call_tensor_op(tx, "call_function", target, list(args), dict(kwargs), what=name)
    items = result.items if isinstance(result, BaseListVariable) else [result]
    inputs = [v for v in values if isinstance(v, _tensor_cls())]
    for item in items:
        if any(item is v or _example(item) is v.example for v in inputs):
            unimplemented(f"{what} {name} returned an argument itself")
    constant = isinstance(result, ConstantVariable) and getattr(
        target, "_kiln_nonstrict_body", False
    )  # (a nonstrict_trace body's constant: Note [nonstrict_trace: one opaque call over ...])
    if not isinstance(result, (BaseListVariable, _tensor_cls())) and not constant:
        unimplemented(f"{what} {name} returned {result} (tensors expected)")
    return result


def _example(v):
    return getattr(v, "example", None)
