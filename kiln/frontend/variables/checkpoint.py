"""`torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False)` inside compiled code.

Note [Checkpoint: traced as a plain call]
Activation checkpointing changes memory, not values: eager runs `fn` once in the forward (with the
live RNG, saving its state) and again in the backward to rebuild what it did not keep, under the
restored RNG state, so the recomputed values are the forward's. kiln traces `fn(*args)` into the
graph as an ordinary call: outputs and gradients are eager's and the RNG advances the same way;
what differs is memory (the activations are kept; under backend="kiln" the min-cut partitioner
decides again what to recompute). Hugging Face's gradient checkpointing calls it this way.

Only the non-reentrant form with its default options is traced. The reentrant form breaks:
with no input requiring grad it gives the parameters inside `fn` no gradient at all, which a
plain call would not reproduce.
"""

import sys

import torch.utils.checkpoint as ckpt

from kiln.exc import unimplemented
from kiln.frontend.variables.base import VariableTracker

_DEFAULTS = {"determinism_check": "default", "debug": False, "early_stop": True}


class CheckpointVariable(VariableTracker):
    """torch.utils.checkpoint.checkpoint (a function torch keeps out of compilers)."""

    def __init__(self, value, **kw):
        super().__init__(**kw)
        self.value = value

    def call_function(self, tx, args, kwargs):
        kwargs = dict(kwargs)
        reentrant = kwargs.pop("use_reentrant", None)
        if (
            reentrant is None
            or not reentrant.is_python_constant()
            or reentrant.as_python_constant()
        ):
            unimplemented("torch.utils.checkpoint with use_reentrant not False")
        context_fn = kwargs.pop("context_fn", None)
        if context_fn is not None and not (
            context_fn.is_python_constant()
            and context_fn.as_python_constant() is ckpt.noop_context_fn
        ):
            unimplemented("torch.utils.checkpoint with a context_fn")
        for name, default in _DEFAULTS.items():
            v = kwargs.pop(name, None)
            if v is not None and not (v.is_python_constant() and v.as_python_constant() == default):
                unimplemented(f"torch.utils.checkpoint with {name}={v}")
        kwargs.pop("preserve_rng_state", None)  # (recomputation only)
        if not args:
            unimplemented("torch.utils.checkpoint without a function")
        return args[0].call_function(tx, list(args[1:]), kwargs)

    def reconstruct(self, cg):
        cg.load_object(self.value)


def checkpoint_function(value):
    """A CheckpointVariable when `value` is torch.utils.checkpoint.checkpoint, else None."""
    mod = sys.modules.get("torch.utils.checkpoint")
    if mod is not None and value is getattr(mod, "checkpoint", None):
        return CheckpointVariable(value)
    return None
