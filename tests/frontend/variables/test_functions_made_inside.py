"""Functions and partials made while tracing keep their identity and annotations across a graph
break (the code after the break sees the very object the break's call got)."""

import dataclasses
import functools

import torch
from frontend_helpers import run_and_compare

import kiln


def target(x):
    "target's doc"
    return x + 1


def _compare(fn, *args):
    kiln.reset()
    expected = fn(*args)
    got = kiln.compile(fn, backend="eager")(*args)
    assert got == expected
    return got


def test_update_wrapper_on_a_function_made_inside():
    def fn(x):
        def wrapper(*a):
            return target(*a)

        functools.update_wrapper(wrapper, target)  # runs at a break, on the rebuilt function
        return wrapper.__name__, wrapper.__doc__, wrapper.__wrapped__ is target

    assert _compare(fn, 1) == ("target", "target's doc", True)


def test_partial_identity_across_a_break():
    def fn(x):
        p = functools.partial(target, 1)
        seen = [p]
        print("break")
        return seen[0] is p, p()

    assert _compare(fn, torch.zeros(1)) == (True, 2)


def test_annotations_of_a_function_made_inside():
    def fn(x):
        def w(a: int, b: "str" = "q") -> float:
            pass

        print("break")
        return w.__annotations__, w.__defaults__

    assert _compare(fn, 1)[0] == {"a": int, "b": "str", "return": float}


def test_locals_sees_the_traced_values():
    def fn(a):
        x = {1}
        y = {1, 2}
        del a
        names = sorted(locals())  # `a` deleted: not there
        return eval("x < y", locals()), names  # eval breaks; locals() is answered while tracing

    assert _compare(fn, 1) == (True, ["x", "y"])


def test_locals_of_a_frame_with_cells():
    def fn(t):
        c = t + 1

        def inner():
            return c

        return t * 2, sorted(locals()), locals()["c"]

    kiln.reset()
    expected = fn(torch.ones(1))
    got = kiln.compile(fn, backend="eager", fullgraph=True)(torch.ones(1))
    assert got[1] == expected[1]
    torch.testing.assert_close(got[2], expected[2])


def dataclass_with_options_made_inside(x):
    @dataclasses.dataclass(eq=False)  # `wrap`, made by dataclasses' code, breaks inside
    class Point:
        a: int
        b: int = 2

    p = Point(1)
    return x + p.a + p.b


def test_function_made_by_another_module_keeps_its_globals():
    # rebuilt at the break with MAKE_FUNCTION, `wrap` got this module's globals: NameError
    x = torch.ones(2)
    expected = dataclass_with_options_made_inside(x)
    compiled = kiln.compile(dataclass_with_options_made_inside, backend="eager")
    for _ in range(2):
        torch.testing.assert_close(compiled(x), expected)


def fields_of(p):
    return p.func, p.args, p.keywords


def nested_partials(x):
    inner = functools.partial(torch.add, x)
    nested = functools.partial(inner, alpha=2)  # flattened, as C's partial does
    return nested(x), fields_of(nested)


def test_partial_of_a_partial_is_flattened():
    run_and_compare(nested_partials, torch.ones(2))


def partial_of_input(x, p):
    nested = functools.partial(p, alpha=2)
    return nested.func is p, nested(x)


def test_partial_of_an_input_partial_keeps_it_flattenable():
    # kiln reading the input's __dict__ made one, and the partial made from it stopped flattening
    p = functools.partial(torch.add, torch.ones(2))
    compiled = kiln.compile(partial_of_input, backend="eager")
    expected = partial_of_input(torch.ones(2), p)
    got = compiled(torch.ones(2), p)
    assert got[0] == expected[0] is False
    torch.testing.assert_close(got[1], expected[1])


def _attribs(**kw):
    def decorate(func):
        for k, v in kw.items():
            setattr(func, k, v)
        return func

    return decorate


def test_attributes_set_on_a_function_are_copied_by_update_wrapper():
    """A decorator's setattr, then functools.wraps: the wrapper's __dict__ holds them (as
    contextlib.contextmanager's wrapper does), and reads after see them."""

    def fn(x):
        @_attribs(foo="bar", n=2)
        def inner(a):
            return a + 1

        @functools.wraps(inner)
        def wrapper(*a):
            return inner(*a)

        wrapper.extra = 3
        return x * wrapper.n, wrapper.foo, sorted(wrapper.__dict__), wrapper.extra

    run_and_compare(fn, torch.ones(2))


def test_a_contextmanager_keeps_the_attributes_of_its_function():
    import contextlib

    def fn(x):
        @contextlib.contextmanager
        @_attribs(foo="bar")
        def cm(y):
            yield y + 1

        with cm(x) as v:
            out = v * 2
        return out, cm.foo, cm.__name__

    run_and_compare(fn, torch.ones(2))
