"""Sequences: tuple, list, torch.Size, range, and iterators over them."""

import collections
import itertools
import operator
import sys
from collections import deque

import torch

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.source import AttrSource, GetItemSource
from kiln.frontend.variables import constant, tuple_reads
from kiln.frontend.variables.base import BoundMethodVariable, VariableTracker, wrap_value
from kiln.frontend.variables.constant import ConstantVariable, is_literal, short_range
from kiln.frontend.variables.exceptions import observe, raise_observed
from kiln.frontend.variables.finalizers import check_drops, check_iterated, old_items
from kiln.frontend.variables.list_growth import items_for_growing


class BaseListVariable(VariableTracker):
    """A sequence whose items are VariableTrackers."""

    container = tuple
    exact_type = True

    def __init__(self, items, **kw):
        super().__init__(**kw)
        self.items = list(items)

    def python_type(self):
        return self.container

    def is_python_constant(self):
        return all(i.is_python_constant() for i in self.items)

    def as_python_constant(self):
        return self.container(i.as_python_constant() for i in self.items)

    def truthy(self, tx):
        return bool(self.items)

    def unpack_var_sequence(self, tx):
        return list(self.items)

    def getitem(self, tx, index):
        if isinstance(index, slice):
            return type(self)(self.items[index])
        try:
            return self.items[index]
        except IndexError:
            raise_observed(tx, IndexError, f"{self.kind()} index out of range")

    def kind(self):
        """The type name Python's error messages use (a torch.Size is a tuple)."""
        t = self.python_type()
        return "range object" if t is range else t.__name__ if t in (list, deque) else "tuple"

    def find(self, tx, value, start=0, stop=None):
        """The index of the first item equal to `value` (identity first, then ==) in
        items[start:stop], or None."""
        from kiln.frontend.variables.operators import _identical, compare_vars

        stop = len(self.items) if stop is None else stop
        for i in range(start, stop):
            item = self.items[i]
            if _identical(item, value) or compare_vars(tx, operator.eq, item, value).truthy(tx):
                return i
        return None

    def call_method(self, tx, name, args, kwargs):
        from kiln.frontend.variables.operators import compare_vars

        if name == "__getitem__" and len(args) == 1:
            return self.getitem(tx, args[0].as_python_constant())
        if name == "__len__":
            return ConstantVariable(len(self.items))
        if name == "__iter__" and not args and not kwargs:  # `seq.__iter__()`: as iter(seq)
            return ListIteratorVariable.over(tx, self)
        if name == "index" and 1 <= len(args) <= 3 and not kwargs:
            bounds = [a.as_python_constant() for a in args[1:]]  # (start, stop: as a slice's)
            if not all(type(b) is int for b in bounds):
                unimplemented(f"{self.container.__name__}.index with bounds {bounds!r}")
            start, stop, _ = (
                slice(*bounds, None).indices(len(self.items)) if bounds else (0, None, 1)
            )
            i = self.find(tx, args[0], start, stop)
            if i is None:
                message = "{!r} is not in list" if self.kind() == "list" else None
                _not_found(tx, args[0], message or "tuple.index(x): x not in tuple")
            return ConstantVariable(i)
        if name == "count" and len(args) == 1:
            n = sum(compare_vars(tx, operator.eq, i, args[0]).truthy(tx) for i in self.items)
            return ConstantVariable(n)
        unimplemented(f"{self.container.__name__}.{name}")

    def reconstruct(self, cg):
        if self.source is not None:  # never mutated while tracing: the object itself
            self.source.reconstruct(cg)
            return
        for item in self.items:
            cg.reconstruct(item)
        cg.extend(self._build(len(self.items)))

    def _build(self, n):
        return emit.build_tuple(n)

    def __repr__(self):
        return f"{type(self).__name__}({self.items!r})"


# (tx, tuple variable, name) -> a member of its class written in Python, or None (namedtuples.py)
TUPLE_MEMBERS = []
# the operators a tuple subclass may define in Python: its own run, not tuple's
_OWN_DUNDERS = frozenset({"__getitem__", "__len__", "__contains__", "__iter__"})


class TupleVariable(BaseListVariable):
    """A tuple; `tuple_cls` is a tuple subclass with named fields (torch.return_types.max ...)."""

    container = tuple
    unread = None  # a dict_reads.LazyInput while an input's items are left to read (tuple_reads)

    def __init__(self, items, tuple_cls=tuple, **kw):
        super().__init__(items, **kw)
        self.tuple_cls = tuple_cls

    @property
    def items(self):
        """The items, every one wrapped (Note [Tuples: inputs guarded by the items read])."""
        if self.unread is not None:
            tuple_reads.read_all(self)
        return self.raw_items

    @items.setter
    def items(self, items):
        if self.unread is not None:
            tuple_reads.read_all(self)
        self.raw_items = items

    def truthy(self, tx):
        return bool(self.raw_items)

    def __repr__(self):  # (items not read yet show as <unread>: a repr reads nothing)
        return f"{type(self).__name__}({self.raw_items!r})"

    def python_type(self):
        return self.tuple_cls

    @property
    def keeps_identity(self):
        """An instance with a __dict__ (a namedtuple's subclass) is rebuilt once: its attributes
        set after a break live on that one object."""
        return self.tuple_cls.__dictoffset__ != 0

    def as_python_constant(self):
        items = [i.as_python_constant() for i in self.items]
        if self.tuple_cls is tuple:
            return tuple(items)
        make = getattr(self.tuple_cls, "_make", None)  # a namedtuple; else a structseq
        return make(items) if make is not None else self.tuple_cls(items)

    def var_getattr(self, tx, name):
        fields = getattr(self.tuple_cls, "__match_args__", None) or getattr(
            self.tuple_cls, "_fields", ()
        )
        if name in fields:
            return self.items[list(fields).index(name)]
        if name in ("_replace", "_asdict") and hasattr(self.tuple_cls, "_fields"):
            return BoundMethodVariable(self, name)
        if name == "_fields" and isinstance(getattr(self.tuple_cls, "_fields", None), tuple):
            # (the names the items are read by above: taken as the class has them)
            return TupleVariable([ConstantVariable(f) for f in self.tuple_cls._fields])
        for member in TUPLE_MEMBERS if self.tuple_cls is not tuple else ():
            found = member(tx, self, name)  # Note [Namedtuples: methods of a subclass]
            if found is not None:
                return found
        return super().var_getattr(tx, name)

    def getitem(self, tx, index):
        if self.unread is not None and type(index) is int:
            n = len(self.raw_items)
            if -n <= index < n:  # (one item read: Note [Tuples: inputs guarded by the items read])
                return tuple_reads.read_item(self, index % n)
        if (
            isinstance(index, slice)
            and self.tuple_cls is tuple
            and index.indices(len(self.items)) == (0, len(self.items), 1)
        ):
            return self  # (a whole slice of an exact tuple is the tuple: Note [Sequences: + and *])
        return super().getitem(tx, index)

    def call_method(self, tx, name, args, kwargs):
        if name == "__len__" and not args and not kwargs and self.tuple_cls is tuple:
            return ConstantVariable(len(self.raw_items))
        if name in _OWN_DUNDERS and self.tuple_cls is not tuple:
            for member in TUPLE_MEMBERS:  # `p[i]` of a class with its own __getitem__ ...
                found = member(tx, self, name)
                if found is not None:
                    return found.call_function(tx, args, kwargs)
        fields = getattr(self.tuple_cls, "_fields", None)
        if fields is not None and name == "_replace" and not args:
            unknown = set(kwargs) - set(fields)
            if unknown:
                unimplemented(f"{self.tuple_cls.__name__}._replace: unexpected fields {unknown}")
            items = [kwargs.get(f, item) for f, item in zip(fields, self.items)]
            return TupleVariable(items, tuple_cls=self.tuple_cls)
        if fields is not None and name == "_asdict" and not args and not kwargs:
            from kiln.frontend.variables.dicts import ConstDictVariable

            return ConstDictVariable(dict(zip(fields, self.items)))
        return super().call_method(tx, name, args, kwargs)

    def reconstruct(self, cg):
        if self.tuple_cls is tuple or self.source is not None:
            return super().reconstruct(cg)
        if self.tuple_cls in constant.REMADE_CLASSES:  # Note [Namedtuples: classes made in ...]
            return constant.remake_instance(
                cg, self.tuple_cls, lambda: BaseListVariable.reconstruct(self, cg)
            )
        make = getattr(self.tuple_cls, "_make", None)  # namedtuple: cls._make(iterable)
        cg.load_object(make if make is not None else self.tuple_cls, push_null=True)
        super().reconstruct(cg)
        cg.extend(emit.call(1))


class SizeVariable(TupleVariable):
    """`tensor.shape`: a tuple of sizes (ints while every size is specialised)."""

    def __init__(self, items, **kw):
        super().__init__(items, **kw)

    def python_type(self):
        return torch.Size

    def as_python_constant(self):
        return torch.Size(i.as_python_constant() for i in self.items)

    def getitem(self, tx, index):
        if isinstance(index, slice):
            return SizeVariable(self.items[index])
        return super().getitem(tx, index)

    def call_method(self, tx, name, args, kwargs):
        if name == "numel" and not args:
            n = 1
            for i in self.items:
                n *= i.as_python_constant()
            return ConstantVariable(n)
        return super().call_method(tx, name, args, kwargs)

    def reconstruct(self, cg):
        if self.source is not None:  # immutable: the object itself
            self.source.reconstruct(cg)
            return
        if self.is_python_constant():
            cg.load_object(self.as_python_constant())
            return
        cg.load_object(torch.Size, push_null=True)  # symbolic sizes: torch.Size((s0, 3))
        for item in self.items:
            cg.reconstruct(item)
        cg.extend(emit.build_tuple(len(self.items)))
        cg.extend(emit.call(1))


class ListVariable(BaseListVariable):
    container = list

    def _build(self, n):
        return emit.build_list(n)

    def _mutate(self, tx, drops=(), what="store"):
        """Record a mutation; `drops`: the items it removes (Note [Finalizers: a store that may
        run __del__])."""
        check_drops(drops, f"{self.python_type().__name__}.{what}")
        tx.output.side_effects.mutate_container(self)

    def call_method(self, tx, name, args, kwargs):
        if name == "append" and len(args) == 1:
            self._mutate(tx)
            self.items.append(args[0])
            return ConstantVariable(None)
        if name == "extend" and len(args) == 1 and getattr(args[0], "steps_lazily", False):
            self._mutate(tx)  # a generator: each item is appended before the next is made
            while (item := args[0].next_item(tx)) is not None:
                self.items.append(item)
            return ConstantVariable(None)
        if name == "extend" and len(args) == 1:
            items = items_for_growing(tx, args[0], self, f"{self.python_type().__name__}.extend")
            self._mutate(tx)
            self.items.extend(items)
            return ConstantVariable(None)
        if name == "insert" and len(args) == 2:
            self._mutate(tx)
            self.items.insert(args[0].as_python_constant(), args[1])
            return ConstantVariable(None)
        if name == "pop" and len(args) <= 1:
            index = args[0].as_python_constant() if args else -1
            if not self.items:
                raise_observed(tx, IndexError, "pop from empty list")
            if not -len(self.items) <= index < len(self.items):
                raise_observed(tx, IndexError, "pop index out of range")
            self._mutate(tx, [self.items[index]], name)
            return self.items.pop(index)
        if name == "remove" and len(args) == 1:
            i = self.find(tx, args[0])
            if i is None:
                _not_found(tx, args[0], "list.remove(x): x not in list")
            self._mutate(tx, [self.items[i]], name)
            del self.items[i]
            return ConstantVariable(None)
        if name == "reverse" and not args:
            self._mutate(tx)
            self.items.reverse()
            return ConstantVariable(None)
        if name == "copy" and not args:
            return ListVariable(self.items)
        if name == "sort" and not args:
            from kiln.frontend.variables.builtin import sort_items

            self._mutate(tx)
            self.items[:] = sort_items(tx, self.items, kwargs.get("key"), kwargs.get("reverse"))
            return ConstantVariable(None)
        if name == "clear" and not args:
            self._mutate(tx, self.items, name)
            self.items.clear()
            return ConstantVariable(None)
        if name == "__setitem__" and len(args) == 2:
            index = args[0].as_python_constant()
            self._mutate(tx, old_items(self.items, index), name)
            try:  # the real list raises what Python raises (a bad index type, out of range)
                if isinstance(index, slice):
                    self.items[index] = args[1].unpack_var_sequence(tx)
                else:
                    self.items[index] = args[1]
            except (TypeError, IndexError, ValueError) as e:
                observe(e)
                unimplemented(f"list.__setitem__ raised {type(e).__name__}")
            return ConstantVariable(None)
        return super().call_method(tx, name, args, kwargs)


# iterator makers registered by the modules that know them: the deque's (deque_iters), a
# dict-subclass object's (dict_objects)
ITERATORS = {}


class DequeVariable(ListVariable):
    """A collections.deque: its items (a list-like traced value) and maxlen. Mutations are
    replayed after the graph as `d.clear(); d.extend(items)` (SideEffects.codegen); a deque made
    while tracing is rebuilt as `deque(items, maxlen)`. `state` counts the changes its iterators
    check (Note [Deques: iterators])."""

    state = 0

    def iter_var(self, tx, reverse=False):
        return ITERATORS[DequeVariable](self, reverse)

    def __init__(self, items, maxlen=None, **kw):
        super().__init__(items, **kw)
        self.maxlen = maxlen
        if maxlen is not None:
            del self.items[: max(0, len(self.items) - maxlen)]

    def python_type(self):
        return collections.deque

    def is_python_constant(self):
        return False  # mutable: never folded into a constant

    def as_python_constant(self):
        # (a deque, not a list: str() of one shows `deque([...])`)
        return collections.deque((i.as_python_constant() for i in self.items), self.maxlen)

    def var_getattr(self, tx, name):
        if name == "maxlen":
            return ConstantVariable(self.maxlen)
        return super().var_getattr(tx, name)

    def getitem(self, tx, index):
        if isinstance(index, slice):
            unimplemented("deque slicing (TypeError in Python)")
        return super().getitem(tx, index)

    def _bound(self, left):
        """Drop items beyond maxlen from the other end (what a full deque does)."""
        if self.maxlen is not None and len(self.items) > self.maxlen:
            if left:
                del self.items[self.maxlen :]
            else:
                del self.items[: len(self.items) - self.maxlen]

    def call_method(self, tx, name, args, kwargs):
        if kwargs:
            unimplemented(f"deque.{name} with keyword arguments")
        if self.maxlen is not None and name in ("append", "extend", "appendleft", "extendleft"):
            check_drops(self.items, f"deque.{name}")  # (a full deque drops from the other end)
        if name in ("append", "extend"):
            before = len(self.items)
            super().call_method(tx, name, args, kwargs)
            self.state += len(self.items) > before  # (one or more items added)
            self._bound(left=False)
            return ConstantVariable(None)
        if name in ("appendleft", "extendleft") and len(args) == 1:
            self._mutate(tx)
            if name == "appendleft":
                new = [args[0]]
            elif getattr(args[0], "steps_lazily", False):  # a generator: one item at a time
                while (item := args[0].next_item(tx)) is not None:
                    self.state += 1
                    self.items.insert(0, item)
                    self._bound(left=True)
                return ConstantVariable(None)
            else:
                new = items_for_growing(tx, args[0], self, "deque.extendleft")
            self.state += bool(new)
            self.items[:0] = list(reversed(new))
            self._bound(left=True)
            return ConstantVariable(None)
        if name in ("pop", "popleft") and not args:
            if not self.items:
                raise_observed(tx, IndexError, "pop from an empty deque")
            self._mutate(tx, [self.items[0 if name == "popleft" else -1]], name)
            self.state += 1
            return self.items.pop(0 if name == "popleft" else -1)
        if (name == "clear" and not args) or (name == "insert" and len(args) == 2):
            if name == "insert" and self.maxlen is not None and len(self.items) >= self.maxlen:
                raise_observed(tx, IndexError, "deque already at its maximum size")
            self.state += name == "insert" or bool(self.items)
            return super().call_method(tx, name, args, kwargs)
        if name == "rotate" and len(args) <= 1:
            self._mutate(tx)
            n = args[0].as_python_constant() if args else 1
            self.state += len(self.items) > 1
            if self.items:
                n %= len(self.items)
                self.items[:] = self.items[-n:] + self.items[:-n] if n else self.items
            return ConstantVariable(None)
        if name == "copy" and not args:
            return DequeVariable(self.items, self.maxlen)
        if name in ("clear", "reverse", "__len__", "__getitem__", "__setitem__", "index", "count"):
            if name == "__setitem__" and isinstance(args[0].as_python_constant(), slice):
                unimplemented("deque slice assignment (TypeError in Python)")
            return super().call_method(tx, name, args, kwargs)
        unimplemented(f"deque.{name}")

    def reconstruct(self, cg):
        if self.source is not None:
            self.source.reconstruct(cg)
            return
        cg.load_object(collections.deque, push_null=True)
        for item in self.items:
            cg.reconstruct(item)
        cg.extend(emit.build_list(len(self.items)))
        cg.extend(emit.load_const(self.maxlen))
        cg.extend(emit.call(2))

    def __repr__(self):
        return f"DequeVariable({self.items!r}, maxlen={self.maxlen})"


def make_deque(tx, args, kwargs):
    """`collections.deque(iterable=(), maxlen=None)` made while tracing."""
    names = ("iterable", "maxlen")
    if len(args) > 2 or set(kwargs) - set(names):
        unimplemented("deque() with these arguments")
    bound = dict(zip(names, args)) | kwargs
    maxlen = bound.get("maxlen")
    maxlen = maxlen.as_python_constant() if maxlen is not None else None
    if maxlen is not None and (type(maxlen) is not int or maxlen < 0):
        unimplemented("deque() with a bad maxlen (Python raises)")
    it = bound.get("iterable")
    return DequeVariable(it.unpack_var_sequence(tx) if it is not None else [], maxlen)


def wrap_deque(tx, value, source):
    """A deque reached from a source: its items (guarded by length and maxlen)."""
    tx.output.guards.add(GuardKind.LIST_LENGTH, source, (type(value), len(value)))
    tx.output.guards.add(GuardKind.CONSTANT_MATCH, AttrSource(source, "maxlen"), value.maxlen)
    items = [wrap_value(tx, v, GetItemSource(source, i)) for i, v in enumerate(value)]
    return DequeVariable(items, value.maxlen, source=source)


class RangeVariable(BaseListVariable):
    """range(...) of constants, kept as its items."""

    container = list

    def __init__(self, value, **kw):
        if not short_range(value):  # (its items are kept one by one: range(sys.maxsize))
            unimplemented(f"{value!r} (too long to keep its items)")
        super().__init__([ConstantVariable(v) for v in value], **kw)
        self.value = value

    def python_type(self):
        return range

    def as_python_constant(self):
        return self.value

    def getitem(self, tx, index):
        if not isinstance(index, slice) and not -len(self.value) <= index < len(self.value):
            raise_observed(tx, IndexError, "range object index out of range")
        r = self.value[index]
        return RangeVariable(r) if isinstance(r, range) else ConstantVariable(r)

    def reconstruct(self, cg):
        cg.extend(emit.load_const(self.value))


# Iterators advanced by the root instruction being traced, with their index before it: an
# instruction that breaks after consuming an iterator (sorted(d.items(), key=...)) runs again in
# Python on the iterator as it was (see undo_iterators).
_ITER_UNDO = []


def start_instruction():
    """The root translator starts an instruction: forget the previous one's iterator steps."""
    _ITER_UNDO.clear()


def undo_iterators(since=0):
    """Put the iterators the breaking instruction advanced back where they were (the steps
    after the first `since`)."""
    for it, index in reversed(_ITER_UNDO[since:]):
        it.index = index
    del _ITER_UNDO[since:]


def iterator_steps():
    """How many iterator steps undo_iterators would undo now."""
    return len(_ITER_UNDO)


_NOT_ITERABLE = (int, float, complex, bool, type(None))  # `for x in 1`: TypeError


# Note [Iterators: inputs]
# A tuple (or range) iterator reaching a frame from outside (most often the `for` loop's iterator that a
# resume function receives on its stack, `iter((remaining items))`) is traced as an iterator
# over its remaining items: the guards check its type and the items it has left
# (`___iter_rest(it)`, read without advancing it), as a tuple input's. The real iterator is
# shared with the caller, so the items the trace takes from it are taken from it after the
# graph (`advance_iter`, a side effect), and a rebuild passes the real iterator on. Iterators
# over lists, dicts and generators stay opaque (their containers can change under them).


# Note [Iterators: itertools kinds]
# The itertools iterators over traced items (repeat, islice, product, combinations ...) are built
# at once as an iterator over their items, with `kind` the class they stand for: type() and
# isinstance see that class, and a rebuild makes an object of it (repeat(x, n), islice(items,
# None), chain(items)), or breaks where it cannot (a list iterator in their place would show
# another type, repr and size).

# Note [Iterators: exhausted list iterators]
# A list's iterator that has once ended (a `for` loop ran it out, list(it), a next() that raised
# StopIteration) drops its list: items appended later are not seen by it, while an iterator that
# merely reached the end by next() calls still sees them. The live iterator models the drop by
# moving its index to _DEAD (past any length, undone as any step is), and is rebuilt as an
# ended list iterator.
_DEAD = sys.maxsize


# Note [Dicts: keys changed while iterated]
# A dict that loses a key and gains one while it is iterated keeps its size, and Python's
# iterator then raises "dictionary keys changed during iteration" (or skips and repeats keys; an
# OrderedDict's raises "mutated during iteration" for a moved key too). kiln models the size
# check only, so a dict iterator whose dict lost or moved a key since it was made is a graph
# break at its next step, and is not rebuilt at a break (dict_iters.rebuild): Python runs it.
_KEYS_CHANGED = (
    "iterating a dict that lost a key while it was iterated (Python's iterator may raise "
    "'dictionary keys changed during iteration'): not modelled"
)


class ListIteratorVariable(VariableTracker):
    """An iterator over known items (a list, tuple, range, zip, enumerate ... of traced values)."""

    ran_ahead = False  # items computed by user code before they were asked for (map, generator)
    keeps_identity = True  # rebuilt once: a local and an argument on the stack are one iterator

    def __init__(self, items, **kw):
        super().__init__(**kw)
        self.items = list(items)
        self.index = 0

    @classmethod
    def over_list(cls, lst):
        """iter(a list): shares the list's items, so items appended while looping are seen."""
        it = cls(())
        it.items = lst.items
        it.live_list = lst
        return it

    @classmethod
    def over(cls, tx, obj):
        """iter(obj) (GET_ITER, iter()): a list's live iterator; over a dict or set, one that
        raises RuntimeError as Python's does when the container changes size while iterated;
        else an iterator over a snapshot of the items."""
        if isinstance(obj, cls):
            return obj
        if type(obj) is ListVariable:
            return cls.over_list(obj)
        check_iterated(obj, "iter()")
        if hasattr(obj, "iter_var"):  # a dict view (Note [Dicts: views]), a deque
            return obj.iter_var(tx)
        if getattr(obj, "dict_items", None) is not None:  # a dict-subclass object made here
            it = ITERATORS["dict object"](tx, obj)
            if it is not None:
                return it
        if getattr(obj, "source", None) is not None and type(obj).__name__ == (
            "UserDefinedObjectVariable"
        ):  # a dict-subclass object from outside the frame
            it = ITERATORS["input dict object"](tx, obj)
            if it is not None:
                return it
        if type(obj).__name__ == "ConstDictVariable":
            return cls.over_dict(obj, obj.unpack_var_sequence(tx), view=False)
        if isinstance(obj, ConstantVariable) and type(obj.value) in _NOT_ITERABLE:
            raise_observed(tx, TypeError, f"'{type(obj.value).__name__}' object is not iterable")
        it = cls(obj.unpack_var_sequence(tx))
        from kiln.frontend.variables.sets import SetVariable  # (sets builds on lists)

        if isinstance(obj, SetVariable):
            it.watched = (obj, len(obj.values), "Set changed size during iteration")
        return it

    @classmethod
    def over_dict(cls, d, items, view=True, kind="keys"):
        """An iterator over a dict (or its keys/values/items view) that raises as Python's does
        when the dict changes size while it is iterated."""
        it = cls(items)
        it.dict_kind = kind  # (Note [Dicts: iterators at a break])
        it.keys_at_start = list(d.items)  # (Note [Dicts: iterators of dicts made in the frame])
        it.removals_at_start = getattr(d, "removals", 0)  # Note [Dicts: keys changed while ...]
        if issubclass(getattr(d, "user_cls", dict), collections.OrderedDict):
            # an OrderedDict's iterator raises once, then ends (a dict's and a set's go on raising)
            it.watched = (d, len(d.items), "OrderedDict mutated during iteration")
            it.sticky = False
        else:
            it.watched = (d, len(d.items), "dictionary changed size during iteration")
        it.view = view
        return it

    view = False  # a dict view (a snapshot of it, taken when the view was made)

    live_list = None
    end_error = None  # zip(strict=True) of unequal lengths: its ValueError at the end
    watched = None  # (dict or set, its size, Python's error when the size changes)
    failed = False  # raised one of those errors
    sticky = True  # every next() raises it again once raised (a dict's, a set's iterator)

    ran_out = False  # next() found the end
    kind = None  # the itertools class the iterator stands for (Note [Iterators: itertools kinds])

    def python_type(self):
        if self.kind is not None:
            return self.kind
        kind = getattr(self, "dict_kind", None)
        if kind is not None:  # a dict's (an OrderedDict's) own iterator type
            ordered = issubclass(
                getattr(self.watched[0], "user_cls", dict), collections.OrderedDict
            )
            return type(iter(getattr(collections.OrderedDict() if ordered else {}, kind)()))
        return type(iter([]))

    def next_item(self, tx=None):
        """The next item, or None when exhausted."""
        if self.watched is not None and (not self.failed or self.sticky):
            message = self.watched[2]
            if self._size_changed():
                if self.view and self.index == 0:  # Python would iterate the dict as it is now
                    unimplemented("iterating a dict view made before the dict changed size")
                self.failed = True  # (Python's iterator is exhausted after raising)
                self.index = len(self.items)
                raise_observed(None, RuntimeError, message)
            if self.keys_changed():
                unimplemented(_KEYS_CHANGED)
        if self.index >= len(self.items):
            self.ran_out = True  # (a dict's iterator lets go of its dict then)
            if self.end_error is not None and not self.failed:
                self.failed = True
                raise_observed(None, ValueError, self.end_error)
            if self.live_list is not None and self.index != _DEAD:
                _ITER_UNDO.append((self, self.index))
                self.index = _DEAD  # Note [Iterators: exhausted list iterators]
            return None
        item = self.items[self.index]
        _ITER_UNDO.append((self, self.index))
        self.index += 1
        return item

    def keys_changed(self):
        """Note [Dicts: keys changed while iterated]: whether the dict iterated lost a key (or,
        an OrderedDict, moved one) since the iterator was made."""
        start = getattr(self, "removals_at_start", None)
        return start is not None and getattr(self.watched[0], "removals", 0) != start

    def _size_changed(self):
        from kiln.frontend.variables.sets import SetVariable  # (sets builds on lists)

        container, size, _ = self.watched
        now = len(container.values if isinstance(container, SetVariable) else container.items)
        return now != size

    def unpack_var_sequence(self, tx):
        rest = self.items[self.index :]
        _ITER_UNDO.append((self, self.index))
        self.index = len(self.items) if self.live_list is None else _DEAD
        if self.end_error is not None or self.watched is not None:
            self.next_item()  # (raises what Python's iterator raises at its end)
        return rest

    def call_method(self, tx, name, args, kwargs):
        if name == "__next__" and not args and not kwargs:
            item = self.next_item(tx)
            if item is None:
                raise_observed(tx, StopIteration)
            return item
        if name == "__iter__" and not args and not kwargs:
            return self  # (an iterator is its own iterator)
        unimplemented(f"iterator.{name}")

    def reconstruct(self, cg):
        if self.failed or self.end_error is not None:
            # (a dict/set iterator is rebuilt over its remaining keys: the resumed code no longer
            # checks the container's size)
            unimplemented("rebuilding a zip(strict=True) iterator or one that raised")
        if self.watched is not None and self._size_changed():
            unimplemented("rebuilding an iterator over a dict or set that changed size")
        if self.kind is not None:
            self._reconstruct_kind(cg)
            return
        if self.index == _DEAD:
            cg.load_object(exhausted_list_iter, push_null=True)
            cg.extend(emit.call(0))
            return
        if self.watched is not None and ITERATORS.get("rebuild dict", _no)(cg, self):
            return  # a real dict iterator (Note [Dicts: iterators at a break])
        if self.watched is not None and self.keys_changed():
            unimplemented(_KEYS_CHANGED)  # (no rebuild tells it: the frame runs in Python)
        if self.live_list is not None and self.live_list.items is self.items:
            # the same list object, advanced to where the trace is
            cg.load_object(list_iter_at, push_null=True)
            cg.reconstruct(self.live_list)
            cg.extend(emit.load_const(self.index))
            cg.extend(emit.call(2))
            return
        _rebuild_tuple(cg, self.items[self.index :])
        cg.extend(emit.get_iter())

    def _reconstruct_kind(self, cg):
        """Rebuild an itertools iterator as an object of its own class with the items left."""
        if self.failed or self.end_error is not None or self.watched is not None:
            unimplemented(f"rebuilding an itertools.{self.kind.__name__} iterator that raised")
        rest = self.items[self.index :]
        if self.kind in (zip, enumerate):
            ITERATORS["rebuild zip"](cg, self, rest)
            return
        if self.kind is itertools.repeat:
            cg.load_object(itertools.repeat, push_null=True)
            cg.reconstruct(self.repeated)
            cg.extend(emit.load_const(len(rest)))
            cg.extend(emit.call(2))
            return
        if self.kind not in (itertools.islice, itertools.chain):
            unimplemented(f"rebuilding an itertools.{self.kind.__name__} iterator")
        cg.load_object(self.kind, push_null=True)
        _rebuild_tuple(cg, rest)
        if self.kind is itertools.islice:  # islice(items, None): the same items
            cg.extend(emit.load_const(None))
        cg.extend(emit.call(2 if self.kind is itertools.islice else 1))


def _no(cg, it):
    return False


def _rebuild_tuple(cg, items):
    """Push a tuple of `items`: one constant when they all are literals (an iterator over many
    constants left at a break: `chain.from_iterable(repeat(range(6), 10000))`)."""
    if all(type(v) is ConstantVariable and is_literal(v.value) for v in items):
        cg.extend(emit.load_const(tuple(v.value for v in items)))
        return
    for item in items:
        cg.reconstruct(item)
    cg.extend(emit.build_tuple(len(items)))


class InputIteratorVariable(ListIteratorVariable):
    """A tuple iterator from outside the frame: its items wrapped (and guarded) one by one as the
    trace takes them, advanced by the replay as far as the trace advanced it (Note [Iterators:
    inputs])."""

    def __init__(self, item, iter_type, finalized=False, **kw):
        super().__init__((), **kw)
        self.item = item  # k -> the k-th item left, wrapped and guarded; None past the end
        self.iter_type = iter_type  # tuple_iterator or range_iterator
        self.ended = False
        self.finalized = finalized  # its tuple's class has __del__

    def python_type(self):
        return self.iter_type

    def _fetch(self, upto):
        while not self.ended and len(self.items) < upto:
            got = self.item(len(self.items))
            if got is None:
                self.ended = True
            else:
                self.items.append(got)

    def next_item(self, tx=None):
        self._fetch(self.index + 1)
        item = super().next_item(tx)
        if item is None:
            self._run_out()
        return item

    def unpack_var_sequence(self, tx):
        self._fetch(float("inf"))
        rest = super().unpack_var_sequence(tx)
        self._run_out()
        return rest

    def _run_out(self):
        """The trace found the end: the replay takes one step more, past it, as Python's did
        (a tuple iterator lets go of its tuple there)."""
        if self.index == len(self.items):
            if self.finalized:  # (the step may free it: its __del__ runs at the next())
                unimplemented("a tuple iterator running out over a tuple whose class has __del__")
            _ITER_UNDO.append((self, self.index))
            self.index += 1

    def reconstruct(self, cg):
        self.source.reconstruct(cg)  # the real iterator, advanced by the replay


def unpack_error(tx, seq, expected, got, at_least=False):
    """Unpacking `got` items into `expected` targets: Python's ValueError (an iterator would
    have been consumed only partly: not modelled)."""
    if isinstance(seq, ListIteratorVariable):
        unimplemented(f"unpacking {got} values of an iterator into {expected}")
    if got > expected and not at_least:
        raise_observed(tx, ValueError, f"too many values to unpack (expected {expected})")
    least = "at least " if at_least else ""
    message = f"not enough values to unpack (expected {least}{expected}, got {got})"
    raise_observed(tx, ValueError, message)


def _not_found(tx, value, message):
    """Raise ValueError(message) for a missing list item (message may format the item's repr)."""
    if "{" in message:
        if not value.is_python_constant():
            unimplemented(f"ValueError: {message.format('<traced value>')}")
        message = message.format(value.as_python_constant())
    raise_observed(tx, ValueError, message)


def exhausted_list_iter():
    """A list iterator that has ended (it sees nothing appended to its list afterwards)."""
    it = iter([])
    next(it, None)
    return it


def list_iter_at(lst, index):
    """iter(lst) advanced by `index` items (the transformed code's rebuilt list iterator)."""
    it = iter(lst)
    if not hasattr(it, "__setstate__"):  # a deque's iterator
        for _ in range(index):
            next(it)
        return it
    it.__setstate__(index)
    return it
