"""torch calls whose checks of their input values a graph would skip (Note [Torch: value checks])."""

import torch

from kiln.exc import unimplemented
from kiln.frontend.variables import torch as torch_vars

# Note [Torch: value checks]
# `F.one_hot(x, n)` raises in eager when a class value is negative or not below n: its C++ body
# reads x's min and max. Traced, the call decomposes on data-less tensors, where those reads are
# skipped, and the graph wrote a row of zeros (or a wrong one) for a bad class instead of raising.
# A graph has no run-time assertion kiln compiles today, so the call runs eagerly: a graph break.


def _one_hot(tx, fn, args, kwargs):
    unimplemented(
        "torch.nn.functional.one_hot checks its class values at run time (a graph would not)"
    )


torch_vars.register_function(torch.nn.functional.one_hot, _one_hot)
