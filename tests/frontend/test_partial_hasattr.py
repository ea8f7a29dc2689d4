"""hasattr on a functools.partial from outside the frame, compiled vs eager (Note [Functions:
hasattr on a partial from outside])."""

import functools

import torch
from frontend_helpers import CountingBackend, run_and_compare

import kiln


def _bar(x, y):
    return torch.sin(x) + y


def test_hasattr_name_on_an_outside_partial_is_false():
    baz = functools.partial(_bar, y=4)

    def fn(x):
        return _bar(x, 1) if hasattr(baz, "__name__") else baz(x), hasattr(baz, "func")

    run_and_compare(fn, torch.ones(3), fullgraph=True, expected_graphs=1)


def test_the_check_does_not_make_the_partial_dict():
    baz = functools.partial(_bar, y=4)

    def fn(x):
        return hasattr(baz, "tag"), baz(x)

    run_and_compare(fn, torch.ones(2), fullgraph=True, expected_graphs=1)
    # a partial without an instance dict still flattens into a partial over it
    assert functools.partial(baz, torch.ones(1)).func is _bar


def test_an_attribute_set_on_the_partial_later_recompiles():
    baz = functools.partial(_bar, y=2)

    def fn(x):
        if hasattr(baz, "tag"):
            return x + 1
        return baz(x)

    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(fn, backend=backend)
    x = torch.ones(2)
    torch.testing.assert_close(compiled(x), fn(x))
    assert backend.calls == 1 and kiln.counters["stats"]["graph_breaks"] == 0
    baz.tag = "set"
    torch.testing.assert_close(compiled(x), fn(x))
    assert compiled(x).tolist() == [2.0, 2.0]
