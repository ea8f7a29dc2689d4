"""A function that breaks inside and reads its caller's frame (as namedtuple does for
__module__) runs plain, so the caller it sees is the compiled function's frame, not kiln's."""

import collections
import sys
import typing

import torch
from frontend_helpers import run_and_compare


def callers_module():
    print("break")
    return sys._getframe(1).f_globals["__name__"]


def reads_caller(x):
    return x + 1, callers_module()


def makes_a_namedtuple(x):
    Pair = collections.namedtuple("Pair", "a b")
    return x + 1, Pair.__module__


def test_callee_sees_the_compiled_frame():
    run_and_compare(reads_caller, torch.ones(2))


def test_namedtuple_module_is_the_callers():
    # (one call: each call makes a new class, which the code after the break is guarded on)
    run_and_compare(makes_a_namedtuple, torch.ones(2), calls=1)


def _module_of_caller(depth=1):
    return sys._getframe(depth + 1).f_globals["__name__"]


def reads_caller_through_a_helper():
    print("break")
    return _module_of_caller()


def through_a_helper(x):
    return x + 1, reads_caller_through_a_helper()


def makes_typing_namedtuple_and_typeddict(x):
    Emp = typing.NamedTuple("Emp", [("name", str), ("id", int)])  # noqa: UP014 (the functional form)
    TD = typing.TypedDict("TD", {"a": int})  # noqa: UP013 (the functional form)
    return x + 1, Emp.__module__, TD.__module__


def test_a_helper_reading_the_frame_two_up_sees_the_compiled_frame():
    # typing's `_caller()`: sys._getframe(depth + 1) from a helper of the function called
    run_and_compare(through_a_helper, torch.ones(2))


def test_typing_functional_namedtuple_and_typeddict_module():
    run_and_compare(makes_typing_namedtuple_and_typeddict, torch.ones(2), calls=1)
