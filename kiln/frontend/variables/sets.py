"""Sets: set and frozenset of Python constants made while tracing, and set inputs.

Note [Sets: tensors as items]
A plain tensor hashes by identity (Tensor.__hash__ is id()), and two tensors are only compared
with == when their hashes are equal, that is never for two objects: a set of tensors is a set of
identities. Traced tensors are the same object when they are the same variable (Note [Operators:
tensor identity]), so a traced tensor is held in the set by a stand-in, TensorKey, that hashes
and compares by its variable. Two tensors from outside the frame that are distinct objects now
are guarded to stay distinct (GuardKind.DISTINCT: an aliased call recompiles). A tensor whose
identity with another is not known (the result of `x.float()`), or a tensor subclass (its own
__hash__/__eq__), is not modelled: a break.
"""

import sys
import types

import torch

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.variables.base import VariableTracker
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.exceptions import ObservedException, observe, raise_observed
from kiln.frontend.variables.lists import BaseListVariable
from kiln.frontend.variables.misc import wrap_frozen


# Note [Sets: iteration order is the table's]
# A set iterates in the order of its hash table, which depends on its history: the insertions,
# the resizes, and whether it was merged from another set's table at once (`set.update(other_set)`
# into an empty set copies the other's layout). So the items are kept in a real set to which the
# frame's operations are applied as Python applies them, with the real operands where they are
# constants: a frozenset constant is merged itself, not a set rebuilt from its items (200 words
# in a literal iterated differently: test_collections' test_name_conflicts). A set rebuilt at a
# break is built the way that repeats its order: item by item (BUILD_SET), or merged from a
# frozenset constant where only that does.
class SetVariable(VariableTracker):
    """A set (or frozenset) of Python constants made while tracing; the items are the real
    constants, kept in a real set (so iteration order is Python's own)."""

    real = None  # an input not changed yet: the object itself (its order: Note [Sets: inputs])
    initial = None  # an input: its items when read (what the write-back changes)

    def __init__(self, values, frozen=False, **kw):
        super().__init__(**kw)
        self.values = set(values)
        self.frozen = frozen

    def python_type(self):
        return frozenset if self.frozen else set

    def is_python_constant(self):
        return not any(isinstance(v, VarKey) for v in self.values)

    def as_python_constant(self):
        if not self.is_python_constant():
            unimplemented("a set of tensors used as a Python constant")
        return self._items_now()

    def _items_now(self):
        """The items as a real set (stand-ins for tensors), in Python's order."""
        if self.real is not None:
            return self.real  # (its own order; the folds that read it do not change it)
        return frozenset(self.values) if self.frozen else set(self.values)

    def truthy(self, tx):
        return bool(self.values)

    def _ordered(self):
        """The items in Python's iteration order."""
        return list(self.real if self.real is not None else self.values)

    def unpack_var_sequence(self, tx):
        return [_wrap_const(v) for v in self._ordered()]

    def add(self, tx, var):
        self._mutate(tx)
        self.values.add(_set_item(var))
        guard_tensor_items(tx, self.values)

    def _mutate(self, tx):
        if self.frozen:
            unimplemented("mutation of a frozenset")
        tx.output.side_effects.mutate_container(self)
        self.real = None

    def call_method(self, tx, name, args, kwargs):
        if kwargs:
            unimplemented(f"set.{name} with keyword arguments")
        keys = [
            _set_item(a, key=True)
            for a in args
            if _tensor_key(a) is not None or _module_key(a) is not None
        ]
        others = [a.values for a in args if isinstance(a, SetVariable)]
        guard_tensor_items(tx, self.values, keys, *others)
        result = self._call_method(tx, name, args, kwargs)
        guard_tensor_items(tx, self.values)
        return result

    def _call_method(self, tx, name, args, kwargs):
        if name in _SET_MUTATORS:
            if name == "pop" and self.initial is not None:
                unimplemented("pop() of a set input (which item depends on the set's history)")
            self._mutate(tx)
            try:
                values = (
                    [_set_values(tx, a, ordered=True) for a in args]
                    if name.endswith("update")
                    else []
                )
            except ObservedException:
                if name in ("intersection_update", "symmetric_difference_update"):
                    raise  # (Python builds the other set first: this one is unchanged)
                _update_until_bad(tx, self.values, name, args)
                raise
            before = set(self.values) if self.initial is not None else None
            self._apply(tx, name, args, values)
            if before is not None:
                # the items added, in the order eager adds them (Note [Sets: inputs])
                added = [_set_item(args[0])] if name == "add" else [v for vs in values for v in vs]
                for v in list(self.added):
                    if v not in self.values:
                        del self.added[v]
                for v in added:
                    if v in self.values and v not in before:
                        self.added[v] = None
            if name == "pop":
                return self.popped
            return ConstantVariable(None)
        return self._call_query(tx, name, args)

    added = None  # an input: the items added to it, in order (the write-back adds them so)
    popped = None

    def _apply(self, tx, name, args, values):
        """Run a mutator on the items."""
        if self.initial is not None and self.added is None:
            self.added = {}
        if name == "add" and len(args) == 1:
            self.values.add(_set_item(args[0]))
        elif name in ("remove", "discard") and len(args) == 1:
            item = _set_item(args[0], key=True)
            if name == "remove" and item not in self.values:
                if isinstance(item, VarKey):
                    unimplemented("set.remove of an object not in the set (KeyError of it)")
                raise_observed(tx, KeyError, item)
            self.values.discard(item)
        elif name == "clear" and not args:
            self.values.clear()
        elif name == "pop" and not args:
            if not self.values:
                raise_observed(tx, KeyError, "pop from an empty set")
            self.popped = _wrap_const(self.values.pop())
        elif name.endswith("update"):
            try:
                getattr(self.values, name)(*values)
            except TypeError as e:  # (its arity: checked before it changes the set)
                observe(e)
                raise
        else:
            _arity_error(name, args)

    def _call_query(self, tx, name, args):
        """A method that does not change the set."""
        if name == "__contains__" and len(args) == 1:
            return ConstantVariable(_set_item(args[0], key=True) in self.values)
        if name == "__len__" and not args:
            return ConstantVariable(len(self.values))
        if name == "copy":
            if args:
                _arity_error(name, args, frozenset if self.frozen else set)
            if self.frozen:
                return self  # (a frozenset's copy is itself)
            return SetVariable(self.real if self.real is not None else self.values)  # (its order)
        if name in _STOPS_EARLY and len(args) == 1 and _is_iterator(args[0]):
            return _stop_early(tx, self.values, name, args[0])
        if name in _SET_PURE:
            values = [_set_values(tx, a, ordered=True) for a in args]  # (Python's own method)
            try:
                result = getattr(self._items_now(), name)(*values)
            except Exception as e:
                if type(e) is TypeError:  # its arity: Python's own error
                    observe(e)
                unimplemented(f"set.{name} raised {type(e).__name__}: {e}")
            if isinstance(result, (set, frozenset)):
                var = SetVariable((), isinstance(result, frozenset))
                var.values = result  # Python's own result (a copy may order the items anew)
                return var
            return _wrap_const(result)
        unimplemented(f"set.{name}")

    def reconstruct(self, cg):
        if self.source is not None:  # an input: itself (its changes are written back to it)
            self.source.reconstruct(cg)
            return
        if self.frozen:
            cg.load_object(frozenset, push_null=True)
        self.build_items(cg)
        if self.frozen:
            cg.extend(emit.call(1))

    def build_items(self, cg):
        """Emit code that pushes a new set of the items, iterating in this set's order."""
        if _merged_keeps_order(self.values):  # Note [Sets: iteration order is the table's]
            cg.extend(emit.build_set(0))
            cg.extend(emit.load_const(frozenset(self.values)))
            cg.extend(emit.inst("SET_UPDATE", 1))
            return
        self.build_set(cg, self.values)

    @staticmethod
    def build_set(cg, values, build=emit.build_set):
        """Emit code that pushes a new set of these items (with emit.build_tuple: a tuple)."""
        for v in values:
            if isinstance(v, (types.FunctionType, types.BuiltinFunctionType, type)):
                cg.load_object(v)  # (an input's items: Note [Sets: inputs])
            elif isinstance(v, VarKey):
                cg.reconstruct(v.var)
            else:
                _wrap_const(v).reconstruct(cg)
        cg.extend(build(len(values)))

    def __repr__(self):
        return f"SetVariable({self.values!r})"


def _merged_keeps_order(values):
    """Whether a set rebuilt as `{*frozenset(values)}` iterates as `values` does while one built
    item by item does not (a set merged from a literal's constant, grown otherwise): plain
    constants only."""
    if not all(type(v) in (str, int, float, bool, bytes, type(None)) for v in values):
        return False
    order = list(values)
    added = set()
    for v in order:
        added.add(v)
    return list(added) != order and list(set(frozenset(values))) == order


_SET_MUTATORS = {
    "add",
    "remove",
    "discard",
    "clear",
    "pop",
    "update",
    "intersection_update",
    "difference_update",
    "symmetric_difference_update",
}
_SET_PURE = {
    "union",
    "intersection",
    "difference",
    "symmetric_difference",
    "issubset",
    "issuperset",
    "isdisjoint",
    "__or__",
    "__and__",
    "__sub__",
    "__xor__",
    "__eq__",
    "__ne__",
    "__le__",
    "__lt__",
    "__ge__",
    "__gt__",
}


def _wrap_const(value):
    if isinstance(value, VarKey):
        return value.var
    return wrap_frozen(value, "set item")


class VarKey:
    """A set item held by its variable (a tensor, a module)."""

    __slots__ = ("var",)

    def __init__(self, var):
        self.var = var


class TensorKey(VarKey):
    """A traced tensor as a set item (Note [Sets: tensors as items])."""

    __slots__ = ()

    def __hash__(self):
        return id(self.var)

    def __eq__(self, other):
        return isinstance(other, TensorKey) and other.var is self.var

    def __repr__(self):
        return f"TensorKey({self.var!r})"


def _tensor_key(var):
    """The stand-in of a traced plain tensor, or None when var is no traced tensor."""
    if getattr(var, "proxy", None) is None or not isinstance(
        getattr(var, "example", None), torch.Tensor
    ):
        return None
    if var.python_type() not in (torch.Tensor, torch.nn.Parameter):
        unimplemented(f"a {var.python_type().__name__} as a set item (its own __hash__)")
    if getattr(var, "may_be", None) is not None:
        unimplemented("a set item that may be another tensor (Note [Operators: tensor identity])")
    return TensorKey(var)


class ModuleKey(VarKey):
    """An nn.Module as a set item (Note [Sets: modules as items])."""

    __slots__ = ()

    def __hash__(self):
        return id(self.var.value)

    def __eq__(self, other):
        return isinstance(other, ModuleKey) and other.var.value is self.var.value

    def __repr__(self):
        return f"ModuleKey({self.var!r})"


# Note [Sets: modules as items]
# nn.Module hashes and compares by identity, and torch's own traversals (named_modules,
# named_children, named_parameters) keep the modules they met in a set. A module kiln traces is
# one real object (from a source, or built while tracing), so it is held by a stand-in that
# hashes and compares by that object. What the trace folded is which of the modules from
# sources that went into a set (or were looked up in one) were the same object: for up to
# _PAIRED_MODULES of them that is what is guarded (Note [Guards: which objects are the same]), so
# any modules with that pattern reuse the entry (a module deep-copied per call, a second instance
# of a model); beyond that, a guard per pair grows too fast, and each module is guarded by
# identity (an ID_MATCH per module) instead.
def _module_key(var):
    """The stand-in of an nn.Module variable, or None when var is no module."""
    if isinstance(getattr(var, "value", None), torch.nn.Module):  # (a module's variable)
        if type(var.value).__hash__ is not object.__hash__:
            unimplemented(f"a {type(var.value).__name__} as a set item (its own __hash__)")
        return ModuleKey(var)
    return None


_PAIRED_MODULES = 8


def _guard_module_identities(tx, modules):
    """Modules from sources keep which of them are the same (Note [Sets: modules as items])."""
    guards = tx.output.guards
    for source, module in modules.items():
        seen = guards.same_objects("set modules", source, module, pairs_up_to=_PAIRED_MODULES)
        if len(seen) > _PAIRED_MODULES:  # (all of them once the group crosses the limit)
            pinned = seen.values() if len(seen) == _PAIRED_MODULES + 1 else [seen[id(module)]]
            for obj, first in pinned:
                guards.add(GuardKind.ID_MATCH, first, obj)


def guard_tensor_items(tx, *groups):
    """Tensors from outside the frame held or looked up together stay distinct objects;
    modules from outside the frame are pinned by identity (Note [Sets: modules as items])."""
    sourced = {}
    modules = {}
    for values in groups:
        for v in values:
            if isinstance(v, ModuleKey) and v.var.source is not None:
                modules.setdefault(v.var.source, v.var.value)
            if isinstance(v, TensorKey) and v.var.source is not None:
                sourced[id(v.var)] = v.var
    _guard_module_identities(tx, modules)
    tensors = list(sourced.values())
    for i, a in enumerate(tensors):
        for b in tensors[i + 1 :]:
            if a.source != b.source:
                tx.output.guards.add(GuardKind.DISTINCT, a.source, b.source)


def _set_item(var, key=False):
    """The constant item `var`; a key looked up (in, remove, discard) that is a set is looked up
    as the frozenset Python makes of it; an unhashable one raises Python's TypeError."""
    if key and hasattr(var, "key_value"):  # a set subclass instance looked up
        return var.key_value()
    tensor = _tensor_key(var)
    if tensor is not None:
        return tensor
    module = _module_key(var)
    if module is not None:
        return module
    if not var.is_python_constant():
        unimplemented(f"set item {var} is not a constant")
    value = var.as_python_constant()
    if key and isinstance(value, set):
        value = frozenset(value)
    try:
        hash(value)
    except TypeError as e:
        observe(e)
        unimplemented(f"unhashable set item {type(value).__name__}")
    return value


def _update_until_bad(tx, values, name, args):
    """set.update / difference_update whose items hold a bad one (unhashable, not iterable):
    Python adds (discards) the items before it, then raises; done here, then the error raised."""
    if not all(isinstance(a, (SetVariable, ConstantVariable, BaseListVariable)) for a in args):
        unimplemented(f"set.{name} of a bad item in an iterator (Python changes the set up to it)")
    change = values.add if name == "update" else values.discard
    for a in args:
        for v in list(_set_values(tx, a)) if isinstance(a, SetVariable) else _items(tx, a):
            change(v)


def _items(tx, var):
    """The items of a constant or list/tuple, one by one (raising at the first bad one)."""
    if isinstance(var, ConstantVariable) and not _iterable(var.value):
        _set_values(tx, var)  # (raises Python's TypeError)
    for item in var.unpack_var_sequence(tx):
        yield _set_item(item)


def _is_iterator(var):
    """An iterator (a generator, iter(list) ...): consuming it is seen by the program."""
    return hasattr(var, "next_item") and not isinstance(var, SetVariable)


# the queries that take an iterator's items only until one decides (issubset since 3.12)
_STOPS_EARLY = ("isdisjoint", "issuperset") + (("issubset",) if sys.version_info >= (3, 12) else ())


def _stop_early(tx, values, name, it):
    """`s.isdisjoint(it)` / `s.issuperset(it)` / `s.issubset(it)` of an iterator: Python takes
    items only until one decides (a common item; an item not in s; the last of s found),
    leaving the rest of `it` unconsumed."""
    if name == "issubset":
        if not values:
            unimplemented("set().issubset(iterator)")  # (whether it takes an item: not modelled)
        seen = set()
        while (item := it.next_item(tx)) is not None:
            key = _set_item(item, key=True)
            if key in values:
                seen.add(key)
                if len(seen) == len(values):
                    return ConstantVariable(True)
        return ConstantVariable(False)
    while (item := it.next_item(tx)) is not None:
        found = _set_item(item, key=True) in values
        if found == (name == "isdisjoint"):
            return ConstantVariable(False)
    return ConstantVariable(True)


def _arity_error(name, args, base=set):
    """set.<name> called with arguments it does not take: Python's TypeError."""
    try:
        getattr(base(), name)(*[None] * len(args))
    except TypeError as e:
        observe(e)
    unimplemented(f"set.{name} with these arguments")


def _set_values(tx, var, ordered=False):
    """The items of an iterable as a set; `ordered`: those of a sequence as a list in its order
    (`s.update(seq)` adds them in that order, which decides the table of colliding items)."""
    if isinstance(var, SetVariable):
        return var.values
    if hasattr(var, "base_set"):  # a set subclass instance: its items (Note [Sets: subclass ...])
        return var.base_set.values
    if isinstance(var, ConstantVariable) and not _iterable(var.value):
        raise_observed(tx, TypeError, f"'{type(var.value).__name__}' object is not iterable")
    if isinstance(var, ConstantVariable) and type(var.value) in (set, frozenset):
        # the constant itself: Python merges a set's table as it is (`{*big_literal}` is
        # SET_UPDATE of a frozenset constant), and a copy built item by item may order
        # differently (Note [Sets: iteration order is the table's])
        return var.value
    items = [_set_item(v) for v in var.unpack_var_sequence(tx)]
    values = set(items)
    guard_tensor_items(tx, values)
    return items if ordered else values


def _iterable(value):
    try:
        iter(value)
    except TypeError:
        return False
    return True
