"""Compiled autograd: capture the whole backward pass at `.backward()` into one graph and compile it.

    with kiln.compiled_autograd.enable(kiln.compile(backend="aot_eager", fullgraph=True)):
        loss.backward()

`collect.py` walks the autograd graph (the cache key), `cache.py` keeps compiled graphs (and makes
them size-generic), `capture.py` traces the backward into one FX graph, `hooks.py` holds the hook
bookkeeping and the run-time functions the graph calls, `runtime.py` is the engine stand-in.
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
