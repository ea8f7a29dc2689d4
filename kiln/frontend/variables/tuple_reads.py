"""Tuple inputs read item by item: an item is wrapped, and guarded, when the trace reads it.

Note [Tuples: inputs guarded by the items read]
A tuple from outside the frame that is not one constant (it holds tensors, objects, or ints read
as int inputs: Note [Shapes: ints in tuple inputs]) is guarded by its type and length, and each
item by what the trace reads of it: `t[1]` wraps (and guards) item 1 alone, as torch.compile
guards it, so a call whose tuple changed only in items the code never read reuses the compiled
entry (a cache tuple whose unused slots change, a tensor the code skips). Anything that sees the
whole tuple (iteration, unpacking, slicing, ==, `in`, any method but len and a constant index)
goes through `TupleVariable.items`, whose first access reads all of it in order: a path that does
not know about laziness is guarded in full, never less. Tuples are immutable: the items are those
the frame loaded, whenever the trace reads them.
"""

from kiln.frontend.source import GetItemSource
from kiln.frontend.variables.base import wrap_value
from kiln.frontend.variables.dict_reads import UNREAD, LazyInput


def read_lazily(tx, var, value):
    """Make `var`, the variable of the tuple input `value` with every item UNREAD, read item by
    item (the Note above)."""
    var.unread = LazyInput(tx, value)  # (as a dict input's: the values, wrapped when read)
    return var


def read_item(var, i):
    """The variable of item `i` (an index in range), wrapped on its first read."""
    item = var.raw_items[i]
    if item is UNREAD:
        lazy = var.unread
        item = wrap_value(lazy.tx, lazy.values[i], GetItemSource(var.source, i))
        var.raw_items[i] = item
    return item


def read_all(var):
    """Wrap every item not read yet, in order: the tuple is read whole from now on."""
    for i in range(len(var.raw_items)):
        read_item(var, i)
    var.unread = None
