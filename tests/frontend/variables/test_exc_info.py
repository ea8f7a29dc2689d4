"""sys.exc_info() in a compiled frame, outside and inside handled exceptions, against eager."""

import sys

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln


def _after_a_handled_exception(x):
    try:
        raise ValueError
    except ValueError:
        pass
    return x + 1, sys.exc_info()[0] is None, sys.exc_info()


def test_exc_info_outside_handlers_is_folded():
    run_and_compare(_after_a_handled_exception, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_exc_info_called_from_a_callers_handler_matches_eager():
    compiled = kiln.compile(_after_a_handled_exception, backend="eager")
    compiled(torch.ones(2))  # traced with no exception handled
    try:
        raise KeyError("outer")
    except KeyError:
        got = compiled(torch.ones(2))  # the guard fails: not the entry traced outside
        expected = _after_a_handled_exception(torch.ones(2))
    assert got[1] is expected[1] is False
    assert got[2][0] is KeyError


def test_exc_info_inside_a_traced_handler_breaks():
    def fn(x):
        try:
            raise ValueError("inner")
        except ValueError:
            return x + 1, sys.exc_info()[0]

    run_and_compare(fn, torch.randn(3))
    with pytest.raises(kiln.exc.Unsupported, match="while an exception is handled"):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.randn(3))
