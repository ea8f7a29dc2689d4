"""itertools.repeat(x) with no count: an endless iterator stepped lazily.

Note [Iterators: endless itertools]
`itertools.repeat(x)` (no times) never runs out, so it cannot be built at once as a list of
items. It is a LazyIteratorVariable with no source (Note [Iterators: lazy over live sources]):
each `next()` gives `x` itself, and a break rebuilds it as `repeat(x)`. Taking every item
(`list(repeat(x))`) never ends in Python either: a break with a reason, never a trace that
runs forever. (`itertools.count()` is stdlib.CountVariable, built the same way.)
"""

import itertools

from kiln.exc import unimplemented
from kiln.frontend.variables import live_iters


def _step_repeat(it, tx, state):
    return it.fn, state


live_iters._STEP[itertools.repeat] = _step_repeat
live_iters._REBUILD[itertools.repeat] = lambda it, state: (itertools.repeat, [it.fn])


class EndlessIteratorVariable(live_iters.LazyIteratorVariable):
    """An itertools iterator with no end (Note [Iterators: endless itertools])."""

    def unpack_var_sequence(self, tx):
        unimplemented(f"taking every item of an endless itertools.{self.kind.__name__}")

    def has_unpack_var_sequence(self, tx):
        return False


def endless_call(tx, fn, args, kwargs):
    """`repeat(x)` as an endless lazy iterator, else None."""
    if fn is itertools.repeat and len(args) == 1 and not kwargs:
        return EndlessIteratorVariable(tx, fn, [], (), fn=args[0])
    return None
