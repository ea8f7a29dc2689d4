"""itertools iterators over traced items keep their own class (Note [Iterators: itertools
kinds]), and islice over an iterator takes only the items it yields."""

import itertools

import torch
from frontend_helpers import run_and_compare


def repeat_type_and_repr(x):
    r = itertools.repeat("a", -1)
    return x + 1, type(r) is itertools.repeat, repr(r)


def combination_types(x):
    c = itertools.combinations([1, 2, 3], 2)
    p = itertools.permutations([1, 2], 2)
    q = itertools.product([1, 2], [3])
    return x + 1, [type(i).__name__ for i in (c, p, q)]


def rebuilt_after_a_break(x):
    r = itertools.repeat(2.0, 3)
    s = itertools.islice([1, 2, 3, 4], 1, None)
    c = itertools.chain([5], (6, 7))
    next(r)
    next(s)
    print("break")
    return x * next(r), type(r), repr(r), type(s), list(s), type(c), list(c)


def islice_over_an_iterator(x):
    it = iter(range(10))
    head = list(itertools.islice(it, 3))
    rest = list(it)
    it = iter([1, 2, 3, 4])
    skipped = list(itertools.islice(it, 2, 2))
    return x + 1, head, rest, skipped, list(it)


def test_repeat_keeps_its_type_and_repr():
    run_and_compare(repeat_type_and_repr, torch.ones(2))


def test_combinatoric_iterators_keep_their_types():
    run_and_compare(combination_types, torch.ones(2), fullgraph=True)


def test_itertools_iterators_rebuilt_as_their_class():
    run_and_compare(rebuilt_after_a_break, torch.ones(2))


def test_islice_over_an_iterator_takes_only_its_items():
    run_and_compare(islice_over_an_iterator, torch.ones(2))
