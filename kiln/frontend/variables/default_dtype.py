"""`torch.set_default_dtype(d)` while tracing (Note [Torch: set_default_dtype traced])."""

import torch

from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.variables import torch as torch_vars
from kiln.frontend.variables.base import VariableTracker
from kiln.frontend.variables.constant import ConstantVariable

# Note [Torch: set_default_dtype traced]
# `torch.set_default_dtype(d)` with a constant floating dtype is traced as torch.compile traces
# it: the frame is guarded on the default dtype it starts with, the call is a graph node (the
# graph's factory calls after it, `torch.tensor([1.0])`, build d as in eager) and takes effect
# while tracing (their example values see it); the trace's own setting is put back when the
# trace ends (frame_cache.compile). The last setting is also replayed after the graph as a side
# effect, so a backend that drops the node (an ATen graph bakes the dtypes in) leaves the same
# state behind as eager.
_KEY = ("default_dtype",)


class _SetDefaultDtype(VariableTracker):
    """torch.set_default_dtype as the function a replayed call loads."""

    def reconstruct(self, cg):
        cg.load_object(torch.set_default_dtype)


def set_default_dtype(tx, fn, args, kwargs):
    """A traced `torch.set_default_dtype(d)`, or a break (not a constant floating dtype)."""
    if kwargs or len(args) != 1 or not args[0].is_python_constant():
        unimplemented("torch.set_default_dtype with an argument that is not a constant")
    dtype = args[0].as_python_constant()
    if not isinstance(dtype, torch.dtype) or dtype not in (torch.float32, torch.float64):
        unimplemented(f"torch.set_default_dtype({dtype}) (Python raises or it is not traced)")
    output = tx.output
    if not hasattr(output, "entry_default_dtype"):
        output.entry_default_dtype = torch.get_default_dtype()
        output.guards.add(
            GuardKind.STATE_QUERY, None, (torch.get_default_dtype, output.entry_default_dtype)
        )
    node = output.create_node("call_function", torch.set_default_dtype, (dtype,), {})
    node.meta["example_value"] = None
    torch.set_default_dtype(dtype)
    effects = output.side_effects
    effects.record_call(_KEY, _SetDefaultDtype(), [ConstantVariable(dtype)], {})
    return ConstantVariable(None)


torch_vars.register_function(torch.set_default_dtype, set_default_dtype)
