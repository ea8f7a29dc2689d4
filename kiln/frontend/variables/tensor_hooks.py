"""`x.register_hook(fn)` inside compiled code, for a tensor that is an input of the frame.

Note [Side effects: tensor hooks replayed after the graph]
A hook changes nothing until a backward pass reaches its tensor, and no backward pass runs
inside the graph after the registration (a traced `torch.autograd.grad` with a registration
pending breaks the graph first, so the hook is registered before it runs). So the registration
is recorded like a logging call (SideEffects.record_call) and the transformed code calls
`x.register_hook(fn)` on the real input right after the graph; the gradient the compiled
backward gives `x` then goes through the hook as in eager.

Hooks on tensors made inside the graph still break: under aot_eager/kiln such a tensor's
gradient from uses inside the graph flows inside the compiled backward and never reaches a
hook on the graph's output. A tensor that does not require grad breaks (Python raises), and so
does a hook that the transformed code could not load again. The handle that register_hook
returns cannot be used inside the frame (`h.remove()` breaks).
"""

import itertools

from kiln.exc import unimplemented
from kiln.frontend.variables.base import VariableTracker
from kiln.frontend.variables.functions import NestedUserFunctionVariable, UserFunctionVariable
from kiln.frontend.variables.logging_vars import EffectCallVariable

_serial = itertools.count()


def register_hook(tx, tensor, args, kwargs):
    """Record `tensor.register_hook(hook)`; returns the (opaque) handle."""
    if kwargs or len(args) != 1:
        unimplemented("Tensor.register_hook with these arguments")
    if tensor.source is None:
        unimplemented("Tensor.register_hook() on a tensor made inside the compiled frame")
    if not tensor.example.requires_grad:
        unimplemented("Tensor.register_hook() on a tensor that does not require grad")
    (hook,) = args
    if type(hook) is UserFunctionVariable and hook.source is not None:
        pass
    elif isinstance(hook, NestedUserFunctionVariable) and not hook.code.co_freevars:
        pass
    else:
        unimplemented(f"Tensor.register_hook() with the hook {hook} (not reloadable)")
    method = EffectCallVariable("Tensor.register_hook", obj=tensor, name="register_hook")
    tx.output.side_effects.record_call(("hook", next(_serial)), method, [hook], {})
    return HookHandleVariable()


def has_pending_hooks(side_effects):
    """Whether a hook registration waits for the end of the graph."""
    return any(key[0] == "hook" for key in side_effects.log)


class HookHandleVariable(VariableTracker):
    """The RemovableHandle of a registration made after the graph."""

    def call_method(self, tx, name, args, kwargs):
        unimplemented(f"RemovableHandle.{name} of a hook registered in the compiled frame")

    def var_getattr(self, tx, name):
        unimplemented(f"RemovableHandle.{name} of a hook registered in the compiled frame")

    def reconstruct(self, cg):
        unimplemented("the handle of a hook registered in the compiled frame escapes")
