"""Compiled autograd: capture the whole backward pass at `.backward()` into one graph and compile it.

    with kiln.compiled_autograd.enable(kiln.compile(backend="aot_eager", fullgraph=True)):
        loss.backward()

`collect.py` walks the autograd graph (the cache key), `cache.py` keeps compiled graphs (and makes
them size-generic), `capture.py` traces the backward into one FX graph, `hooks.py` holds the hook
bookkeeping and the run-time functions the graph calls, `split.py` hands the compiler whole graphs
of tensor work (Python calls that only consume it run after it; calls that feed it run between
separately compiled runs), `runtime.py` is the engine stand-in.

Note [Compiled autograd: what is captured]
Captured into the graph: every built-in (C++) node's backward, traced through ATen with its saved
tensors as inputs; kiln's CompiledFunctionBackward (its ahead-of-time backward graph inlined as
`aot{i}_*` nodes); custom autograd.Functions (an opaque `call_backward_*` call, run for real);
AccumulateGrad (`accumulate_grad_`, eager's steal-or-clone and in-place add); tensor hooks,
post-accumulate-grad hooks and retained grads (`call_hook` / `retain_grad_`); queue_callback
callbacks (run after the graph). `.backward()`, `torch.autograd.backward` and
`torch.autograd.grad` are all routed here.
Run by the eager engine instead, with the reason logged on `compiled_autograd`:
create_graph=True; module full backward hooks (BackwardHookFunction); saved-tensor hooks (e.g.
non-reentrant checkpointing); custom Functions with non-tensor inputs (reentrant checkpointing);
tensor subclasses; a backward formula touching a tensor that is not a saved tensor; any Python
callback the engine would call that kiln does not know (a profiler watches the capture). A
structure that failed once runs eagerly from then on (eager is always right, only slower).
Known differences from eager: saved tensors are freed when the graph is (a second backward
still raises, as eager's); accumulation and post-accumulate hooks run after the tensor work,
in the engine's order among themselves; hooks registered with `grad_fn.register_hook` /
`register_prehook` directly on built-in nodes are not visible to kiln (Python cannot list them).
"""

from kiln.compiled_autograd.hooks import accumulate_grad_, call_hook, install
from kiln.compiled_autograd.runtime import active, disable, enable, maybe_enable, reset

install()

__all__ = [
    "accumulate_grad_",
    "active",
    "call_hook",
    "disable",
    "enable",
    "maybe_enable",
    "reset",
]
