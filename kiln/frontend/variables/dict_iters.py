"""A dict's iterator live at a graph break: rebuilt as a real one, at the same place.

Note [Dicts: iterators at a break]
`for k, v in d.items(): ...` that breaks inside its body hands the iterator to the resume
function. Rebuilt as a tuple iterator over the items left, it would go on after Python code run
at the break (the instruction itself, a __del__ it triggers) changed the dict's size, where
Python's iterator raises "dictionary changed size during iteration" at its next step. So an
iterator over a dict (or dict-subclass object's storage) that outlives the frame, whose keys the
trace left as they were, is rebuilt as a real iterator of its keys/values/items advanced by the
items taken, and past its end if the trace found it (it lets go of the dict there, as Python's
did): `dict_iter_at`. A resume function's trace reads such an iterator of a plain dict as an
input: its dict (`DictIterSource`, guarded like any input dict) and how far it has run (guarded),
the items from there on, the size the real iterator checks; the replay advances it by the items
the trace took, before the stores (a store that changed the dict's size after the last step must
not make it raise). One that finished, whose dict changed size, or whose cached result tuple holds
an object with a Python __del__ (`dict_iter_pos`) is not traced into: its FOR_ITER runs in
Python. The items left are taken as the dict's last ones: a dict that lost and gained keys of
the same count while iterated (Python's iterator may skip or repeat keys then) is not modelled.
"""

import collections

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.source import DictIterSource, dict_iter_dict, dict_iter_pos
from kiln.frontend.variables import lists
from kiln.frontend.variables.base import wrap_value
from kiln.frontend.variables.dict_keys import key_var
from kiln.frontend.variables.dicts import ConstDictVariable
from kiln.frontend.variables.lists import ListIteratorVariable, TupleVariable

_PLAIN = (dict, collections.defaultdict)  # (an OrderedDict's iterators are its own)
_REBUILT = (*_PLAIN, collections.OrderedDict)

# Note [Dicts: iterators of dicts made in the frame]
# iter(d), iter(d.items()) ... of a dict, defaultdict or OrderedDict made in the frame, live at a
# break, is Python's own iterator type there (an OrderedDict's odict_iterator: its type and size
# show; a tuple iterator over the items left would not be, nor see a value stored after): the
# dict is rebuilt, then its real iterator advanced by the items the trace took. Only when the
# dict's keys are still those the iterator started over (in order); else the items left are
# rebuilt as a tuple iterator, as before.
KINDS = {type(iter(getattr({}, kind)())): kind for kind in ("keys", "values", "items")}


def dict_iter_at(d, kind, pos, ran_out):
    """iter(d.<kind>()) advanced by `pos` items, and past its end if the trace's found it (it
    lets go of d then): the transformed code's rebuilt iterator (an OrderedDict's own type)."""
    cls = collections.OrderedDict if isinstance(d, collections.OrderedDict) else dict
    it = iter(getattr(cls, kind)(d))
    for _ in range(pos):
        next(it)
    if ran_out:
        next(it, None)
    return it


def rebuild(cg, it):
    """Emit dict_iter_at(d, kind, pos) for a traced iterator over a dict, or return False.

    A dict made in the frame (Note [Dicts: iterators of dicts made in the frame]) is rebuilt
    first; its iterator is rebuilt over it when its keys are those the iterator started with."""
    d = it.watched[0]
    kind = getattr(it, "dict_kind", None)
    if kind is None or d.user_cls not in _REBUILT or it.keys_changed():
        return False  # (Note [Dicts: keys changed while iterated])
    # the object that holds the items: a dict-subclass object's own (its storage's, its live
    # items'), else the dict
    owner = getattr(d, "storage_of", None) or getattr(d, "obj", None) or d
    if owner is not d or d.source is None:
        if owner.source is not None or getattr(it, "keys_at_start", None) != list(d.items):
            return False
    elif type(d) is not ConstDictVariable or list(getattr(d, "initial_keys", None) or ()) != list(
        d.items
    ):
        return False
    cg.load_object(dict_iter_at, push_null=True)
    if owner.source is None:
        cg.reconstruct(owner)
    else:
        d.source.reconstruct(cg)
    cg.extend(emit.load_const(kind) + emit.load_const(it.index))
    cg.extend(emit.load_const(it.ran_out) + emit.call(4))
    return True


class DictIterInputVariable(ListIteratorVariable):
    """A real dict iterator from outside the frame: the items of its dict from where it is on,
    advanced by the replay (Note [Dicts: iterators at a break])."""

    advance_first = True  # the replay advances it before the stores

    def python_type(self):
        return self.iter_type

    def next_item(self, tx=None):
        if self._size_changed():  # the real iterator raises: Python's step, not a traced one
            unimplemented("the next step of a dict iterator whose dict changed size")
        return super().next_item(tx)

    def reconstruct(self, cg):
        self.source.reconstruct(cg)  # the real iterator, advanced by the replay


def wrap_dict_iter(tx, value, source):
    """The variable of a dict-iterator input, or None (not traced into)."""
    pos = dict_iter_pos(value)
    if pos is None or type(dict_iter_dict(value)) not in _PLAIN:
        return None  # (its FOR_ITER runs in Python)
    guards = tx.output.guards
    guards.add(GuardKind.TYPE_MATCH, source, type(value))
    guards.add(GuardKind.CONSTANT_MATCH, DictIterSource(source, "pos"), pos)
    d = wrap_value(tx, dict_iter_dict(value), DictIterSource(source, "dict"))
    if not isinstance(d, ConstDictVariable):
        unimplemented("an iterator over a dict kiln does not trace")
    kind = KINDS[type(value)]
    if kind == "keys":
        items = [key_var(k) for k in d.items]
    elif kind == "values":
        items = list(d.items.values())
    else:
        items = [TupleVariable([key_var(k), v]) for k, v in d.items.items()]
    it = ListIteratorVariable.over_dict(d, items[pos:], kind=kind)
    var = DictIterInputVariable(it.items, source=source)
    var.watched, var.iter_type = it.watched, type(value)
    return tx.output.side_effects.track_iterator(var)


lists.ITERATORS["rebuild dict"] = rebuild
