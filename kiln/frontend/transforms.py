"""Compiled functions called inside torch.func transforms (grad, vmap, jvp ...) run as Python.

Note [Frames: under torch.func transforms]
Inside `torch.func.grad(f)(x)` or `torch.vmap(f)(x)` the tensors a compiled function receives are
functorch's wrappers (a GradTrackingTensor, a BatchedTensor whose shape hides the batch dim), and
the transform is live state of the process (its interpreter stack). kiln traces neither: its
example tensors cannot be made under the transform (requires_grad_() raises there), and a graph
compiled ahead of time by aot_eager or kiln is an autograd.Function without a vmap or jvp rule,
or reads tensor storage a wrapper does not have. So such a call runs the function as plain
Python, this call only: what the transform does to it is then what it does to eager code,
errors included (an old-style autograd.Function raises as it does eagerly). Every entry's guard
requires no active transform (`___functorch_transform() is None`), so an entry compiled outside
is never run inside one, and the first call after the transform ends compiles or hits as usual.
Under fullgraph=True the call is an error that says so.
"""

import torch

from kiln import logs
from kiln.exc import Unsupported
from kiln.frontend.user_errors import fullgraph_error

active = torch._C._functorch.peek_interpreter_stack  # None outside every transform


def run_under_transform(cache, args, kwargs):
    """`cache`'s function for this call, as Python (Note [Frames: under torch.func transforms])."""
    if cache.settings.fullgraph:
        e = Unsupported(f"a call inside a torch.func transform ({active().key().name.lower()})")
        raise fullgraph_error(e, cache.fn)
    logs.counters["frames"]["under_transform"] += 1
    return cache.run_eager(args, kwargs)
