"""functools.wraps / update_wrapper traced as user code, compiled vs eager (Note [Stdlib: Python
functions traced as user code])."""

import functools

import torch
from frontend_helpers import run_and_compare

import kiln


def test_wraps_a_nested_function():
    def foo(x, y):
        def add(x, y):
            return x + y

        @functools.wraps(add)
        def wrapped_call(x, y):
            return add(x, y)

        return wrapped_call(x, y), wrapped_call.__name__, wrapped_call.__wrapped__ is add

    run_and_compare(foo, torch.randn(3, 3), torch.randn(3, 3), fullgraph=True, expected_graphs=1)


def test_wraps_two_levels_deep():
    def foo(x, y):
        def nested_call(x, y):
            def mul(x, y):
                return x * y

            @functools.wraps(mul)
            def double_nested_call(x, y):
                return mul(x, y)

            return double_nested_call(x, y)

        return nested_call(x, y)

    run_and_compare(foo, torch.randn(3), torch.randn(3), fullgraph=True, expected_graphs=1)


def test_update_wrapper_copies_attributes_set_on_the_wrapped_function():
    def foo(x):
        def inner(t):
            return t - 1

        inner.tag = "kept"

        def outer(t):
            return inner(t) * 2

        w = functools.update_wrapper(outer, inner)
        return w(x), w.tag, w.__qualname__ == inner.__qualname__

    run_and_compare(foo, torch.ones(2), fullgraph=True, expected_graphs=1)


def test_a_wrapper_returned_from_the_frame_keeps_its_metadata():
    def add_one(t):
        """Adds one."""
        return t + 1

    def foo(x):
        @functools.wraps(add_one)
        def wrapper(t):
            return add_one(t)

        return x * 2, wrapper

    out, w = kiln.compile(foo, fullgraph=True)(torch.ones(2))
    torch.testing.assert_close(out, torch.full((2,), 2.0))
    assert w.__name__ == "add_one" and w.__doc__ == "Adds one." and w.__wrapped__ is add_one
    torch.testing.assert_close(w(torch.ones(1)), torch.full((1,), 2.0))
