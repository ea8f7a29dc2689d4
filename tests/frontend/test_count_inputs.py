"""next() on an itertools.count from outside the frame, compiled vs eager (Note [Stdlib:
itertools.count inputs])."""

import itertools

import torch
from frontend_helpers import CountingBackend

import kiln


def _compiled(fn):
    kiln.reset()
    backend = CountingBackend()
    return kiln.compile(fn, backend=backend, fullgraph=True), backend


def test_a_global_style_counter_advances_as_in_eager():
    counter = itertools.count()

    def fn(x):
        return x * (next(counter) + 1)

    compiled, backend = _compiled(fn)
    x = torch.randn(2, 5)
    torch.testing.assert_close(compiled(x), x)
    torch.testing.assert_close(compiled(x), x * 2)
    assert next(counter) == 2
    assert backend.calls == 2 and kiln.counters["stats"]["graph_breaks"] == 0


def test_an_already_advanced_counter_with_a_float_step():
    counter = itertools.count(1.5, 0.25)
    next(counter)
    next(counter)

    def fn(x):
        a = next(counter)
        b = next(counter)
        return x * a + b

    ref_counter = itertools.count(1.5, 0.25)
    next(ref_counter)
    next(ref_counter)
    compiled, backend = _compiled(fn)
    x = torch.ones(3)
    for _ in range(2):
        a, b = next(ref_counter), next(ref_counter)
        torch.testing.assert_close(compiled(x), x * a + b)
    assert repr(counter) == repr(ref_counter)
    assert backend.calls == 2


def test_the_counter_passed_on_to_the_caller():
    def fn(x, counter):
        first = next(counter)
        return x + first, counter

    counter = itertools.count(10, 5)
    compiled, backend = _compiled(fn)
    out, same = compiled(torch.zeros(1), counter)
    assert same is counter and out.item() == 10.0
    assert next(counter) == 15 and backend.calls == 1
