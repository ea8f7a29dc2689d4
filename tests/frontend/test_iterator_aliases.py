"""One tuple/range iterator from outside reached twice in a frame (a global read twice, the same
iterator passed as two arguments) is one iterator, compiled vs eager (Note [Iterators: inputs])."""

import torch
from frontend_helpers import CountingBackend

import kiln

shared = iter(())


def _compiled(fn):
    kiln.reset()
    backend = CountingBackend()
    return kiln.compile(fn, backend=backend, fullgraph=True), backend


def _read_global_twice(x):
    a = next(shared)
    b = next(shared)
    return x + a * 10 + b


def test_a_global_tuple_iterator_read_twice():
    global shared
    compiled, backend = _compiled(_read_global_twice)
    shared = iter((1, 2, 3, 4, 5))
    eager = _read_global_twice(torch.zeros(1))
    eager_rest = list(shared)
    shared = iter((1, 2, 3, 4, 5))
    torch.testing.assert_close(compiled(torch.zeros(1)), eager)
    assert list(shared) == eager_rest == [3, 4, 5]
    assert backend.calls == 1


def test_a_global_range_iterator_read_twice():
    global shared
    compiled, backend = _compiled(_read_global_twice)
    shared = iter(range(7, 12))
    eager = _read_global_twice(torch.zeros(1))
    shared = iter(range(7, 12))
    torch.testing.assert_close(compiled(torch.zeros(1)), eager)
    assert list(shared) == [9, 10, 11] and backend.calls == 1


def test_the_same_iterator_as_two_arguments():
    def fn(x, p, q):
        return x + next(p) * 10 + next(q), next(p)

    compiled, backend = _compiled(fn)
    it = iter((1, 2, 3, 4))
    eager = fn(torch.zeros(1), it, it)
    it = iter((1, 2, 3, 4))
    got = compiled(torch.zeros(1), it, it)
    torch.testing.assert_close(got[0], eager[0])
    assert got[1] == eager[1] == 3 and list(it) == [4]
    other = iter((1, 2, 3, 4))
    got = compiled(torch.zeros(1), other, iter((5, 6)))  # (two iterators: no aliasing)
    torch.testing.assert_close(got[0], torch.tensor([15.0]))
    assert got[1] == 2 and list(other) == [3, 4]
