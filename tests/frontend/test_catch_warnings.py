"""`with warnings.catch_warnings(...)` in the frame, compiled vs eager
(Note [Warnings: catch_warnings blocks])."""

import warnings

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln
from kiln.exc import Unsupported


def _filters():
    return list(warnings.filters)


def test_block_of_tensor_ops_is_one_graph():
    def fn(x):
        with warnings.catch_warnings(record=True):
            y = x.sin()
        with warnings.catch_warnings(action="ignore", category=UserWarning):
            y = y + 1
        return y * 2

    before = _filters()
    run_and_compare(fn, torch.randn(8), fullgraph=True, expected_graphs=1)
    assert _filters() == before


def test_block_in_called_function_with_return_inside():
    def length(value):
        with warnings.catch_warnings(record=True):
            return len(value)

    def fn(x, items):
        return x * length(items), length(x)

    run_and_compare(fn, torch.randn(3), [1, 2], fullgraph=True, expected_graphs=1)


def test_exception_leaving_the_block_is_not_suppressed():
    def fn(x):
        try:
            with warnings.catch_warnings():
                raise ValueError("inside")
        except ValueError as e:
            return x + 1, str(e)

    before = _filters()
    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_graphs=1)
    assert _filters() == before


def test_warn_inside_the_block_runs_in_python():
    def fn(x):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warnings.warn("inside the block", stacklevel=1)
            y = x.cos()
        return y, [str(w.message) for w in caught]

    before = _filters()
    with warnings.catch_warnings(record=True) as outer:
        warnings.simplefilter("always")
        run_and_compare(fn, torch.randn(3), expected_breaks=None)
    assert not outer  # (recorded by the inner block each time, as eagerly)
    assert _filters() == before
    with pytest.raises(Unsupported, match="inside a warnings.catch_warnings block"):
        kiln.compile(fn, fullgraph=True)(torch.randn(3))


def test_filter_change_inside_the_block_is_undone():
    def fn(x):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="kiln-test")
            y = x + 1
        return y

    before = _filters()
    run_and_compare(fn, torch.randn(3))
    assert _filters() == before
    with pytest.raises(Unsupported, match="warnings.filterwarnings inside a warnings.catch"):
        kiln.compile(fn, fullgraph=True)(torch.randn(3))


def test_manager_returned_unentered():
    def fn(x):
        with warnings.catch_warnings():
            y = x + 1
        return y, warnings.catch_warnings(record=True)

    compiled = kiln.compile(fn, fullgraph=True)
    _, a = compiled(torch.randn(2))
    _, b = compiled(torch.randn(2))
    assert isinstance(a, warnings.catch_warnings) and a is not b
    with a as log:  # a fresh, unentered manager: entering it works
        warnings.warn("recorded", stacklevel=1)
    assert len(log) == 1


def test_record_list_read_is_a_break():
    def fn(x):
        with warnings.catch_warnings(record=True) as caught:
            y = x + 1
        return y, len(caught)

    run_and_compare(fn, torch.randn(3))
    with pytest.raises(Unsupported, match=r"list of warnings.catch_warnings\(record=True\) used"):
        kiln.compile(fn, fullgraph=True)(torch.randn(3))


def test_non_constant_argument_is_a_break():
    def fn(x):
        with warnings.catch_warnings(record=x.sum() > 0):
            return x + 1

    run_and_compare(fn, torch.randn(3))
    with pytest.raises(Unsupported, match="catch_warnings with an argument that is not a const"):
        kiln.compile(fn, fullgraph=True)(torch.randn(3))
