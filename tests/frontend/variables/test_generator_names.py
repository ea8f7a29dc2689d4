"""A generator run while tracing and rebuilt at a break keeps its function's __name__ and
__qualname__."""

import torch
from frontend_helpers import run_and_compare


def counting():
    yield 1
    yield 2


def generator_name_after_a_break(x):
    gen = counting()
    first = next(gen)
    return x + first, gen.__name__, gen.__qualname__, list(gen)


def test_rebuilt_generator_keeps_its_names():
    run_and_compare(generator_name_after_a_break, torch.ones(2))
