"""Lazy modules (`nn.LazyLinear` ...) met uninitialized while tracing: initialized, then the frame
is traced again.

Note [Modules: lazy modules initialized while tracing]
A lazy module's first call runs its `_infer_parameters` pre-hook, which materializes the
parameters from the shapes of the arguments and turns the module into its final class
(LazyLinear becomes Linear) before forward runs. That first call changes the module for good,
as eager's does; tracing it (materialize() on an UninitializedParameter, a class assignment) is
not possible. So kiln runs the hook itself when a traced call reaches such a module, on the
arguments' example tensors (real inputs, or example values of the same shapes and dtypes), and
then traces the frame again from its start (RestartTrace): the second trace sees an ordinary
module. This is what torch.compile does too. The initialization runs before the traced code
that precedes the call has run; random draws are the one effect where that order shows (the
initial weights come from the global generator), so a graph that already drew random numbers is
a graph break here instead. Arguments kiln cannot hand over as example values are a break too.
"""

import torch
from torch.nn.modules.lazy import LazyModuleMixin

from kiln.exc import RestartTrace, unimplemented


def is_uninitialized(mod):
    """A lazy module whose first call has not run yet."""
    return isinstance(mod, LazyModuleMixin) and hasattr(mod, "_initialize_hook")


def initialize(tx, mod, args, kwargs):
    """Run the module's initialization on example arguments, then trace the frame again."""
    name = type(mod).__name__
    if _graph_draws_random(tx):
        unimplemented(f"lazy {name} initialized after random draws of the same graph")
    values = [_example(a, name) for a in args]
    kw = {k: _example(v, name) for k, v in kwargs.items()}
    with torch.no_grad():
        try:
            mod._infer_parameters(mod, tuple(values), kw)
        except Exception as e:
            unimplemented(f"lazy {name}'s initialization raised {type(e).__name__}: {e}")
    raise RestartTrace(f"lazy {name} initialized")


def _graph_draws_random(tx):
    """Whether a node of the graph so far draws from a random generator (its ATen op, found by
    name for torch functions and methods, is tagged nondeterministic_seeded)."""
    for node in tx.output.graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        target = node.target
        name = target if isinstance(target, str) else getattr(target, "__name__", "")
        if _seeded(name) or _seeded(getattr(target, "_overloadpacket", None)):
            return True
    return False


def _seeded(name_or_packet):
    """Whether an ATen op (a packet, or an aten name) has an overload that draws randomly."""
    packet = name_or_packet
    if isinstance(name_or_packet, str):
        try:
            packet = (
                getattr(torch.ops.aten, name_or_packet) if name_or_packet.isidentifier() else None
            )
        except (AttributeError, RuntimeError):
            packet = None
    if packet is None or not hasattr(packet, "overloads"):
        return False
    tag = torch.Tag.nondeterministic_seeded
    return any(tag in getattr(packet, o).tags for o in packet.overloads())


def _example(var, name):
    """The Python value the initialization sees for an argument variable."""
    example = getattr(var, "example", None)
    if isinstance(example, torch.Tensor) and getattr(var, "proxy", None) is not None:
        return example
    if var.is_python_constant():
        return var.as_python_constant()
    items = getattr(var, "items", None)
    if isinstance(items, list):
        typ = var.python_type()
        made = [_example(v, name) for v in items]
        if typ is list:
            return made
        if typ is tuple:
            return tuple(made)
        if issubclass(typ, tuple) and hasattr(typ, "_make"):
            return typ._make(made)
    if isinstance(items, dict) and var.python_type() is dict:
        keys = [getattr(k, "value", k) for k in items]
        if all(isinstance(k, (str, int)) for k in keys):
            return {k: _example(v, name) for k, v in zip(keys, items.values())}
    unimplemented(f"lazy {name} initialized with an argument kiln cannot hand over ({var})")
