"""`s.__iter__()` of a str or bytes constant, compiled vs eager."""

import torch
from frontend_helpers import run_and_compare


def test_next_of_a_literal_str_iter():
    def fn(x):
        s = "a"
        if next(s.__iter__()) == "a":
            return x + 1
        return x

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_graphs=1)


def test_str_and_bytes_iter_of_inputs():
    def fn(x, s, b):
        it = s.__iter__()
        first = next(it)
        return x * len(first), first, list(it), list(b.__iter__()), next(it, "end")

    run_and_compare(fn, torch.ones(2), "xyz", b"ab", fullgraph=True, expected_graphs=1)
    run_and_compare(fn, torch.ones(2), "q", b"", fullgraph=True, expected_graphs=1)
