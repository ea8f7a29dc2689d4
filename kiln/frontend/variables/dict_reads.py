"""Dict inputs read key by key: a value is wrapped, and guarded, when the trace reads it.

Note [Dicts: inputs guarded by the keys read]
A plain dict from outside the frame whose keys are literals is guarded by what the trace reads
of it, as torch.compile guards it: `d["a"]` and `d.get("a")` guard that "a" is in d (and d["a"]
as that read wrapped it), `"b" in d` that "b" is in d or is not, and `d.get("b")` of an absent
key that it is not. Keys and values no read touched are not wrapped (no guard, no graph input):
a call whose dict changed only there reuses the compiled entry (a config dict with a step
counter, a cache dict that grows). Anything that sees the whole dict (iteration, len, truth,
views, ==, a store, `**d`, rebuilding it, any method but these reads) goes through
`ConstDictVariable.items`, whose first access reads all of it: every value not read yet is
wrapped, in the dict's order, and the keys and their order are guarded (DICT_KEYS) as a dict
read whole always was. So a path that does not know about laziness is guarded in full, never
less. `d[k]` of an absent key takes that path too (the KeyError with the keys guarded).

The values are those the dict held when the frame loaded it (a shallow copy): the trace runs no
user code, so the dict cannot change before a later read wraps them.
"""

from kiln.frontend.guards import GuardKind
from kiln.frontend.source import GetItemSource
from kiln.frontend.variables.base import wrap_value
from kiln.frontend.variables.constant import ConstantVariable, is_literal

LOOKUPS = ("__getitem__", "get", "__contains__")


class Unread:
    """A value of a dict input the trace has not read (in ConstDictVariable.raw_items)."""

    __slots__ = ()

    def __repr__(self):
        return "<unread>"


UNREAD = Unread()


class LazyInput:
    """What a dict input read key by key needs to wrap its values later."""

    __slots__ = ("tx", "values")

    def __init__(self, tx, values):
        self.tx, self.values = tx, values


def read_lazily(tx, var, value):
    """Make `var`, the variable of the dict input `value` with every value UNREAD, read key by
    key (the Note above)."""
    tx.output.guards.add(GuardKind.TYPE_MATCH, var.source, type(value))
    var.unread = LazyInput(tx, dict(value))
    var.initial_keys = tuple(value)  # Note [Side effects: dicts replayed key by key]
    var.initial_items = {}  # (filled as values are read)
    return var


def read_key(var, key):
    """Wrap the value of `key` (in the dict), not read before."""
    lazy = var.unread
    value = wrap_value(lazy.tx, lazy.values[key], GetItemSource(var.source, key))
    var.raw_items[key] = value
    var.initial_items[key] = value
    return value


def read_all(var):
    """Wrap every value not read yet and guard the keys: the dict is read whole from now on."""
    lazy = var.unread
    for key, value in var.raw_items.items():
        if value is UNREAD:
            read_key(var, key)
    var.unread = None
    lazy.tx.output.guards.add(GuardKind.DICT_KEYS, var.source, (var.user_cls, tuple(lazy.values)))


def lookup(tx, var, name, args, key):
    """`d[key]`, `d.get(key[, default])` or `key in d` of a dict read key by key, guarded by
    that key alone; None where the whole dict must be read (an absent key with [])."""
    if not is_literal(key) or len(args) > (2 if name == "get" else 1):
        return None
    guards = tx.output.guards
    if key in var.unread.values:
        guards.add(GuardKind.IN, var.source, key)
        if name == "__contains__":
            return ConstantVariable(True)
        value = var.raw_items[key]
        return read_key(var, key) if value is UNREAD else value
    if name == "__getitem__":
        return None
    guards.add(GuardKind.NOT_IN, var.source, key)
    if name == "__contains__":
        return ConstantVariable(False)
    return args[1] if len(args) == 2 else ConstantVariable(None)
