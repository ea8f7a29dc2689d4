"""An endless generator consumed by next() or a loop that stops: stepped to each yield (Note
[Generators: lazy]), it is captured, and the results match eager."""

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln


def _count():
    i = 0
    while True:
        yield i
        i += 1


def test_next_of_an_endless_generator_matches_eager():
    def fn(t):
        gen = _count()
        return t + next(gen) + next(gen)

    run_and_compare(fn, torch.zeros(2))
    got = kiln.compile(fn, backend="eager", fullgraph=True)(torch.zeros(2))
    assert torch.equal(got, fn(torch.zeros(2)))


def test_a_loop_that_breaks_out_of_an_endless_generator_matches_eager():
    def fn(t):
        s = 0
        for i in _count():
            if i > 5:
                break
            s += i
        return t + s

    compiled = kiln.compile(fn, backend="eager")
    for _ in range(2):
        assert torch.equal(compiled(torch.zeros(2)), fn(torch.zeros(2)))


def test_an_uncaught_exception_names_its_message():
    def fn(t):
        return t + sum(1 for _ in 5)  # TypeError: 'int' object is not iterable

    with pytest.raises(
        kiln.exc.Unsupported,
        match="TypeError raised and not caught in the compiled frame: 'int' object is not iterable",
    ):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.zeros(2))
