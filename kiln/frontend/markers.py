"""kiln's marks on user code: `graph_break()`, and the attributes kiln sets on functions it made."""

import types


def graph_break():
    """Inside compiled code: end the graph here. Outside: does nothing."""


def kiln_marker(obj, name):
    """A marker kiln set on a function it made (`_kiln_orig_fn`, `_kiln_disabled`), or None.

    Read from the function's own __dict__: objects such as `torch.ops` answer any getattr.
    """
    if not isinstance(obj, types.FunctionType):
        return None
    return obj.__dict__.get(name)


def is_optimized_module(value):
    """Whether `value` is a compiled nn.Module (`kiln.frontend.entry.OptimizedModule`)."""
    return getattr(type(value), "_kiln_optimized_module", False) is True
