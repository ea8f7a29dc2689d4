"""OrderedDict's own pop / setdefault / update after dict's methods changed its keys, run as
CPython runs them where that does not depend on the dict's memory layout.

Note [Dicts: OrderedDict's methods on a stale order list]
CPython's OrderedDict finds a key's node in its order list through the dict's entry index
(`od_fast_nodes[index]`), rebuilt from the list when the dict's table was reallocated. After
dict's own methods changed the keys behind the list (Note [Dicts: dict's methods on an
OrderedDict]) two states give answers that no reallocation changes:

- ADDED: dict's methods only added keys. Every key of the list is in the storage, so a rebuild
  finds them all; a key found through the list is exactly a key of the list. OrderedDict's pop
  of a key outside the list raises KeyError (or gives the default) though the storage holds it;
  a store of such a key (`od[k] = v`, update, setdefault of an absent key) gives it a node at
  the end of the list.
- REMOVED: dict's methods only removed keys, and nothing has been added since (an insertion
  may reallocate the table, and a rebuild then fails on the keys the storage lost, after which
  no key is found: that depends on the table's free slots, so it is a graph break). A key is
  found iff the list and the storage both hold it; stores of keys the storage holds are
  allowed.

`od_order` (the list) and `od_kind` live on the ConstDictVariable; a change that fits neither
state sets `od_order` to None and every read through the list breaks as before. Only pop,
setdefault, update (of a dict, an OrderedDict that is not stale itself, keywords), `od[k] = v`
and `del od[k]` (the node if found, then the storage's item) are run here; the other methods
that read the list still break.
"""

import collections

from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.exceptions import raise_observed

ADDED, REMOVED = "added", "removed"
_PLAIN = (dict, collections.OrderedDict, collections.defaultdict)  # (their keys() and [])
_ARITY = {"pop": (1, 2), "setdefault": (1, 2), "update": (0, 1)}
_ARITY.update({"__setitem__": (2, 2), "__delitem__": (1, 1)})


def dict_method_changed(var, before):
    """dict's own method changed `var`'s keys (they were `before`): the new state."""
    order = var.od_order if var.od_stale else list(before)
    kind = var.od_kind if var.od_stale else None
    var.od_stale = True
    if order is None:
        return
    now, listed, old = var.items, set(order), set(before)
    missing = [k for k in order if k not in now]
    extra = [k for k in now if k not in listed]
    added = any(k not in old for k in now)
    if kind == ADDED and not missing and not extra and order == list(now):
        var.od_stale, var.od_order, var.od_kind = False, None, None  # (the extra keys went)
        return
    if missing and extra or kind == REMOVED and added or not missing and not extra:
        var.od_order, var.od_kind = None, None
        return
    var.od_order, var.od_kind = order, REMOVED if missing else ADDED


def call(tx, var, name, args, kwargs):
    """OrderedDict's `name` on a stale `var`, or None where it is not modelled."""
    if var.od_order is None or name not in _ARITY:
        return None
    low, high = _ARITY[name]
    if not low <= len(args) <= high or (kwargs and name != "update"):
        var._argument_error(tx, name, args, kwargs)  # (raises Python's TypeError)
        return None
    if name == "pop":
        key = var._key(args[0])
        if not _found(var, key):
            if len(args) == 2:
                return args[1]
            var._key_error(tx, key)
        var._mutate(tx, [var.items[key]], name)
        var.od_order.remove(key)
        value = var.items.pop(key)
        _settle(var)
        return value
    if name == "__setitem__":
        return (
            ConstantVariable(None)
            if _store(tx, var, [(var._key(args[0]), args[1])], name)
            else None
        )
    if name == "__delitem__":  # (the node if found, then the storage's item or KeyError)
        key = var._key(args[0])
        if key not in var.items:
            var._key_error(tx, key)
        var._mutate(tx, [var.items[key]], name)
        if _found(var, key):
            var.od_order.remove(key)
        del var.items[key]
        _settle(var)
        return ConstantVariable(None)
    if name == "setdefault":
        key = var._key(args[0])
        if key in var.items:  # (PyDict_GetItem: the storage)
            return var.items[key]
        default = args[1] if len(args) == 2 else ConstantVariable(None)
        return default if _store(tx, var, [(key, default)], name) else None
    pairs = _update_pairs(tx, var, args)
    if pairs is None:
        return None
    pairs += [(k, v) for k, v in kwargs.items()]
    return ConstantVariable(None) if _store(tx, var, pairs, name) else None


def _found(var, key):
    if var.od_kind == ADDED:
        return key in var.od_order
    return key in var.items and key in var.od_order


def _update_pairs(tx, var, args):
    """The (key, value) pairs `update(arg)` stores, in order; None where not modelled."""
    if not args:
        return []
    other = args[0]
    if isinstance(other, ConstantVariable) and not hasattr(other.value, "__iter__"):
        kind = type(other.value).__name__
        raise_observed(tx, TypeError, f"'{kind}' object is not iterable")
    if type(other) is not type(var) or other.user_cls not in _PLAIN or other.od_stale:
        return None
    return list(other.items.items())


def _store(tx, var, pairs, name):
    """`var[k] = v` for each pair, as PyODict_SetItem runs it; False (nothing stored) where a
    store is not modelled."""
    order, items = list(var.od_order), dict(var.items)
    for key, value in pairs:
        if var.od_kind == REMOVED and key not in items:
            return False  # an insertion: the table may be reallocated
        items[key] = value
        if key not in order:
            order.append(key)  # (a node for a key the storage held without one, or a new key)
    var._mutate(tx, [var.items.get(k) for k, _ in pairs], name)
    var.items.clear()
    var.items.update(items)
    var.od_order = order
    _settle(var)
    return True


def _settle(var):
    """The list matches the storage again: an OrderedDict like any other."""
    if var.od_order == list(var.items):
        var.od_stale, var.od_order, var.od_kind = False, None, None
