"""The globals kiln installs for a transformed code go with that code (Note [Globals: installed
for as long as the code that loads them])."""

import gc
import weakref

import torch

import kiln


class _Held:
    def __init__(self):
        self.w = torch.full((2,), 3.0)


def _make(held):
    def helper(x):
        return x * 2

    def fn(x):
        y = x + 1
        print("", end="")  # a break: the resume function reads `held` from fn's cell
        return helper(y) + held.w

    return fn


_another = set()


def _compile_another():
    before = _kiln_globals()
    kiln.compile(lambda x: x + 1, backend="eager")(torch.ones(1))
    _another.update(_kiln_globals() - before)


def _kiln_globals():
    return {k for k in globals() if k.startswith(("___kiln", "__kiln"))}


def test_objects_die_with_the_compiled_function():
    kiln.reset()
    before = _kiln_globals()
    held = _Held()
    died = []
    ref = weakref.ref(held, lambda _: died.append(True))  # noqa: F841 (kept: its callback)
    fn = _make(held)
    compiled = kiln.compile(fn, backend="eager")
    x = torch.ones(2)
    for _ in range(2):
        torch.testing.assert_close(compiled(x), fn(x))
    assert _kiln_globals() - before  # the graph and the resume entry, while compiled lives
    del held, fn, compiled
    gc.collect()
    _compile_another()  # (names of dead codes go when kiln compiles next)
    gc.collect()
    assert died == [True]
    assert _kiln_globals() - before == _another


def test_reset_lets_go_of_graphs():
    kiln.reset()
    before = _kiln_globals()

    def fn(x):
        return x.sin() + 1

    compiled = kiln.compile(fn, backend="eager")
    torch.testing.assert_close(compiled(torch.ones(3)), fn(torch.ones(3)))
    assert _kiln_globals() - before
    kiln.reset()
    gc.collect()
    assert _kiln_globals() == before
    torch.testing.assert_close(compiled(torch.ones(3)), fn(torch.ones(3)))  # compiles again
