"""Iterators that read a list made or seen in the frame as they go: reversed(lst)."""

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.variables.lists import _ITER_UNDO, ListIteratorVariable


# Note [Iterators: reversed lists]
# reversed(lst) is a list_reverseiterator: an index into the live list, starting at its last item
# and counting down. Each next() reads lst[index] if 0 <= index < len(lst), else it ends for good
# (it drops its list: later appends are not seen). Items written or appended after reversed() and
# before next() are seen, so it shares the ListVariable's items, as iter(lst) does (Note
# [Iterators: exhausted list iterators]); index -1 is the ended state. A rebuild makes
# reversed(lst) and sets its index (__setstate__), or breaks when the index is past the list's end
# (the list shrank: Python's iterator would end at its next step, setstate would clamp it).
class ReversedListIteratorVariable(ListIteratorVariable):
    """reversed(lst) over a list of the trace (Note [Iterators: reversed lists])."""

    def __init__(self, lst, **kw):
        super().__init__((), **kw)
        self.items = lst.items
        self.live_list = lst
        self.index = len(lst.items) - 1

    def python_type(self):
        return type(reversed([]))

    def _step_to(self, index):
        _ITER_UNDO.append((self, self.index))
        self.index = index

    def next_item(self):
        """The next item from the end, or None when ended (for good)."""
        if 0 <= self.index < len(self.items):
            item = self.items[self.index]
            self._step_to(self.index - 1)
            return item
        if self.index != -1:
            self._step_to(-1)
        return None

    def unpack_var_sequence(self, tx):
        rest = self.items[self.index :: -1] if 0 <= self.index < len(self.items) else []
        self._step_to(-1)
        return rest

    def reconstruct(self, cg):
        if self.index >= len(self.items):
            unimplemented("rebuilding a reversed() list iterator whose list shrank under it")
        cg.load_object(list_reviter_at, push_null=True)
        if self.index == -1:  # ended: over no list
            cg.extend(emit.build_list(0))
        else:
            cg.reconstruct(self.live_list)
        cg.extend(emit.load_const(self.index))
        cg.extend(emit.call(2))


def list_reviter_at(lst, index):
    """reversed(lst) with its next item at `index` (the rebuilt reversed list iterator)."""
    it = reversed(lst)
    it.__setstate__(index)
    return it
