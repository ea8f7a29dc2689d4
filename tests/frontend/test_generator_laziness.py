"""Generators stepped while tracing (Note [Generators: lazy]) see what eager Python, running them
lazily, sees: cells and globals written after the generator was made, and not writes undone
when the instruction that made them breaks."""

import torch
from frontend_helpers import run_and_compare

FLAG = False


def filter_cell_set_after_the_genexp(x):
    keep = False
    pairs = ((i, j) for i in range(3) if keep for j in range(2))
    keep = True  # read when the genexp runs, not when it is made
    return x + len(list(pairs))


def test_genexp_reads_a_cell_written_after_it_was_made():
    run_and_compare(filter_cell_set_after_the_genexp, torch.ones(2))


def filter_global_set_after_the_genexp(x):
    global FLAG
    FLAG = False
    items = (i for i in range(4) if FLAG)
    FLAG = True
    n = len(list(items))
    FLAG = False
    return x + n


def test_genexp_reads_a_global_written_after_it_was_made():
    run_and_compare(filter_global_set_after_the_genexp, torch.ones(2))


def consumed_before_the_write(x):
    scale = 2
    total = sum(i * scale for i in range(4))  # finished before `scale` changes: no break needed
    scale = 3
    return x * total * scale


def test_genexp_finished_before_the_write_stays_in_the_graph():
    run_and_compare(consumed_before_the_write, torch.ones(2), expected_graphs=1)


def nonlocal_counter_in_a_generator(x):
    def make(count):
        def gen(n):
            nonlocal count
            for _ in range(n):
                count += 1
                yield count

        return gen

    gen = make(0)
    return x + sum(list(gen(5)))  # the generator's writes break the graph: they count once


def test_generator_writing_a_nonlocal_counts_once():
    run_and_compare(nonlocal_counter_in_a_generator, torch.ones(2))
