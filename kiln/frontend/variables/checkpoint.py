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

Note [Checkpoint: selective checkpointing]
`context_fn=functools.partial(create_selective_checkpoint_contexts, policy)` (selective
activation checkpointing) also changes memory only: in eager the forward's context caches the
outputs of the ops the policy saves and the backward's recompute returns them instead of running
the op again, so values and gradients are a plain call's. kiln traces it as one and does not call
the policy (it picks what to keep, which the partitioner decides here; torch.compile too calls it
at compile time only, not per run). Two things eager does are checked while tracing: the policy
must be a list of op overloads or a callable (else eager's TypeError: a break), and a function
that writes any tensor in place is a graph break: a cached output written in place makes eager's
backward raise, or, under allow_cache_entry_mutation=True, compute its gradient from the written
value (not a plain call's gradient). Any other context_fn (arbitrary context managers around the
forward and the recompute) is a graph break.
"""

import sys

import torch
import torch.utils.checkpoint as ckpt

from kiln.exc import unimplemented
from kiln.frontend.variables.base import VariableTracker
from kiln.frontend.variables.functions import PartialVariable

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
        selective = False
        if context_fn is not None and not (
            context_fn.is_python_constant()
            and context_fn.as_python_constant() is ckpt.noop_context_fn
        ):
            selective = _check_selective(context_fn)
        for name, default in _DEFAULTS.items():
            v = kwargs.pop(name, None)
            if v is not None and not (v.is_python_constant() and v.as_python_constant() == default):
                unimplemented(f"torch.utils.checkpoint with {name}={v}")
        kwargs.pop("preserve_rng_state", None)  # (recomputation only)
        if not args:
            unimplemented("torch.utils.checkpoint without a function")
        if not selective:
            return args[0].call_function(tx, list(args[1:]), kwargs)
        start = tx.output.last_node()
        result = args[0].call_function(tx, list(args[1:]), kwargs)
        if _writes_in_place(tx.output.graph, start):
            unimplemented(
                "selective checkpoint of a function that writes a tensor in place "
                "(eager's backward raises on, or reads, a mutated cache entry)"
            )
        return result

    def reconstruct(self, cg):
        cg.load_object(self.value)


def _check_selective(context_fn):
    """True for a selective-checkpoint context_fn kiln traces; a break for any other."""
    if not isinstance(context_fn, PartialVariable):
        unimplemented("torch.utils.checkpoint with a context_fn")
    fn = getattr(context_fn.fn, "value", None)
    if fn is not ckpt.create_selective_checkpoint_contexts or len(context_fn.args) != 1:
        unimplemented("torch.utils.checkpoint with a context_fn")
    extra = set(context_fn.kwargs) - {"allow_cache_entry_mutation"}
    allow = context_fn.kwargs.get("allow_cache_entry_mutation")
    if extra or (allow is not None and not allow.is_python_constant()):
        unimplemented("create_selective_checkpoint_contexts with arguments kiln does not read")
    policy = context_fn.args[0]
    if policy.is_python_constant():
        ops = policy.as_python_constant()
        if isinstance(ops, list):
            if not all(isinstance(op, torch._ops.OpOverload) for op in ops):
                unimplemented("selective checkpoint policy list of things not op overloads")
        elif not callable(ops):
            unimplemented("selective checkpoint policy that is not callable")
    return True


_WRITING_FUNCTIONS = (torch.Tensor.__setitem__,)


def _writes_in_place(graph, start):
    """Whether a node traced after `start` writes a tensor in place (`op_`, out=, inplace=True,
    setitem)."""
    node = graph._root._next if start is None else start.next
    while node is not graph._root:
        if node.op in ("call_function", "call_method"):
            name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
            if "out" in node.kwargs or node.kwargs.get("inplace") is True:
                return True
            if node.target in _WRITING_FUNCTIONS:
                return True
            if isinstance(name, str) and name.endswith("_") and not name.startswith("_"):
                return True
            if name == "setitem":
                return True
        node = node.next
    return False


def checkpoint_function(value):
    """A CheckpointVariable when `value` is torch.utils.checkpoint.checkpoint, else None."""
    mod = sys.modules.get("torch.utils.checkpoint")
    if mod is not None and value is getattr(mod, "checkpoint", None):
        return CheckpointVariable(value)
    return None
