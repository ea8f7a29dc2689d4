"""A mutable table of torch's read in the frame (`from torch.x import _TABLE`, test_misc part1
test_getattr_dict): traced under fullgraph=True, guarded on its contents, compared with eager."""

import functools

import torch
import torch.masked.maskedtensor._ops_refs as ops_refs
from frontend_helpers import assert_same, run_and_compare

import kiln


def table_size(x):
    from torch.masked.maskedtensor._ops_refs import _MASKEDTENSOR_FUNCTION_TABLE

    return x * len(_MASKEDTENSOR_FUNCTION_TABLE)


def test_len_of_a_torch_table_imported_in_the_frame():
    run_and_compare(table_size, torch.ones(3), fullgraph=True, expected_graphs=1)


def table_lookup(x):
    from torch.masked.maskedtensor._ops_refs import _MASKEDTENSOR_FUNCTION_TABLE

    return x + (torch.ops.aten.sum in _MASKEDTENSOR_FUNCTION_TABLE), "zz" in (
        _MASKEDTENSOR_FUNCTION_TABLE
    )


def test_membership_in_a_torch_table_keyed_by_ops():
    run_and_compare(table_lookup, torch.ones(3), fullgraph=True, expected_graphs=1)


def test_a_later_change_to_the_table_recompiles():
    kiln.reset()
    compiled = kiln.compile(table_size, fullgraph=True)
    x = torch.ones(2)
    assert_same(table_size(x), compiled(x))
    table = ops_refs._MASKEDTENSOR_FUNCTION_TABLE
    table["zz"] = functools.partial(len)
    try:
        assert_same(table_size(x), compiled(x))
    finally:
        del table["zz"]
    assert_same(table_size(x), compiled(x))
