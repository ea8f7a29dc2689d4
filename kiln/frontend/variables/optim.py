"""What `torch.optim`'s step functions meet on their way: profiler ranges and Dynamo's hints.

Note [Optimizers: tracing opt.step()]
`Optimizer.step` is wrapped by `profile_hook_step` (a `record_function` range around the step
hooks and the step) and by `_use_grad_for_differentiable` (grad mode off, with two
`torch._dynamo.graph_break()` calls around the body). Both are traced:
- `record_function(name)` in a `with` statement enters and leaves nothing in the graph: the range
  would only label the ops for the profiler, and every compiled graph is a profiler range of its
  own (the step's kernels show up under the graph's range instead);
- `torch._dynamo.graph_break()` is a hint for Dynamo's own AOT (which must see the no_grad region
  as an inference graph); a graph break never changes results, and ours needs none here (the
  grad-mode switch is a node, Note [Blocks: context managers]), so it is a no-op.
The optimizer asks `torch.compiler.is_compiling()` (True here) and then takes the paths written
for compilers: state steps stay tensors (`_get_value`), grouping by device and dtype is left to
the compiler, `capturable` checks are skipped. Its `torch._foreach_*` calls are recorded as they
are; the ATen tracer and the code generator handle their list results
(Note [Foreach: list-returning ops]).
"""

import collections
import contextlib
import dataclasses
import sys
import types

import torch
import torch.autograd.profiler as profiler
from torch.utils import _foreach_utils

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.source import AttrSource, Source
from kiln.frontend.variables.base import VariableTracker, wrap_value
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.lists import ListVariable, TupleVariable
from kiln.frontend.variables.unspec_float import SymFloatVariable


def is_dynamo_graph_break(value):
    """`torch._dynamo.graph_break` (compared without importing torch._dynamo)."""
    dynamo = sys.modules.get("torch._dynamo")
    return dynamo is not None and value is getattr(dynamo, "graph_break", None)


def dynamo_unpatched(fn):
    """The original of a torch.optim function that Dynamo's TorchPatcher wrapped in
    `torch._dynamo.disable` (`Optimizer._init_group`, ...), else None.

    Note [Optimizers: Dynamo's patches]: once torch.compile has run in the process, Dynamo has
    replaced each optimizer class's `_init_group` by a disabled wrapper, because Dynamo's own
    optimizer support builds the state itself. The wrapper says nothing about the function: the
    function is torch.optim's, which kiln traces, so kiln traces the original (`__wrapped__`).
    """
    if not isinstance(fn, types.FunctionType) or not fn.__code__.co_filename.endswith(
        "torch/_dynamo/eval_frame.py"
    ):
        return None
    orig = getattr(fn, "__wrapped__", None)
    if isinstance(orig, types.FunctionType) and orig.__module__.startswith("torch.optim."):
        return orig
    return None


def is_record_function(value):

    return isinstance(value, type) and issubclass(value, profiler.record_function)


class DynamoHintVariable(VariableTracker):
    """`torch._dynamo.graph_break()`: nothing to do here (Note [Optimizers: tracing opt.step()])."""

    def call_function(self, tx, args, kwargs):
        return ConstantVariable(None)


class ProfilerRangeVariable(VariableTracker):
    """`torch.autograd.profiler.record_function(name)` entered in a `with`: no graph effect."""

    def __init__(self, cls, **kw):
        super().__init__(**kw)
        self.cls = cls

    def python_type(self):
        return self.cls

    def enter(self, tx):
        return ConstantVariable(None)

    def exit(self, tx):
        return ConstantVariable(None)

    def load_fresh(self, cg):
        """A null context in its place (a resume function re-enters it)."""
        cg.load_object(contextlib.nullcontext, push_null=True)
        cg.extend(emit.call(0))

    reconstruct = load_fresh


# Note [Optimizers: state keyed by parameters]
# `self.state[p]` reads a defaultdict keyed by parameter tensors. When the dict and the parameter
# both come from sources (the optimizer object and its param_groups), the item is wrapped from
# its own source `<state>[<param>]` (TensorKeyItemSource): its guard reads the real dict with the
# real parameter as key (a missing key fails the guard, and the frame recompiles). A parameter
# with no state yet gets its empty dict now, in the real defaultdict, as eager's
# `defaultdict.__missing__` would at this very read (the insertion of an empty dict is all it
# does); the state's initial tensors are then traced as stores into that dict (side effects).


@dataclasses.dataclass(frozen=True)
class TensorKeyItemSource(Source):
    """`base[key]` where key is another source's object (a dict keyed by tensors)."""

    source: Source
    key: Source

    def name(self):
        return f"{self.source.name()}[{self.key.name()}]"

    def reconstruct(self, cg):
        self.source.reconstruct(cg)
        self.key.reconstruct(cg)
        cg.extend(emit.binary_subscr())

    def base(self):
        return self.source.base()


def tensor_keyed_item(tx, obj, index):
    """`obj[index]` for a real dict reached from a source and a tensor graph input, else None."""
    real = getattr(obj, "value", None)
    if not isinstance(real, dict) or obj.source is None or index.source is None:
        return None
    key = next((v for _, v, n in tx.output.graph_inputs if n is index.proxy), None)
    if key is None:
        return None
    if key not in real:
        if type(real) is not collections.defaultdict or real.default_factory is not dict:
            return None
        real[key]  # defaultdict.__missing__ now (Note [Optimizers: state keyed by parameters])
    return wrap_value(tx, real[key], TensorKeyItemSource(obj.source, index.source))


def read_grad(tx, tensor):
    """`p.grad` of a tensor input: the real `.grad` from its own source (None or an input), as
    long as no backward ran in the graph so far (its value would be the one before)."""
    real = next((v for _, v, n in tx.output.graph_inputs if n is tensor.proxy), None)
    if real is None or tensor.source is None:
        unimplemented("Tensor.grad of a tensor made inside the compiled frame")
    if any(n.target is torch.autograd.backward for n in tx.output.graph.nodes):
        unimplemented("Tensor.grad after a backward inside the compiled frame")
    return wrap_value(tx, real.grad, AttrSource(tensor.source, "grad"))


def _queries():
    return {
        # the default dtype is read unguarded, as every factory call traced today reads it
        torch.get_default_dtype,
        _foreach_utils._get_fused_kernels_supported_devices,
        _foreach_utils._get_foreach_kernels_supported_devices,
    }


FOLDED_QUERIES = _queries()


def fold_query(fn):
    """The value of a query the optimizers make (constant for the process), as a Python value."""
    value = fn()
    return tuple(value) if isinstance(value, list) else value


# Note [Optimizers: scalar tensors as op scalars]
# Under a compiler the optimizers keep `step_size` etc. as tensors (`_get_value`,
# `_stack_if_compiling`) and pass them where an op takes a Scalar: `p.addcdiv_(a, b, value=t)`,
# `torch._foreach_addcdiv_(ps, as_, bs, t)`. Eager would read the value out (`.item()`); a trace
# cannot. These calls are written as the ops they compute, in the kernel's order: addcdiv is
# `self + value * t1 / t2` (value times t1 first), addcmul `self + value * t1 * t2`; a stacked
# scalars tensor is split into one 0-d tensor per list element.


# A float hyper-parameter that is a graph value (Note [Optimizers: float hyper-parameters])
# meets the same ops as a Scalar: `_foreach_add_(params, grads, alpha=-lr)` (SGD),
# `_foreach_addcdiv_(params, grads, avg, value=-lr)` (RMSprop). They are written the same way:
# `self + alpha * other` as `self + other * alpha`, so that the float stays an input of the graph.


def _rewrites():
    return {
        torch._foreach_addcdiv_: (torch.div, True),
        torch._foreach_addcmul_: (torch.mul, True),
        torch._foreach_addcdiv: (torch.div, False),
        torch._foreach_addcmul: (torch.mul, False),
        torch._foreach_add_: (torch.add, True),
        torch._foreach_sub_: (torch.sub, True),
        torch._foreach_add: (torch.add, False),
        torch._foreach_sub: (torch.sub, False),
    }


FOREACH_REWRITES = _rewrites()
_ALPHA_OPS = (torch.add, torch.sub)
METHOD_REWRITES = {"addcdiv_": "div", "addcmul_": "mul", "addcdiv": "div", "addcmul": "mul"}
METHOD_REWRITES.update({"add_": "add", "sub_": "sub", "add": "add", "sub": "sub"})


def _rewrite_alpha(tx, fn, args, kwargs, call):
    """`_foreach_{add,sub}[_](selfs, others, alpha=<float graph value>)`, else None."""
    alpha = kwargs.get("alpha", args[2] if len(args) == 3 else None)
    if not isinstance(alpha, SymFloatVariable) or len(args) < 2:
        return None
    if not isinstance(args[1], (ListVariable, TupleVariable)):
        return None
    op, inplace = FOREACH_REWRITES[fn]
    selfs, others = (a.unpack_var_sequence(tx) for a in args[:2])
    terms = [call(torch.mul, [o, alpha]) for o in others]
    if inplace:
        for s, t in zip(selfs, terms):
            s.call_method(tx, op.__name__ + "_", [t], {})
        return ConstantVariable(None)
    return ListVariable([call(op, [s, t]) for s, t in zip(selfs, terms)])


def _stacked_items(scalars, n, tensor_cls):
    """The n 0-d tensors that `torch.stack` made `scalars` of, else None.

    Adam's step sizes are `torch.stack([lr / bc for bc in ...])` under a compiler
    (`_stack_if_compiling`); each parameter's update reads its own element. Read from the stack,
    every parameter's loop would wait for the steps of all parameters and read one buffer they
    all share (the scheduler would then fuse all same-sized updates into one loop); read from
    its own 0-d tensor, each parameter's update is one loop with its step's math in front.
    """
    node = scalars.proxy
    if node.target is not torch.stack or node.kwargs or len(node.args) != 1:
        return None
    items = node.args[0]
    if not isinstance(items, (list, tuple)) or len(items) != n:
        return None
    out = []
    for item in items:
        example = getattr(item, "meta", {}).get("example_value")
        if not isinstance(example, torch.Tensor) or example.dim() != 0:
            return None
        if example.dtype != scalars.example.dtype:
            return None
        out.append(tensor_cls(item, example, scalars.device, is_leaf_input=False))
    return out


def rewrite_foreach(tx, fn, args, kwargs, call, tensor_cls):
    """`_foreach_addc{div,mul}[_](self, t1, t2, scalars_tensor or float graph value)`, and
    `_foreach_{add,sub}[_]` with a float graph value as alpha; else None."""
    op, inplace = FOREACH_REWRITES[fn]
    if op in _ALPHA_OPS:
        return _rewrite_alpha(tx, fn, args, kwargs, call)
    scalars = args[3] if len(args) == 4 else kwargs.get("scalars", kwargs.get("value"))
    if len(args) < 3 or not isinstance(scalars, (tensor_cls, SymFloatVariable)):
        return None
    selfs, t1s, t2s = (a.unpack_var_sequence(tx) for a in args[:3])
    if isinstance(scalars, SymFloatVariable) or scalars.example.dim() == 0:
        values = [scalars] * len(selfs)  # (a 0-d tensor is one Scalar `value` for every item)
    else:
        values = _stacked_items(scalars, len(selfs), tensor_cls) or [
            call(torch.select, [scalars, ConstantVariable(0), ConstantVariable(i)])
            for i in range(len(selfs))
        ]
    outs = []
    for s, a, b, v in zip(selfs, t1s, t2s, values):
        term = call(op, [call(torch.mul, [a, v]), b])
        if inplace:
            s.call_method(tx, "add_", [term], {})
        else:
            outs.append(call(torch.add, [s, term]))
    return ConstantVariable(None) if inplace else ListVariable(outs)


# Note [Optimizers: GradScaler's unscale]
# `torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)` writes two
# things and returns None: every gradient is multiplied by inv_scale (an inf or nan stays one),
# and found_inf (a 1-element float tensor, 0 or 1) becomes 1 when any gradient holds an inf or
# a nan. It is traced as those ops: `g.mul_(inv_scale)` per gradient and
# `found_inf.copy_(max(found_inf, any non-finite))`, which is the kernel's result whatever the
# order (found_inf only ever goes from 0 to 1).


def amp_unscale(tx, args, kwargs, call):
    """`_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)` traced as
    its ops (Note [Optimizers: GradScaler's unscale]); None when the arguments are others."""
    if len(args) != 3 or kwargs or not isinstance(args[0], (ListVariable, TupleVariable)):
        return None
    grads, found_inf, inv_scale = args[0].unpack_var_sequence(tx), args[1], args[2]
    flags = [call(torch.any, [call(torch.logical_not, [call(torch.isfinite, [g])])]) for g in grads]
    for g in grads:
        g.call_method(tx, "mul_", [inv_scale], {})
    if flags:
        any_bad = call(torch.any, [call(torch.stack, [ListVariable(flags)])])
        bad = any_bad.call_method(tx, "to", [ConstantVariable(found_inf.example.dtype)], {})
        found = call(torch.maximum, [found_inf, bad])
        found_inf.call_method(tx, "copy_", [found], {})
    return ConstantVariable(None)


def rewrite_method(tx, tensor, name, args, kwargs, call, tensor_cls):
    """`t.addc{div,mul}[_](t1, t2, value=scalar_tensor or float graph value)`,
    `t.{add,sub}[_](other, alpha=float graph value)`; else None."""
    op = getattr(torch, METHOD_REWRITES[name])
    if op in _ALPHA_OPS:
        alpha = kwargs.get("alpha", args[1] if len(args) == 2 else None)
        if not isinstance(alpha, SymFloatVariable) or not args:
            return None
        term = call(torch.mul, [args[0], alpha])
        if name.endswith("_"):
            return tensor.call_method(tx, name, [term], {})
        return call(op, [tensor, term])
    value = kwargs.get("value", args[2] if len(args) == 3 else None)
    if len(args) < 2 or not (
        isinstance(value, SymFloatVariable)
        or (isinstance(value, tensor_cls) and value.example.dim() == 0)
    ):
        return None
    term = call(op, [call(torch.mul, [args[0], value]), args[1]])
    if name.endswith("_"):
        return tensor.call_method(tx, "add_", [term], {})
    return call(torch.add, [tensor, term])


# Note [Optimizers: weak references]
# An LR scheduler wraps `opt.step` in a function that reaches the optimizer through a
# `weakref.ref` (lr_scheduler.patch_track_step_called). Calling a weak reference reached from a
# source gives its referent, wrapped from the source `<ref>()`: the guard calls the reference
# again, so a dead referent (None) or another object fails it like any changed value.


@dataclasses.dataclass(frozen=True)
class CallSource(Source):
    """`base()` of a callable whose call has no effects (a weak reference)."""

    source: Source

    def name(self):
        return f"{self.source.name()}()"

    def reconstruct(self, cg):
        load = type(cg)(cg.output)
        self.source.reconstruct(load)
        cg.extend(emit.with_null(load.instrs))
        cg.extend(emit.call(0))

    def base(self):
        return self.source.base()


class WeakRefVariable(VariableTracker):
    """A `weakref.ref` reached from a source (Note [Optimizers: weak references])."""

    def __init__(self, value, **kw):
        super().__init__(**kw)
        self.value = value

    def python_type(self):
        return type(self.value)

    def call_function(self, tx, args, kwargs):
        if args or kwargs:
            unimplemented("a weak reference called with arguments")
        referent = self.value()
        if referent is not None and _dropped_by_frame(tx, referent):
            unimplemented("calling a weak reference to an object the frame let go of")
        return wrap_value(tx, referent, CallSource(self.source))


def _dropped_by_frame(tx, referent):
    """Whether an argument of the root frame was `referent` and its local no longer is.

    The guard calls the reference when the frame starts; a `del x` or `x = None` traced since
    may free the referent in eager before the call, which a traced answer cannot see.
    """
    root = root_translator(tx)
    for name, value in getattr(root, "arg_values", {}).items():
        if value is referent:
            now = root.symbolic_locals.get(name)
            source = getattr(now, "source", None)
            if source is None or source.name() != name:
                return True
    return False


def root_translator(tx):
    """The translator of the compiled frame itself (inlined calls' translators have a parent)."""
    while getattr(tx, "parent", None) is not None:
        tx = tx.parent
    return tx
