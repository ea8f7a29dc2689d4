"""Iterators over a list read the list as they go, not when they were made: writes and appends
between making the iterator and consuming it are seen (eager is the oracle)."""

import itertools

import torch
from frontend_helpers import LogCapture, run_and_compare

import kiln
from kiln import logs


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


def lazy_over_a_list_written_later(x):
    a, b = [1, 2], [3, 4, 5]
    its = [
        zip(a, b),
        enumerate(a, 1),
        map(lambda v: v * 2, a),
        filter(None, a),
        itertools.chain(a, b),
        itertools.islice(a, 1, None),
        itertools.zip_longest(a, [7]),
        itertools.pairwise(a),
        itertools.accumulate(a),
        itertools.starmap(max, zip(a, b)),
    ]
    a.append(9)
    a[0] = 0
    b[0] = 30
    return x + 1, [list(it) for it in its], [type(it).__name__ for it in its]


def test_zip_map_enumerate_filter_itertools_read_the_list_when_iterated():
    run_and_compare(lazy_over_a_list_written_later, torch.ones(2), fullgraph=True)


def enumerate_while_appending(x):
    a = [1, 2, 3]
    out = []
    for i, v in enumerate(a):
        if v < 3:
            a.append(v + 2)
        out.append((i, v))
    for u, w in zip(a, a[1:]):
        a.append(u)  # zip sees these, the slice copy does not
        x = x + w
    return x, out, a


def test_enumerate_and_zip_see_items_appended_in_the_loop():
    run_and_compare(enumerate_while_appending, torch.ones(2), fullgraph=True)


def zip_advances_iterators_as_far_as_eager(x):
    it = iter([1, 2, 3, 4, 5])
    pairs = list(zip(it, [10, 20]))  # takes 1, 2 and then 3 (then the list ends)
    rest = list(it)
    it2 = iter((1, 2, 3, 4))
    head = list(itertools.islice(it2, 2))
    return x + 1, pairs, rest, head, list(it2)


def test_zip_and_islice_take_only_what_eager_takes_from_an_iterator():
    run_and_compare(zip_advances_iterators_as_far_as_eager, torch.ones(2), fullgraph=True)


def lazy_kept_across_a_break(x, a):
    z = zip(a, itertools.count())
    e = enumerate(a, 5)
    m = map(str, a)
    c = itertools.chain(a, [7])
    s = itertools.islice(a, 1, 6, 2)
    zl = itertools.zip_longest(a, (1,), fillvalue=0)
    firsts = [next(z), next(e), next(m), next(c), next(s), next(zl)]
    kiln.graph_break()
    a.append(9)
    rest = [list(it) for it in (z, e, m, c, s, zl)]
    return x + 1, firsts, rest, [type(it).__name__ for it in (z, e, m, c, s, zl)]


def test_lazy_iterators_rebuilt_at_a_break_go_on_where_the_trace_was():
    run_and_compare(lazy_kept_across_a_break, torch.ones(2), [1, 2, 3, 4])


def map_calls_its_function_at_each_step(x):
    log = []

    def f(v):
        log.append(v)
        return v + 1

    it = map(f, [1, 2, 3])
    log.append("made")
    first = next(it)
    log.append("between")
    return x + 1, first, list(it), log


def test_map_over_a_list_calls_its_function_as_items_are_asked_for():
    run_and_compare(map_calls_its_function_at_each_step, torch.ones(2), fullgraph=True)


def many_constants_left_at_a_break(x):
    data = itertools.chain.from_iterable(itertools.repeat(range(6), 3000))
    first = next(data)
    kiln.graph_break()
    return x + 1, first, sum(data)


def test_an_iterator_over_many_constants_is_rebuilt_as_one_constant():
    logs.set_logs("bytecode")
    try:
        with LogCapture("bytecode") as cap:
            run_and_compare(many_constants_left_at_a_break, torch.ones(2))
    finally:
        logs.set_logs("")
    root = [m for m in cap.messages["bytecode"] if "bytecode of many_constants" in m]
    lines = root[0].count("\n") if root else None
    assert lines is not None and lines < 200, "the 17999 items are one constant, not one load each"


def chain_of_lists_changed_after(x):
    a, b = [], [x]
    it = itertools.chain.from_iterable([a, b])
    print("a break: the iterator is rebuilt")
    a.append(x * 2)  # (eager's chain reads a when it reaches it)
    return list(it)


def chain_of_lists_changed_without_a_break(x):
    a = []
    it = itertools.chain.from_iterable((a, [x + 1]))
    a.append(x * 3)
    return next(it), list(it)


def test_chain_from_iterable_reads_its_lists_as_it_goes():
    # CPython's test_itertools TestGC.test_chain_from_iterable appends the iterator to its list
    run_and_compare(chain_of_lists_changed_after, torch.randn(2))
    run_and_compare(chain_of_lists_changed_without_a_break, torch.randn(2), expected_breaks=0)
