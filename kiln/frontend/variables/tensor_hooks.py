"""`x.register_hook(fn)` inside compiled code: on an input, after the graph; on a tensor made in
the frame, inside it.

Note [Side effects: tensor hooks replayed after the graph]
A hook changes nothing until a backward pass reaches its tensor, and no backward pass runs
inside the graph after the registration (a traced `torch.autograd.grad` with a registration
pending breaks the graph first, so the hook is registered before it runs). So the registration
is recorded like a logging call (SideEffects.record_call) and the transformed code calls
`x.register_hook(fn)` on the real input right after the graph; the gradient the compiled
backward gives `x` then goes through the hook as in eager.

A hook on a tensor made inside the graph cannot wait for the end of the graph (the gradient of
its uses inside the graph flows inside the compiled backward and never reaches a hook on the
graph's output): it becomes a node of the graph (Note [Side effects: hooks on intermediate
tensors]). A tensor that does not require grad breaks (Python raises), and so does a hook that
the transformed code could not load again. `register_post_accumulate_grad_hook` on an input
leaf is registered after the graph the same way.

Note [Side effects: hook handles]
The handle that `register_hook` returns inside the frame stands for a registration that happens
after the graph. If it escapes (returned, stored on an object or a global, live at a break), the
transformed code makes it first as an empty RemovableHandle (`new_handle`), once per call, and
the replayed registration (`register_deferred`) then points it at the real hook entry, so the
caller holds a handle that removes the hook as eager's does. `h.remove()` inside the frame
cancels the pending registration (the hook would be removed before any backward could run it):
the replay skips it, and the escaping handle stays empty (removing it again does nothing, as in
eager).
"""

import collections
import functools
import itertools
import types

import torch
from torch.utils.hooks import RemovableHandle

from kiln.bytecode import emit
from kiln.exc import Unsupported, unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.variables.base import BoundMethodVariable, VariableTracker
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.functions import (
    NestedUserFunctionVariable,
    PartialVariable,
    UserFunctionVariable,
)
from kiln.frontend.variables.logging_vars import EffectCallVariable
from kiln.frontend.variables.speculation import Speculation
from kiln.symbolic import hook_ops

_serial = itertools.count()


def register_hook(tx, tensor, args, kwargs):
    """Record `tensor.register_hook(hook)`; returns the (opaque) handle."""
    if kwargs or len(args) != 1:
        unimplemented("Tensor.register_hook with these arguments")
    if not tensor.example.requires_grad:
        unimplemented("Tensor.register_hook() on a tensor that does not require grad")
    (hook,) = args
    if tensor.source is None:
        return hook_intermediate(tx, tensor, hook)
    return _register_after_graph(tx, tensor, hook, "register_hook")


def register_post_accumulate_grad_hook(tx, tensor, args, kwargs):
    """Record `leaf.register_post_accumulate_grad_hook(hook)` (an input leaf: registered after
    the graph, as register_hook on an input)."""
    if kwargs or len(args) != 1:
        unimplemented("Tensor.register_post_accumulate_grad_hook with these arguments")
    if tensor.source is None or not tensor.example.requires_grad or not tensor.example.is_leaf:
        unimplemented("Tensor.register_post_accumulate_grad_hook() on a tensor made in the frame")
    return _register_after_graph(tx, tensor, args[0], "register_post_accumulate_grad_hook")


def _register_after_graph(tx, tensor, hook, method):
    if not _reloadable(hook):
        unimplemented(f"Tensor.{method}() with the hook {hook} (not reloadable)")
    loaded = _loaded_hook(tx, hook)
    if loaded is not None:
        hook = ReadAtRunTime(source=hook.source)
    handle = HookHandleVariable(("hook", next(_serial)), tensor, hook, method=method)
    handle.record(tx, removed=False)
    if loaded is not None:
        tx.output.guards.retract(loaded)
    return handle


# Note [Hooks: read from their source at run time]
# `y.register_hook(my_hook)` with `my_hook` a function read from a closure cell, a global or an
# attribute registers whatever that name holds at this call: rebinding it between calls changes
# the hook in eager, and must neither recompile nor run the old one. Wrapping the function
# guards it (its code, globals, defaults), which only tracing INTO it needs. So a function that
# the instruction right before the call loaded from its source (LOAD_DEREF, LOAD_GLOBAL,
# LOAD_ATTR of a module or object: `wrap_loaded` remembers it and the guards it added, as
# `tx.fresh_function`, until the next instruction other than PRECALL/CALL) is used by nothing
# but the registration. The hook is then never traced: on a tensor made in the frame it is called
# at backward time (Note [Hooks: given at run time] in kiln/symbolic/hook_ops.py), on an input it
# is registered after the graph, and in both the transformed code reads it from its source
# where it replays the registration (`ReadAtRunTime`; the replay loads values before any
# store, so it reads what the source held when the frame registered it), and the guards its
# wrapping added are dropped. Guards another use of the function added earlier stay, and a later
# use wraps it again and adds them again. A function read any other way (a local, an argument,
# a container item) keeps the traced path, guarded by identity.
#
# Cost: such a hook is not traced into the graph: its gradient code runs as Python at backward
# time (an extern call in the kiln backend, not fused), and on a tensor made in the frame it needs
# the CPU (`hook_at_run_time`); off the CPU it is traced and guarded as before (a rebinding
# recompiles there).


class ReadAtRunTime(VariableTracker):
    """A hook the transformed code reads from its source where it replays the registration."""

    def __repr__(self):
        return f"ReadAtRunTime({self.source.name()})"


def _loaded_hook(tx, hook):
    """The guards to drop when `hook` is a function the last load read from its source, else
    None (Note [Hooks: read from their source at run time])."""
    fresh = getattr(tx, "fresh_function", None)
    if fresh is None or fresh[0] is not hook or hook.source is None:
        return None
    return fresh[1]


def _reloadable(var):
    """Whether the transformed code can load the hook again: from a source, a function made in
    the frame (over the cells it closes over), functools.partial of those and constants."""
    if var.source is not None or var.is_python_constant():
        return True
    if isinstance(var, NestedUserFunctionVariable):
        return True
    if isinstance(var, PartialVariable):
        return all(_reloadable(v) for v in (var.fn, *var.args, *var.kwargs.values()))
    return False


# --- hooks on tensors made in the frame ----------------------------------------------------------
# Note [Side effects: hooks on intermediate tensors]
# `y = x * 2; y.register_hook(h)` adds h to the gradient that flows into y from EVERY use of y,
# those traced before the registration included. The node that made y is renamed in place: a
# copy of it (`y_raw`) is put before it, and the node itself becomes `tensor_hooks_N(y_raw)`, an
# identity autograd.Function whose backward runs the hooks in registration order (a hook that
# returns None leaves the gradient as it is). Every use of y, earlier or later, now reads the
# hooked value, so eager's gradients come out, under every backend: "eager" runs the Function,
# aot_eager and kiln trace its backward (the hook's tensor code) into the backward graph.
#
# The hook is traced into the graph when kiln can build it at compile time (a function from a
# source, guarded by identity; a function made in the frame without closure cells;
# functools.partial of those with constant arguments) and it is tensor code without effects: it
# is traced once, speculatively, on a zero gradient. Any other hook the transformed code can load
# again (a closure over the frame's objects, a bound method, a partial of an object, a hook with
# side effects or one that raises) is called at backward time as it is, with the real gradient
# (Note [Hooks: given at run time] in kiln/symbolic/hook_ops.py); so are the hooks of that tensor
# traced before it, and after it, in registration order. A view breaks (the identity copies, and
# a view's writes must reach its base).


class _RunHooks(torch.autograd.Function):
    """Identity forward; the backward passes the gradient through `hooks`."""

    @staticmethod
    def forward(ctx, x, hooks):
        ctx.hooks = hooks
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        for hook in ctx.hooks:
            out = hook(grad)
            if out is not None:
                grad = out
        return grad, None


def hooks_target(hooks):
    """The graph's target for a tensor with these hooks (a named function FX can print)."""

    def run(x):
        return _RunHooks.apply(x, hooks)

    run.__name__ = run.__qualname__ = f"tensor_hooks_{next(_serial)}"
    run.tensor_hooks = hooks
    return run


def hook_intermediate(tx, tensor, hook):
    """`y.register_hook(h)` for a y made in the frame (Note [Side effects: hooks on
    intermediate tensors])."""
    node = tensor.proxy
    if node.op not in ("call_function", "call_method", "call_module"):
        unimplemented(f"Tensor.register_hook() on a tensor made by a {node.op} node")
    if tensor.example._is_view():
        unimplemented("Tensor.register_hook() on a view made in the compiled frame")
    loaded = _loaded_hook(tx, hook)
    if node.target is hook_ops.HOOKED or (loaded is not None and tensor.device.type == "cpu"):
        # y has a hook called at run time (so are the later ones), or this one is read from its
        # source at run time (Note [Hooks: read from their source at run time])
        return hook_at_run_time(tx, tensor, hook, loaded)
    try:
        value = _hook_value(tx, hook)
        _check_hook(tx, tensor, hook)
    except Unsupported:
        if not _reloadable(hook):
            raise
        return hook_at_run_time(tx, tensor, hook)
    hooks = getattr(node.target, "tensor_hooks", None)
    if hooks is not None:  # a second hook on y: appended (they run in registration order)
        node.target = hooks_target((*hooks, value))
        return HookHandleVariable(None, tensor, hook, in_graph=True)
    graph = tx.output.graph
    with graph.inserting_before(node):
        raw = graph.create_node(node.op, node.target, node.args, node.kwargs)
    raw.meta = dict(node.meta)
    node.op, node.target = "call_function", hooks_target((value,))
    node.args, node.kwargs = (raw,), {}
    return HookHandleVariable(None, tensor, hook, in_graph=True)


def hook_at_run_time(tx, tensor, hook, loaded=None):
    """`y.register_hook(h)` with h called at backward time as it is (Note [Hooks: given at run
    time] in kiln/symbolic/hook_ops.py): y's node becomes `hooked(y_raw, token)`, and h is
    attached to the token (a graph output) after the graph. `loaded`: the guards to drop of a
    hook read from its source there (Note [Hooks: read from their source at run time])."""
    from kiln.frontend.variables.tensor import TensorVariable

    if not _reloadable(hook):
        unimplemented(f"Tensor.register_hook() on a tensor made in the frame with the hook {hook}")
    if tensor.device.type != "cpu":
        unimplemented("a hook called at run time on a tensor made in the frame off the CPU")
    node = tensor.proxy
    graph = tx.output.graph
    traced = None
    if node.target is hook_ops.HOOKED:  # a second hook on y: attached to the same token
        token_node = node.args[1]
    else:
        traced = getattr(node.target, "tensor_hooks", None)
        if traced is None:
            with graph.inserting_before(node):
                raw = graph.create_node(node.op, node.target, node.args, node.kwargs)
            raw.meta = dict(node.meta)
        else:  # y's hooks traced so far are called at run time too, first, in their order
            (raw,) = node.args
        with graph.inserting_before(node):
            token_node = graph.create_node("call_function", hook_ops.HOOK_TOKEN, (raw,), {})
        token_node.meta["example_value"] = hook_ops.HOOK_TOKEN(tensor.example)
        node.op, node.target = "call_function", hook_ops.HOOKED
        node.args, node.kwargs = (raw, token_node), {}
    token = TensorVariable(token_node, token_node.meta["example_value"], torch.device("cpu"))
    if traced:
        earlier = EffectCallVariable(
            "Tensor.register_hook", fn=functools.partial(hook_ops.attach_all, traced)
        )
        tx.output.side_effects.record_call(("hook", next(_serial)), earlier, [token], {})
    attach = EffectCallVariable("Tensor.register_hook", fn=hook_ops.attach)
    value = hook if loaded is None else ReadAtRunTime(source=hook.source)
    tx.output.side_effects.record_call(("hook", next(_serial)), attach, [token, value], {})
    if loaded is not None:
        tx.output.guards.retract(loaded)
    return HookHandleVariable(None, tensor, hook, in_graph=True)


def _hook_value(tx, hook):
    """The hook as a Python object made at compile time, or a break."""
    if type(hook) is UserFunctionVariable:
        if hook.source is not None:
            tx.output.guards.add(GuardKind.ID_MATCH, hook.source, hook.fn)
        return hook.fn
    if isinstance(hook, NestedUserFunctionVariable) and not hook.code.co_freevars:
        if getattr(hook, "attrs", None) or hook.annotations:
            unimplemented("Tensor.register_hook() with a function carrying attributes")
        defaults = _constant(hook.defaults)
        kwdefaults = _constant(hook.kwdefaults)
        fn = types.FunctionType(hook.code, hook.globals, hook.code.co_name, defaults)
        fn.__kwdefaults__ = kwdefaults
        return fn
    if isinstance(hook, PartialVariable):
        fn = _hook_value(tx, hook.fn)
        args = [_constant(a) for a in hook.args]
        kwargs = {k: _constant(v) for k, v in hook.kwargs.items()}
        return functools.partial(fn, *args, **kwargs)
    unimplemented(f"Tensor.register_hook() on a tensor made in the frame with the hook {hook}")


def _constant(var):
    if var is None:
        return None
    if not var.is_python_constant():
        unimplemented(f"Tensor.register_hook() with a hook bound to {var} (not a constant)")
    return var.as_python_constant()


def _check_hook(tx, tensor, hook):
    """Trace the hook once on a zero gradient (grad mode off, as the engine runs it); its nodes
    are dropped, a side effect is a break."""
    from kiln.frontend.variables.torch import TorchVariable

    with Speculation(tx) as spec:
        try:
            grad = TorchVariable(torch.zeros_like).call_function(tx, [tensor], {})
            hook.call_function(tx, [grad], {})
        except Unsupported:
            spec.drop_nodes()
            spec.undo_effects()
            raise
        except Exception as e:  # eager would raise it in backward, not here: run it in Python
            spec.drop_nodes()
            spec.undo_effects()
            unimplemented(
                f"a hook on a tensor made in the frame raises {type(e).__name__} when traced"
            )
    if spec.had_effects():
        spec.undo_effects()
        unimplemented(
            "Unsafe side effect in a hook on a tensor made in the frame (it runs in backward)"
        )
    spec.drop_nodes()


def has_pending_hooks(side_effects):
    """Whether a hook registration waits for the end of the graph."""
    return any(key[0] == "hook" for key in side_effects.log)


_NO_HOOKS = collections.OrderedDict()  # what an empty handle points at (never filled)


def new_handle():
    """The handle of a registration the transformed code makes later (Note [Side effects: hook
    handles]); removing it does nothing until `register_deferred` binds it."""
    return RemovableHandle(_NO_HOOKS)


def register_deferred(tensor, hook, handle, removed, method="register_hook"):
    """The replayed `tensor.register_hook(hook)` (or `method`), its real handle's entry given to
    `handle`."""
    if not removed:
        handle.__dict__.update(getattr(tensor, method)(hook).__dict__)


class HookHandleVariable(VariableTracker):
    """The RemovableHandle of a registration made after the graph."""

    keeps_identity = True  # rebuilt once per call: `return h, h` gives the same object

    def __init__(self, key, tensor, hook, in_graph=False, method="register_hook", **kw):
        super().__init__(**kw)
        self.key, self.tensor, self.hook, self.method = key, tensor, hook, method
        self.in_graph = in_graph  # a hook on a tensor made in the frame (inside the graph)

    def python_type(self):
        return RemovableHandle

    def record(self, tx, removed):
        """(Re)record the replayed registration, cancelled once removed in the frame."""
        fn = EffectCallVariable("Tensor.register_hook", fn=register_deferred)
        args = [self.tensor, self.hook, self, ConstantVariable(removed)]
        args += [ConstantVariable(self.method)] if self.method != "register_hook" else []
        tx.output.side_effects.record_call(self.key, fn, args, {})

    def call_method(self, tx, name, args, kwargs):
        if self.in_graph:
            unimplemented(f"RemovableHandle.{name} of a hook on a tensor made in the frame")
        if name == "remove" and not args and not kwargs:
            self.record(tx, removed=True)
            return ConstantVariable(None)
        unimplemented(f"RemovableHandle.{name} of a hook registered in the compiled frame")

    def var_getattr(self, tx, name):
        if name == "remove":
            return BoundMethodVariable(self, name)
        unimplemented(f"RemovableHandle.{name} of a hook registered in the compiled frame")

    def reconstruct(self, cg):
        if self.in_graph:
            unimplemented("the handle of a hook on a tensor made in the frame escapes")
        cg.load_object(new_handle, push_null=True)
        cg.extend(emit.call(0))
