"""A function that breaks inside and reads its caller's frame (as namedtuple does for
__module__) runs plain, so the caller it sees is the compiled function's frame, not kiln's."""

import collections
import sys

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
