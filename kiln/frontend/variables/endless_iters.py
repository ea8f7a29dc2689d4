"""itertools.repeat(x) with no count and itertools.cycle: endless iterators stepped lazily.

Note [Iterators: endless itertools]
`itertools.repeat(x)` (no times) never runs out, so it cannot be built at once as a list of
items. It is a LazyIteratorVariable with no source (Note [Iterators: lazy over live sources]):
each `next()` gives `x` itself, and a break rebuilds it as `repeat(x)`. Taking every item
(`list(repeat(x))`) never ends in Python either: a break with a reason, never a trace that
runs forever. (`itertools.count()` is stdlib.CountVariable, built the same way.)

Note [Iterators: itertools.cycle]
`itertools.cycle(it)` made in the frame takes items from its source one at a time (lazily, as
Python's does: a generator's code runs when the cycle asks), keeping each; once the source ends
it gives the kept items again and again, for ever (an empty source: nothing, at once). Its
state is (kept items, position among them, whether the source ended), one per step, so undoing a
step restores it. Before its first item it is rebuilt as `cycle(source)`; part way (items kept
that a new cycle could not know) a rebuild is a break.
"""

import itertools

from kiln.exc import unimplemented
from kiln.frontend.variables import live_iters


def _step_repeat(it, tx, state):
    return it.fn, state


live_iters._STEP[itertools.repeat] = _step_repeat
live_iters._REBUILD[itertools.repeat] = lambda it, state: (itertools.repeat, [it.fn])


def _step_cycle(it, tx, state):
    kept, pos, ended = state
    if not ended:
        item = it.sources[0].next_item(tx)
        if item is not None:
            return item, ((*kept, item), 0, False)
    if not kept:
        return None, (kept, 0, True)
    return kept[pos], (kept, (pos + 1) % len(kept), True)


def _rebuild_cycle(it, state):
    kept, _, ended = state
    if kept or ended:
        unimplemented("rebuilding an itertools.cycle part way (its kept items)")
    return itertools.cycle, [it.sources[0]]


live_iters._STEP[itertools.cycle] = _step_cycle
live_iters._REBUILD[itertools.cycle] = _rebuild_cycle


class EndlessIteratorVariable(live_iters.LazyIteratorVariable):
    """An itertools iterator with no end (Note [Iterators: endless itertools])."""

    def unpack_var_sequence(self, tx):
        if self.kind is itertools.cycle and self.next_item(tx) is None:
            return []  # (a cycle over nothing: empty)
        unimplemented(f"taking every item of an endless itertools.{self.kind.__name__}")

    def has_unpack_var_sequence(self, tx):
        return False


def endless_call(tx, fn, args, kwargs):
    """`repeat(x)` as an endless lazy iterator, else None."""
    if fn is itertools.repeat and len(args) == 1 and not kwargs:
        return EndlessIteratorVariable(tx, fn, [], (), fn=args[0])
    if fn is itertools.cycle and len(args) == 1 and not kwargs:  # Note [Iterators: ...cycle]
        return EndlessIteratorVariable(tx, fn, args, ((), 0, False))
    return None
