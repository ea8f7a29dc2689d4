"""Iterators that read a list as they go: reversed(lst), and zip / enumerate / map / filter /
chain / islice over lists and iterators."""

import itertools
import operator

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.variables.base import VariableTracker
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.exceptions import raise_observed
from kiln.frontend.variables.lists import (
    _ITER_UNDO,
    ITERATORS,
    ListIteratorVariable,
    ListVariable,
    RangeVariable,
    TupleVariable,
    _rebuild_tuple,
)
from kiln.frontend.variables.operators import binary_op


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

    def next_item(self, tx=None):
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


# Note [Iterators: lazy over live sources]
# zip, enumerate, map, filter, itertools.chain and itertools.islice hold iterators over their
# arguments and take one item from them at each step: a list written or appended to after the
# call and before the items are asked for is seen, and an iterator argument is advanced only as
# far as eager advances it (zip(it, short) takes one more item from `it` than `short` has). When
# an argument is a list or an iterator (`is_live_source`), they are traced that way: the
# sources are iterators (ListIteratorVariable.over, a list's live one), and each step calls
# their next_item (and map's/filter's function, at that step). Over tuples and ranges only, the
# items are the same either way, and the iterator stays a snapshot of them.
#
# The iterator's own state (enumerate's count, chain's current argument, islice's counters) is
# `states[index]`: each step appends the state after it and advances `index`, so undoing a step
# (_ITER_UNDO, a rewind) by setting `index` back restores it; the sources undo their own steps.
# A rebuild makes the same kind of iterator over the rebuilt sources, from where the trace is.
def is_live_source(var):
    """A list or an iterator: read by a lazy iterator one item at a time."""
    return type(var) is ListVariable or isinstance(var, ListIteratorVariable)


def lazy_sources_ok(args):
    """Whether zip/map/... over `args` is traced lazily (Note [Iterators: lazy over live
    sources])."""
    simple = (ListVariable, TupleVariable, RangeVariable)
    return any(is_live_source(a) for a in args) and all(
        type(a) in simple or isinstance(a, ListIteratorVariable) for a in args
    )


class LazyIteratorVariable(ListIteratorVariable):
    """zip / enumerate / map / filter / chain / islice stepping its sources one item at a time
    (Note [Iterators: lazy over live sources])."""

    def __init__(self, tx, kind, args, state=(), fn=None, **kw):
        super().__init__((), **kw)
        self.kind = kind
        self.sources = [ListIteratorVariable.over(tx, a) for a in args]
        self.fn = fn  # map's and filter's function (filter: None keeps the truthy items)
        self.states = [state]

    def next_item(self, tx=None):
        """The next item, or None when the iterator (this step) has none."""
        item, state = _STEP[self.kind](self, tx, self.states[self.index])
        _ITER_UNDO.append((self, self.index))
        del self.states[self.index + 1 :]
        self.states.append(state)
        self.index += 1
        return item

    def unpack_var_sequence(self, tx):
        items = []
        while (item := self.next_item(tx)) is not None:
            items.append(item)
        return items

    def call_method(self, tx, name, args, kwargs):
        if name == "__next__" and not args and not kwargs:
            item = self.next_item(tx)
            if item is None:
                raise_observed(tx, StopIteration)
            return item
        unimplemented(f"{self.kind.__name__}.{name}")

    def reconstruct(self, cg):
        fn, args = _REBUILD[self.kind](self, self.states[self.index])
        cg.load_object(fn, push_null=True)
        for a in args:
            if isinstance(a, VariableTracker):
                cg.reconstruct(a)
            else:
                cg.extend(emit.load_const(a))
        cg.extend(emit.call(len(args)))

    def __repr__(self):
        return f"LazyIteratorVariable({self.kind.__name__}, {self.sources!r})"


def _call(tx, fn, args):
    if tx is None:
        unimplemented(f"calling {fn} for an item of a lazy iterator outside an instruction")
    return fn.call_function(tx, args, {})


def _row(it, tx):
    """One item from each source in turn, or None at the first that has none."""
    row = []
    for s in it.sources:
        item = s.next_item(tx)
        if item is None:
            return None
        row.append(item)
    return row


def _step_zip(it, tx, state):
    row = _row(it, tx)
    return (None if row is None else TupleVariable(row)), state


def _step_enumerate(it, tx, state):
    item = it.sources[0].next_item(tx)
    if item is None:
        return None, state
    return TupleVariable([ConstantVariable(state[0]), item]), (state[0] + 1,)


def _step_map(it, tx, state):
    row = _row(it, tx)
    return (None if row is None else _call(tx, it.fn, row)), state


def _step_filter(it, tx, state):
    while (item := it.sources[0].next_item(tx)) is not None:
        test = item if it.fn is None else _call(tx, it.fn, [item])
        if test.truthy(tx):
            return item, state
    return None, state


def _step_chain(it, tx, state):
    (p,) = state
    while p < len(it.sources):
        item = it.sources[p].next_item(tx)
        if item is not None:
            return item, (p,)
        p += 1  # (this source is done: the next one, for good)
    return None, (p,)


def _step_islice(it, tx, state):
    # islice keeps a count of the items taken and the index of the next one to give; past its
    # stop, or when its source ends, it drops the source for good
    cnt, nxt, stop, step, ended = state
    if ended:
        return None, state
    src = it.sources[0]
    while cnt < nxt:
        if src.next_item(tx) is None:
            return None, (cnt, nxt, stop, step, True)
        cnt += 1
    if stop is not None and cnt >= stop:
        return None, (cnt, nxt, stop, step, True)
    item = src.next_item(tx)
    if item is None:
        return None, (cnt, nxt, stop, step, True)
    cnt, nxt = cnt + 1, nxt + step
    if stop is not None and nxt > stop:
        nxt = stop
    return item, (cnt, nxt, stop, step, False)


def _step_starmap(it, tx, state):
    row = it.sources[0].next_item(tx)
    return (None if row is None else _call(tx, it.fn, row.unpack_var_sequence(tx))), state


def _step_zip_longest(it, tx, state):
    # a source that ends is dropped (its place gets the fill value); when the last one ends the
    # iterator ends for good
    dropped = state
    if all(dropped):
        return None, state
    row, now = [], list(dropped)
    for i, s in enumerate(it.sources):
        item = None if now[i] else s.next_item(tx)
        if item is None:
            if not now[i] and sum(not d for d in now) == 1:
                return None, (True,) * len(now)
            now[i] = True
            item = it.fn
        row.append(item)
    return TupleVariable(row), tuple(now)


def _step_pairwise(it, tx, state):
    old, ended = state
    src = it.sources[0]
    if ended:
        return None, state
    if old is None:
        old = src.next_item(tx)
        if old is None:
            return None, (None, True)
    new = src.next_item(tx)
    if new is None:
        return None, (None, True)
    return TupleVariable([old, new]), (new, False)


def _step_accumulate(it, tx, state):
    # (the initial value is given first; accumulate never drops its source)
    (total, initial) = state
    if initial is not None:
        return initial, (initial, None)
    item = it.sources[0].next_item(tx)
    if item is None:
        return None, state
    if total is not None:
        if it.fn is None:
            item = binary_op(tx, operator.add, total, item)
        else:
            item = _call(tx, it.fn, [total, item])
    return item, (item, None)


_STEP = {
    zip: _step_zip,
    enumerate: _step_enumerate,
    map: _step_map,
    filter: _step_filter,
    itertools.chain: _step_chain,
    itertools.islice: _step_islice,
    itertools.starmap: _step_starmap,
    itertools.zip_longest: _step_zip_longest,
    itertools.pairwise: _step_pairwise,
    itertools.accumulate: _step_accumulate,
}


# How each kind is rebuilt from its state: (callable, its arguments: variables or constants).
def _rebuild_islice(it, state):
    cnt, nxt, stop, step, ended = state
    if ended:
        return itertools.islice, [(), 0]
    return itertools.islice, [it.sources[0], nxt - cnt, None if stop is None else stop - cnt, step]


def _rebuild_zip_longest(it, state):
    if all(state):
        return itertools.zip_longest, []
    # a dropped source: an empty tuple, dropped again at the first step
    return zip_longest_of, [it.fn, *(() if d else s for s, d in zip(it.sources, state))]


def _rebuild_pairwise(it, state):
    old, ended = state
    if old is not None:
        unimplemented("rebuilding an itertools.pairwise iterator holding an item")
    return itertools.pairwise, [() if ended else it.sources[0]]


def _rebuild_accumulate(it, state):
    total, initial = state
    if total is not None and initial is None:
        unimplemented("rebuilding an itertools.accumulate iterator part way")
    return accumulate_of, [it.sources[0], it.fn, initial]


_REBUILD = {
    zip: lambda it, state: (zip, it.sources),
    enumerate: lambda it, state: (enumerate, [it.sources[0], state[0]]),
    map: lambda it, state: (map, [it.fn, *it.sources]),
    filter: lambda it, state: (filter, [it.fn, it.sources[0]]),
    itertools.chain: lambda it, state: (itertools.chain, it.sources[state[0] :]),
    itertools.islice: _rebuild_islice,
    itertools.starmap: lambda it, state: (itertools.starmap, [it.fn, it.sources[0]]),
    itertools.zip_longest: _rebuild_zip_longest,
    itertools.pairwise: _rebuild_pairwise,
    itertools.accumulate: _rebuild_accumulate,
}


def zip_longest_of(fill, *sources):
    """itertools.zip_longest(*sources, fillvalue=fill) (the rebuilt zip_longest)."""
    return itertools.zip_longest(*sources, fillvalue=fill)


def accumulate_of(src, fn, initial):
    """itertools.accumulate(src, fn, initial=initial) (the rebuilt accumulate)."""
    return itertools.accumulate(src, fn, initial=initial)


def lazy_islice(tx, src, bounds):
    """islice(src, *bounds) over a live source, or None where its bounds are not plain."""
    start, stop, step = slice(*bounds).start, slice(*bounds).stop, slice(*bounds).step
    start, step = start or 0, 1 if step is None else step
    if not all(type(v) is int for v in (start, step)) or start < 0 or step < 1:
        return None  # (islice raises ValueError: the snapshot path says so)
    if stop is not None and (type(stop) is not int or stop < 0):
        return None
    return LazyIteratorVariable(tx, itertools.islice, [src], (0, start, stop, step, False))


# Note [Iterators: zip and enumerate snapshots]
# zip and enumerate over tuples, ranges, strings ... (no live source) are traced as an iterator
# over their rows, made at once, with `kind` zip or enumerate: type() sees zip or enumerate, and a
# rebuild at a break makes a real one over the rows left, zip(column, ...) or enumerate(values,
# start), not an iterator over tuples built by the transformed code. Python's zip and enumerate
# hand out a new row in the tuple they gave last when nothing else holds it (so
# `list(map(id, zip(a, b)))` is one id repeated); an iterator over prebuilt rows would not.
def rebuild_zip_snapshot(cg, it, rest):
    """Push zip(...) / enumerate(...) over the rows `rest` of a snapshot iterator `it`."""
    if it.kind is enumerate:
        start = rest[0].items[0].as_python_constant() if rest else 0
        cg.load_object(enumerate, push_null=True)
        _rebuild_tuple(cg, [row.items[1] for row in rest])
        cg.extend(emit.load_const(start))
        cg.extend(emit.call(2))
        return
    cg.load_object(zip, push_null=True)
    for column in range(it.width):
        _rebuild_tuple(cg, [row.items[column] for row in rest])
    cg.extend(emit.call(it.width))


ITERATORS["rebuild zip"] = rebuild_zip_snapshot
