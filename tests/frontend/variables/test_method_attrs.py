"""A bound method reads its function's attributes (`m.__dict__`, `m.__defaults__`), as
method.__getattribute__ forwards them, guarded where they come from."""

import torch
from frontend_helpers import run_and_compare

import kiln


class Foo:
    def bar(self, k=2):
        return 42 * k


def method_dict_of_new_object(x):
    m = Foo().bar
    return (
        x + len(m.__dict__),
        m.__dict__ is Foo.bar.__dict__,
        m.__defaults__,
        m.__func__ is Foo.bar,
    )


def test_method_attributes_read_from_the_function():
    run_and_compare(method_dict_of_new_object, torch.ones(2), fullgraph=True)


def test_a_change_to_the_function_is_seen_by_the_same_compiled_code():
    kiln.reset()
    compiled = kiln.compile(method_dict_of_new_object, backend="eager", fullgraph=True)
    x = torch.ones(2)
    compiled(x)
    Foo.bar.tag = 1
    Foo.bar.__defaults__ = (3,)
    try:
        got, want = compiled(x), method_dict_of_new_object(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1:] == want[1:] == (True, (3,), True)
    finally:
        del Foo.bar.tag
        Foo.bar.__defaults__ = (2,)


def method_of_input(x, obj):
    return x * obj.bar.__defaults__[0], obj.bar.__dict__


def test_method_of_an_input_object():
    run_and_compare(method_of_input, torch.ones(2), Foo(), fullgraph=True)


def method_of_a_class_made_per_call(x, k):
    class Local:
        def f(self, a=k):
            return a

    return x + Local().f.__defaults__[0]


def test_a_method_of_a_class_made_in_the_frame_is_not_pinned():
    kiln.reset()
    compiled = kiln.compile(method_of_a_class_made_per_call, backend="eager")
    x = torch.ones(2)
    for k in (1, 2, 5):
        torch.testing.assert_close(compiled(x, k), method_of_a_class_made_per_call(x, k))


def func_of_a_method_input(x, m):
    return x + 1, m.__func__, m.__self__


def test_func_of_a_bound_method_input_is_its_function():
    # (it returned the bound method itself: the method's source stood for its function's)
    obj = Foo()
    kiln.reset()
    got = kiln.compile(func_of_a_method_input, backend="eager")(torch.ones(2), obj.bar)
    assert got[1] is Foo.bar and got[2] is obj
