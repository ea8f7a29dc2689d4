"""Iterators over a list read the list as they go, not when they were made: writes and appends
between making the iterator and consuming it are seen (eager is the oracle)."""

import torch
from frontend_helpers import run_and_compare

import kiln


def reversed_sees_writes_and_appends(x):
    orig = [4, 5, 6, 7]
    it = reversed(orig)
    orig[0] = 40
    first = next(it)
    orig.append(8)  # past the index: not seen
    return x + 1, first, list(it), type(it).__name__


def test_reversed_list_sees_writes_after_it_was_made():
    run_and_compare(reversed_sees_writes_and_appends, torch.ones(2), fullgraph=True)


def reversed_after_slice_assignment(x):
    orig = [4, 5, 6, 7]
    it = reversed(orig)
    next(it)
    orig[:] = [10, 11, 12, 13, 14, 15]
    rest = list(it)
    orig.append(1)  # an ended reversed iterator has dropped its list
    return x + 1, rest, list(it), it.__length_hint__()


def test_reversed_list_reads_the_list_replaced_by_slice_assignment():
    run_and_compare(reversed_after_slice_assignment, torch.ones(2))


def reversed_ends_when_the_list_shrinks(x):
    orig = [4, 5, 6]
    it = reversed(orig)
    next(it)
    del orig[1:]
    ended = list(it)
    orig.extend([7, 8, 9])
    return x + 1, ended, list(it)


def test_reversed_list_ends_for_good_when_its_index_is_past_the_end():
    run_and_compare(reversed_ends_when_the_list_shrinks, torch.ones(2), fullgraph=True)


def reversed_kept_across_a_break(x, lst):
    it = reversed(lst)
    first = next(it)
    kiln.graph_break()
    lst.append(10)
    lst[0] = 20
    return x + 1, first, list(it), type(it).__name__


def test_reversed_list_iterator_rebuilt_at_a_break_is_the_live_iterator():
    run_and_compare(reversed_kept_across_a_break, torch.ones(2), [1, 2, 3])


def reversed_returned(x):
    orig = [1, 2, 3]
    it = reversed(orig)
    next(it)
    orig[0] = 9
    return x + 1, it, orig


def test_reversed_list_iterator_returned_from_the_frame():
    compiled = kiln.compile(reversed_returned, backend="eager")
    _, it, orig = compiled(torch.ones(2))
    _, eager_it, eager_orig = reversed_returned(torch.ones(2))
    assert type(it) is type(eager_it)
    orig.append(4)
    eager_orig.append(4)
    assert list(it) == list(eager_it) == [2, 9]
