"""Iterating a traced dict again gives the same keys: equal-but-different keys stay apart."""

import torch
from frontend_helpers import run_and_compare


def equal_keys_swapped(x):
    d = {1: "a", "s": "b", 2.5: "c"}
    first = list(d)
    del d[1]
    d[True] = "d"  # equal to the 1 iterated before, but a bool
    second = list(d)
    kinds = [type(k).__name__ for k in d]
    same = next(iter(d)) is next(iter(d))
    return x + 1, first, second, kinds, same


def test_keys_iterated_again_after_an_equal_key_replaced_one():
    run_and_compare(equal_keys_swapped, torch.ones(2))


def pop_in_a_loop(x):
    d = {str(i): i for i in range(50)}
    total = x
    while d:
        k = next(iter(d))
        total = total + d.pop(k)
    return total


def test_next_of_iter_in_a_loop_pops_every_key():
    run_and_compare(pop_in_a_loop, torch.ones(2))
