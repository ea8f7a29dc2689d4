"""issubclass / isinstance around `SomeABC.register(cls)` (the register call breaks the graph):
compiled answers equal eager's, in the frame, in a loop, and on later calls."""

import abc
from collections.abc import Hashable, Iterable, Sized

import torch
from frontend_helpers import assert_same

import kiln


def compare(fn, *args):
    """Eager vs compiled, called twice (each call makes new classes and registers them, so the
    compiled entries recompile: the helper's no-recompile check does not apply)."""
    kiln.reset()
    compiled = kiln.compile(fn, backend="eager")
    for _ in range(2):
        assert_same(fn(*args), compiled(*args))


def register_in_a_loop_over_abcs(x):
    out = []
    for B in Hashable, Iterable, Sized:

        class C:
            __hash__ = None

        out.append(issubclass(C, B))
        B.register(C)  # B: an item of the loop's tuple iterator, which the resume receives
        out.append(issubclass(C, B))
        out.append(isinstance(C(), B))
    return x + 1, out


def test_register_on_an_item_of_the_loop_iterator_inside_a_resume_function():
    compare(register_in_a_loop_over_abcs, torch.ones(2))


def register_on_an_abc_made_in_the_frame(x):
    class D(abc.ABC):  # noqa: B024 (an ABC for its registry only)
        pass

    class E:
        pass

    before = issubclass(E, D)
    D.register(E)  # on the class the transformed code makes, not the one made while tracing
    return x + 1, before, issubclass(E, D), isinstance(E(), D)


def test_register_on_an_abc_made_in_the_frame_binds_to_the_rebuilt_class():
    compare(register_on_an_abc_made_in_the_frame, torch.ones(2))


class Registry(abc.ABC):  # noqa: B024 (an ABC for its registry only)
    pass


def asks_the_abc(x, cls):
    return x + 1, issubclass(cls, Registry), isinstance(cls(), (Registry, int))


def test_a_registration_after_the_compile_is_seen_by_the_compiled_frame():
    class Late:
        pass

    compiled = kiln.compile(asks_the_abc, backend="eager")
    x = torch.ones(2)
    assert compiled(x, Late)[1:] == asks_the_abc(x, Late)[1:] == (False, False)
    Registry.register(Late)
    assert compiled(x, Late)[1:] == asks_the_abc(x, Late)[1:] == (True, True)
