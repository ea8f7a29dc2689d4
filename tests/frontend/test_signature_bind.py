"""inspect.Signature.bind while tracing, compiled vs eager (Note [Signatures: bind])."""

import inspect

import pytest
import torch
from frontend_helpers import run_and_compare


def _inner(a, b, *ar, c=10, d=11, **kw):
    pass


class _Made:
    def __init__(self, a, b, *ar, c=10, d=11, **kw):
        pass


@pytest.mark.parametrize("apply_defaults", [True, False])
def test_bind_arguments_args_kwargs(apply_defaults):
    def fn(x, apply_defaults):
        sig = inspect.signature(_inner)
        bound = sig.bind(1, 2, 3, d=12, e=15)
        bound.arguments["d"] = 13
        if apply_defaults:
            bound.apply_defaults()
        return bound.signature is sig, bound, bound.arguments, bound.args, bound.kwargs, x + 1

    run_and_compare(fn, torch.ones(3), apply_defaults, fullgraph=True, expected_graphs=1)


def test_bind_traced_values_and_a_signature_of_a_class():
    def fn(x, y):
        bound = inspect.signature(_Made).bind(x, y * 2, x + y, e=y)
        a, b, extra = bound.args
        return a + b + extra + bound.kwargs["e"], bound.arguments["ar"]

    run_and_compare(fn, torch.ones(2), torch.full((2,), 3.0), fullgraph=True, expected_graphs=1)


def test_bind_errors_are_pythons():
    def fn(x):
        sig = inspect.signature(_inner)
        try:
            sig.bind(1)
        except TypeError as e:
            return x - 1, str(e)
        return x + 1, ""

    run_and_compare(fn, torch.ones(1), fullgraph=True, expected_graphs=1)


def test_bind_partial():
    def fn(x):
        bound = inspect.signature(_inner).bind_partial(b=x)
        bound.apply_defaults()
        return bound.arguments["b"] * 2, bound.args, sorted(bound.arguments)

    run_and_compare(fn, torch.ones(2), fullgraph=True, expected_graphs=1)
