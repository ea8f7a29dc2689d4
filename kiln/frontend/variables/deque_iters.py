"""iter(d) and reversed(d) of a traced deque (Note [Deques: iterators])."""

from collections import deque

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.variables import lists
from kiln.frontend.variables.exceptions import raise_observed
from kiln.frontend.variables.lists import _ITER_UNDO, DequeVariable, ListIteratorVariable

# Note [Deques: iterators]
# A deque counts its changes (CPython's `state`), and its iterator remembers the count it was made
# at: each next() raises RuntimeError("deque mutated during iteration") once the counts differ (for
# good: every later next() raises too), else reads the deque as it is now (its length is what it
# was, as every change of length counts; `d[i] = x` and reverse() do not count, and are seen).
# Counted: each append / pop at either end, remove / del d[i], rotate of more than one item, clear
# of a non-empty deque, extend(left) of at least one item, and `*=` that repeats (the rules are in
# DequeVariable.call_method, sequence_ops and DELETE_SUBSCR). The iterator's types are the deque's
# own (`_deque_iterator`, `_deque_reverse_iterator`). A rebuild at a break is iter(d) (reversed(d))
# advanced as far as the trace took it; one whose deque changed breaks instead (it would raise).


def deque_iter_at(d, n, reverse):
    """iter(d) (reversed(d)) advanced by n items (the transformed code's rebuilt iterator)."""
    it = reversed(d) if reverse else iter(d)
    for _ in range(n):
        next(it)
    return it


class DequeIteratorVariable(ListIteratorVariable):
    """An iterator over a deque of the trace (Note [Deques: iterators])."""

    def __init__(self, deque_var, reverse=False, **kw):
        super().__init__((), **kw)
        self.deque = deque_var
        self.items = deque_var.items  # the deque's own items: changes that do not count are seen
        self.state = deque_var.state
        self.reverse = reverse

    def python_type(self):
        return type(reversed(deque()) if self.reverse else iter(deque()))

    def _check(self):
        if self.deque.state != self.state:
            raise_observed(None, RuntimeError, "deque mutated during iteration")

    def next_item(self, tx=None):
        self._check()
        if self.index >= len(self.items):
            return None
        item = self.items[-1 - self.index] if self.reverse else self.items[self.index]
        _ITER_UNDO.append((self, self.index))
        self.index += 1
        return item

    def unpack_var_sequence(self, tx):
        self._check()
        rest = self.items[self.index :]
        if self.reverse:
            rest = self.items[: len(self.items) - self.index][::-1]
        _ITER_UNDO.append((self, self.index))
        self.index = len(self.items)
        return rest

    def reconstruct(self, cg):
        if self.deque.state != self.state:
            unimplemented("rebuilding a deque iterator whose deque changed (its next() raises)")
        cg.load_object(deque_iter_at, push_null=True)
        cg.reconstruct(self.deque)
        cg.extend(emit.load_const(self.index))
        cg.extend(emit.load_const(self.reverse))
        cg.extend(emit.call(3))


lists.ITERATORS[DequeVariable] = DequeIteratorVariable
