"""itertools.tee inside compiled code: the tees share one buffer over one source iterator,
which is advanced only as far as the furthest tee (as Python's tee does)."""

import itertools

import torch
from frontend_helpers import run_and_compare


def test_tee_of_a_range_iterator():
    def fn(x):
        a, b = itertools.tee(iter(range(5)))
        first = list(a)
        return x + sum(first) + next(b), list(b)

    run_and_compare(fn, x=torch.ones(2), fullgraph=True, expected_graphs=1)


def test_tee_advances_the_source_only_as_far_as_needed():
    def fn(x):
        src = iter([1, 2, 3, 4])
        a, b, c = itertools.tee(src, 3)
        got = [next(a), next(a), next(b)]
        return x * next(src), got, list(c), list(a)

    run_and_compare(fn, x=torch.ones(2), fullgraph=True, expected_graphs=1)


def test_tee_of_a_generator_runs_its_code_lazily():
    def fn(x):
        log = []

        def gen(x):
            for i in range(3):
                log.append(i)
                yield x + i

        a, b = itertools.tee(gen(x))
        first = next(a)
        seen = len(log)
        return first + next(b), seen, [t * 2 for t in a], len(log), list(b)

    run_and_compare(fn, x=torch.ones(2), fullgraph=True)


def test_tee_zero_and_negative():
    def fn(x):
        return x + len(itertools.tee([1, 2], 0))

    run_and_compare(fn, x=torch.ones(2), fullgraph=True)

    def bad(x):
        return itertools.tee([1], -1)

    run_and_compare(bad, x=torch.ones(2))


def test_tee_across_a_graph_break():
    def fn(x):
        a, b = itertools.tee(iter([1, 2, 3]))
        y = x + next(a)
        print("break")
        return y + next(b) + next(a)

    run_and_compare(fn, x=torch.ones(2))
