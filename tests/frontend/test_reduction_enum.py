"""torch.nn._reduction's helpers traced as user code (config.traced_modules), compiled vs eager."""

import pytest
import torch
import torch.nn.functional as F
from frontend_helpers import run_and_compare


def _by_enum(loss, reduction):
    reduction_enum = F._Reduction.get_enum(reduction)
    if reduction_enum == 0:
        return loss
    elif reduction_enum == 1:
        return loss.mean()
    elif reduction_enum == 2:
        return loss.sum()


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_get_enum_read_through_functional(reduction):
    run_and_compare(_by_enum, torch.rand(3, 5), reduction, fullgraph=True, expected_frames=1)


def test_get_enum_of_a_bad_name_raises_as_eager():
    def fn(loss, reduction):
        try:
            return _by_enum(loss, reduction)
        except ValueError as e:
            return loss * 0, str(e)

    run_and_compare(fn, torch.rand(2), "bad", fullgraph=True, expected_frames=1)


def test_legacy_get_string():
    def fn(x, size_average, reduce):
        return x + 1, F._Reduction.legacy_get_string(size_average, reduce, emit_warning=False)

    run_and_compare(fn, torch.ones(1), False, True, fullgraph=True, expected_graphs=1)
