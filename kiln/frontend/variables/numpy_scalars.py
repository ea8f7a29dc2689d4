"""NumPy scalar inputs (np.int64(3), np.float32(0.5)) as 0-d graph inputs.

Note [NumPy: scalar inputs]
A NumPy scalar input is, as in torch.compile, a 0-d graph input
`torch.from_numpy(np.asarray(value))` guarded by its type only: a loop that passes a new value on
each call compiles once. It is a NumpyNdarrayVariable with `scalar` set, so arithmetic follows
NumPy's scalar rules and gives NumPy scalars (Note [NumPy: arrays as tensors]); anything that
reads its value into Python (`if y`, `int(y)`, `range(y)`) is a graph break, as for any value of
the graph. Returned or stored as it is, it is the caller's object (its source); what raises on a
scalar in Python (item assignment, torch.from_numpy) breaks.
"""

import numpy as np
import torch

from kiln.frontend.guards import GuardKind
from kiln.frontend.source import NumpyTensorSource
from kiln.frontend.variables.numpy_vars import DTYPES, NumpyNdarrayVariable

_SCALAR_TYPES = frozenset(dt.type for dt in DTYPES)


def is_numpy_scalar(value):
    """A NumPy scalar of a dtype torch has."""
    return type(value) in _SCALAR_TYPES


def wrap_scalar(tx, value, source):
    """A NumPy scalar input: a 0-d graph input, so a new value of the same type reuses the graph
    (Note [NumPy: scalar inputs])."""
    tx.output.guards.add(GuardKind.TYPE_MATCH, source, type(value))
    tensor_source = NumpyTensorSource(source)
    # a source read again is the same input (its tensor, made once per trace)
    made = [t for s, t, _ in tx.output.graph_inputs if s == tensor_source]
    t = made[0] if made else torch.from_numpy(np.asarray(value))
    tensor = tx.output.add_graph_input(t, tensor_source)
    return NumpyNdarrayVariable(tensor, scalar=True, source=source)
