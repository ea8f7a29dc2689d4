"""Regressions found by the conformance runs (benchmarks/cpython_conformance.py,
benchmarks/dynamo_conformance.py): each compiled function must return what eager Python returns."""

import torch
from frontend_helpers import run_and_compare

import kiln

DottedName = type("typing.io", (), {})  # a type whose __name__ is not an identifier


def guard_on_type_with_dotted_name(x, obj):
    return x + 1 if isinstance(obj, DottedName) else x - 1


def test_guard_on_type_whose_name_is_not_an_identifier():
    run_and_compare(guard_on_type_with_dotted_name, torch.randn(3), DottedName())


def raise_after_catching(flag):
    try:
        raise KeyError("first")
    except KeyError as exc:
        caught = exc
    context = caught.__context__
    if flag:
        raise ValueError("boom")
    return context


def context_of_the_error_raised_in_a_fallen_back_frame():
    try:
        raise_after_catching(True)
    except ValueError as err:
        # returning the raised error breaks the graph and runs the frame eagerly: the error raised
        # there must not get kiln's Unsupported as its __context__
        return err


def test_frame_run_eagerly_after_a_break_leaves_no_exception_context():
    eager = context_of_the_error_raised_in_a_fallen_back_frame()
    compiled = kiln.compile(context_of_the_error_raised_in_a_fallen_back_frame, backend="eager")()
    assert repr(compiled) == repr(eager)
    assert repr(compiled.__context__) == repr(eager.__context__) == "None"


def generator_kept_across_a_call(x):
    def gen():
        yield x + 1
        yield x + 2

    g = gen()
    first = next(g)
    kiln.graph_break()
    rest = list(g)
    g.close()  # a generator object still, after the graph break rebuilt it
    return first, rest, type(g).__name__


def test_generator_object_stays_a_generator():
    run_and_compare(generator_kept_across_a_call, torch.randn(2))
