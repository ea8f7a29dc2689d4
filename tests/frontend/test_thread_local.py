"""Stores into a threading.local() from compiled code, compiled vs eager (Note [Objects:
threading.local])."""

import threading

import torch
from frontend_helpers import CountingBackend

import kiln


def _store(x, loc):
    loc.x = x
    loc.y = loc.x + 1
    return x + 1, loc.y


def test_a_store_is_replayed_into_the_callers_thread():
    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(_store, backend=backend, fullgraph=True)
    loc, ref = threading.local(), threading.local()
    x = torch.ones(2, 2)
    out = compiled(x, loc)
    expected = _store(x, ref)
    torch.testing.assert_close(out, expected)
    assert loc.x is x and torch.equal(loc.y, ref.y)
    assert backend.calls == 1
    seen = []
    t = threading.Thread(target=lambda: seen.append(hasattr(loc, "x")))
    t.start()
    t.join()
    assert seen == [False]  # (another thread's attributes are untouched, as in eager)


def test_a_compiled_call_from_another_thread_stores_there():
    kiln.reset()
    compiled = kiln.compile(_store, fullgraph=True)
    loc = threading.local()
    x = torch.zeros(1)
    compiled(x, loc)
    got = []

    def other():
        y = torch.full((1,), 5.0)
        got.append((compiled(y, loc), loc.x is y))

    t = threading.Thread(target=other)
    t.start()
    t.join()
    ((out, same),) = got
    torch.testing.assert_close(out, (torch.full((1,), 6.0), torch.full((1,), 6.0)))
    assert same and loc.x is x  # (this thread's attribute is still its own)
