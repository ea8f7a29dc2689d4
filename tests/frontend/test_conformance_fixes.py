"""Regressions found by the conformance runs (benchmarks/cpython_conformance.py,
benchmarks/dynamo_conformance.py): each compiled function must return what eager Python returns."""

import torch
from frontend_helpers import run_and_compare

DottedName = type("typing.io", (), {})  # a type whose __name__ is not an identifier


def guard_on_type_with_dotted_name(x, obj):
    return x + 1 if isinstance(obj, DottedName) else x - 1


def test_guard_on_type_whose_name_is_not_an_identifier():
    run_and_compare(guard_on_type_with_dotted_name, torch.randn(3), DottedName())
