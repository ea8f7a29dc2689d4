"""Calls of functions `kiln.nonstrict_trace` made: one opaque call in the graph, over a flattened
argument structure.

Note [nonstrict_trace: one opaque call over flattened arguments]
`kiln.nonstrict_trace(fn)` returns a copy of fn (fn itself is left as it was) that traced code
does not trace: a call records ONE node, as an allow_in_graph call does (Note [allow_in_graph: one
opaque call]), so code inside fn that kiln could not trace (a graph break, data-dependent
Python) runs as eager runs it. Unlike allow_in_graph, the arguments may be tensors, constants,
and lists, tuples and dicts of them, nested: they are flattened to the tensors (the node's
inputs) and a plan that rebuilds the structure around them, constants included, when the node
runs. The result is read from running fn once on meta examples (allowed_call): tensors, and
constants beside them or alone (a constant computed from sizes, which the frame's guards keep
fixed; code reading tensor data fails on meta, a break). An argument of a class registered with
`register_pytree_node` is flattened by its own functions (Note [nonstrict_trace: registered
pytree nodes]), and an nn.Module is passed as itself, its parameters and buffers inputs of the
node. Any other argument or result (an object of another user class) is a break that names the
type; so is a function
made inside compiled code given to nonstrict_trace (the node needs a function that outlives
the trace). A method's `self` is an argument too where it can be one (an nn.Module, a registered
pytree node); other methods are traced as before.

In a frame with symbolic sizes the meta run is on the frame's symbolic examples: a size the body
returns is a symbolic int of the graph (read from the node's result), and a branch of the body
on a size is guarded as the frame's own branches are, so another size compiles again.
"""

import contextlib
import types
import weakref

import torch
import torch.utils._pytree as pytree
from torch._library import opaque_object
from torch.utils._python_dispatch import TorchDispatchMode

from kiln.exc import Unsupported, unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.variables.allowed_calls import _tensor_cls, allowed_call
from kiln.frontend.variables.constant import ConstantVariable, is_literal
from kiln.frontend.variables.dicts import ConstDictVariable
from kiln.frontend.variables.lists import BaseListVariable
from kiln.symbolic.leaf_ops import MODULE, TENSOR, TREE, module_tensors, rebuild

_WHAT = "nonstrict_trace-ed function"
_TENSOR = TENSOR  # a slot of the plan filled by the next tensor input (shared with leaf_function)


def flatten_argument(v, tensors, name, what, tx, modules=False):
    """The plan of argument `v`, its tensors appended to `tensors`; with `modules` an nn.Module
    from a source too, its parameters and buffers its tensors (swapped into it around the call)."""
    if isinstance(v, _tensor_cls()):
        tensors.append(v)
        return _TENSOR
    if modules and _is_module_var(v) and v.source is not None:
        return _module_plan(tx, v, tensors)
    if isinstance(v, ConstantVariable) or (
        v.is_python_constant() and is_literal(v.as_python_constant())
    ):
        return ("const", v.as_python_constant())
    if _user_node(v):  # Note [nonstrict_trace: registered pytree nodes]
        try:
            leaves, spec = USER_TREES["flatten"](tx, v)
        except Unsupported as e:  # (its flatten function's context, children...)
            unimplemented(f"Invalid use of pytree_flatten with {what} {name}: {e.msg}")
        return (
            TREE,
            (spec, [flatten_argument(x, tensors, name, what, tx, modules) for x in leaves]),
        )
    if isinstance(v, BaseListVariable) and v.python_type() in (list, tuple):
        return (
            v.python_type(),
            [flatten_argument(i, tensors, name, what, tx, modules) for i in v.items],
        )
    if isinstance(v, ConstDictVariable) and v.python_type() is dict:
        items = v.items.items()
        return (dict, {k: flatten_argument(i, tensors, name, what, tx, modules) for k, i in items})
    kind = _opaque_kind(v)
    if kind == "value" and v.source is not None and hasattr(v, "value"):
        # Note [nonstrict_trace: opaque value objects]
        tx.output.guards.add(GuardKind.CONSTANT_MATCH, v.source, v.value)
        return ("const", v.value)
    if kind is not None and v.source is None:
        unimplemented(
            f"An opaque object was created in the middle of the program. {what} {name} takes "
            f"an object of the opaque type {v.python_type().__qualname__} only from outside the "
            "compiled function (kiln passes an opaque value object given as an argument)"
        )
    unimplemented(
        f"Invalid input type for {what} {name}: {v} (kiln passes tensors, "
        "constants, and lists, tuples and dicts of them)"
    )


# Note [nonstrict_trace: opaque value objects]
# An object of a class registered with `torch._library.opaque_object.register_opaque_type(cls,
# typ="value")` is, by that registration, safe to treat as a constant compared with its own
# __eq__: given from outside the frame, it is passed to the body as a constant of the plan, and
# the frame is guarded on equality with it (`type(s) is State and s == <the traced one>`), so an
# unequal one compiles again. One made inside the frame (of either kind) is a break that says
# so, as is a reference-type object (kiln has no opaque graph inputs).


def _opaque_kind(v):
    """ "value" or "reference" for a traced object of a registered opaque type, else None."""
    try:
        cls = v.python_type()
    except Exception:
        return None
    if not isinstance(cls, type) or not opaque_object.is_opaque_type(cls):
        return None
    return "value" if opaque_object.is_opaque_value_type(cls) else "reference"


# Note [nonstrict_trace: registered pytree nodes]
# An argument of a type registered with `register_pytree_node` (a dataclass of tensors, a Point)
# is flattened by its own flatten function, traced (variables/pytree.py, registered here as
# USER_TREES: that module imports this one's users); its leaves get plans of their own and its
# TreeSpec rebuilds it around them when the node runs, with the real unflatten function. The
# body so gets a new object of the class, as torch's nonstrict_trace gives it.
USER_TREES = {}  # "flatten": (tx, var) -> (leaf variables, TreeSpec); "unflatten": the reverse


def _user_node(v):
    """A traced object of a class registered with register_pytree_node (not a builtin node)."""
    try:
        cls = v.python_type()
    except Exception:
        return False
    return (
        cls in pytree.SUPPORTED_NODES
        and cls not in pytree.BUILTIN_TYPES
        and not isinstance(v, (BaseListVariable, ConstDictVariable))
        and "flatten" in USER_TREES
    )


def _is_module_var(v):
    """An NNModuleVariable (named by its traits: nn_module.py imports this module's users)."""
    return isinstance(getattr(v, "value", None), torch.nn.Module) and hasattr(v, "_child")


def _module_plan(tx, module_var, tensors):
    """A module argument: passed as itself (held weakly), its parameters and buffers the node's
    inputs, swapped into it around the body (leaf_ops.module_tensors): the meta run computes with
    meta ones, gradients reach the real ones through the node."""
    module = module_var.value
    owned = {id(m) for m in module.modules()}
    for key in tx.output.side_effects.log:
        if key[0] in ("attr", "dictitem") and key[1] in owned:  # (a store the replay makes)
            unimplemented(f"an nn.Module the frame changed, given to an opaque call: {module}")
    names = [n for n, _ in module.named_parameters()] + [n for n, _ in module.named_buffers()]
    for full in names:
        var = module_var
        for part in full.split("."):
            var = var._child(tx, part)
        tensors.append(var)
    return (MODULE, (weakref.ref(module), tuple(names)))


class _ClosuresToMeta(TorchDispatchMode):
    """The meta run of a nonstrict_trace body: a real tensor it reads from elsewhere (a closure,
    a global, a factory call inside it) meets the meta arguments as a meta tensor of its own
    metadata, as torch's fake run of the body sees it; at run time the body runs as written."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        flat = [*args, *kwargs.values()]
        if any(isinstance(a, torch.Tensor) and a.device.type == "meta" for a in flat):
            args, kwargs = pytree.tree_map_only(torch.Tensor, _to_meta, (args, kwargs))
        return func(*args, **kwargs)


def _to_meta(t):
    return t if t.device.type == "meta" else t.to("meta")


def _check_result(value, name):
    if isinstance(value, (list, tuple)):
        for item in value:
            _check_result(item, name)
    elif not isinstance(value, (torch.Tensor, torch.SymInt)) and not is_literal(value):
        unimplemented(
            f"Unsupported output type for nonstrict_trace-ed function {name}: "
            f"{type(value).__name__} (kiln returns tensors, constants and lists, tuples of them)"
        )


def passable(tx, self_args):
    """Whether a nonstrict_trace method's `self` can be an argument of its opaque call (a module,
    a registered pytree node); else the method is traced as before."""
    if not self_args:
        return True
    (obj,) = self_args
    return (_is_module_var(obj) and obj.source is not None) or _user_node(obj)


def nonstrict_call(tx, fn, args, kwargs):
    """The opaque node of a call of a nonstrict_trace copy (Note [nonstrict_trace: ...])."""
    name = fn.__qualname__
    tensors = []
    arg_plans = [flatten_argument(a, tensors, name, _WHAT, tx, True) for a in args]
    kwarg_plans = {
        k: flatten_argument(v, tensors, name, _WHAT, tx, True) for k, v in kwargs.items()
    }

    tracing = [True]  # (the result's types are checked on the meta run, not at run time)

    def nonstrict_call_of(*values):
        inputs, swaps = iter(values), []
        call_args = [rebuild(p, inputs, swaps) for p in arg_plans]
        call_kwargs = {k: rebuild(p, inputs, swaps) for k, p in kwarg_plans.items()}
        meta = _ClosuresToMeta() if tracing[0] else contextlib.nullcontext()
        with module_tensors(swaps), meta:  # (a module argument computes with the node's inputs)
            result = fn(*call_args, **call_kwargs)
        if tracing[0]:
            _check_result(result, name)
        return result

    nonstrict_call_of.__name__ = nonstrict_call_of.__qualname__ = name
    # (its results may be constants alone; it runs in frames with symbolic sizes)
    nonstrict_call_of._kiln_nonstrict_body = True
    try:
        return allowed_call(tx, nonstrict_call_of, tensors, {}, name, what=_WHAT)
    finally:
        tracing[0] = False


def defined_outside(fn_var):
    """The function of `fn_var` for nonstrict_trace in traced code; a function made inside the
    trace is a break (the node needs a function that outlives it)."""
    real = getattr(fn_var, "fn", None)
    if not isinstance(real, types.FunctionType):
        name = getattr(getattr(fn_var, "code", None), "co_name", str(fn_var))
        unimplemented(
            f"Applying `nonstrict_trace` to function <{name}>; however, `nonstrict_trace` "
            "currently requires the function to be defined outside `torch.compile` region."
        )
    return real
