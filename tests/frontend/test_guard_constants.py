"""Constant guards pass only for values the trace computes the same with (Note [Guards:
constants compared]): exact item types, -0.0 apart from 0.0, NaN equal to NaN."""

import math

import pytest
import torch

import kiln


def _calls(fn, args_list):
    kiln.reset()
    compiled = kiln.compile(fn, backend="eager")
    for args in args_list:
        got, want = compiled(*args), fn(*args)
        assert repr(got) == repr(want), (args, got, want)
    return kiln.counters["stats"]["recompiles"]


def items(x, t):
    return x + 1, t[0] // 1, repr(t[1]), sorted(map(repr, t[2]))


def test_tuple_items_of_another_type_recompile():
    x = torch.ones(2)
    calls = [
        (x, (1, 2, frozenset({3}))),
        (x, (1.0, 2, frozenset({3}))),
        (x, (1, True, frozenset({3}))),
    ]
    calls.append((x, (1, 2, frozenset({3.0}))))
    assert _calls(items, calls) >= 3  # (each call its own entry: results as eager)


def _over_global_values(fn, name, values):
    """Call compiled `fn` with the module global `name` set to each value in turn, comparing with
    eager (results by repr); the global is put back. Returns the compiled function."""
    saved = globals()[name]
    x = torch.ones(2)
    kiln.reset()
    compiled = kiln.compile(fn, backend="eager")
    try:
        for value in values:
            globals()[name] = value
            got, want = compiled(x), fn(x)
            assert repr(got) == repr(want), value
    finally:
        globals()[name] = saved
    return compiled


SCALE = 0.0


def divide(x):
    return x / SCALE


def test_negative_zero_is_not_zero():
    _over_global_values(divide, "SCALE", (0.0, -0.0, 0.0))


NAN_VALUES = (complex(1.0, math.nan), (math.nan, 2.0))


def uses_nan_constants(x):
    return x * NAN_VALUES[0], x + NAN_VALUES[1][0]


@pytest.mark.parametrize("calls", [3])
def test_constants_holding_nan_do_not_recompile(calls):
    x = torch.tensor([1.0 + 1j])
    assert _calls(uses_nan_constants, [(x,)] * calls) == 0


CONFIG = (1, 2, (3, "a", None))


def uses_config(x):
    return x + 1, repr(CONFIG)


def test_constant_tuple_compared_item_by_item_with_exact_types():
    """A tuple of ints, strings, None, bools and nonzero floats is checked by the guard program
    item by item (no typed_constant call), with typed_constant's meaning."""
    values = [
        (1, 2, (3, "a", None)),
        (1.0, 2, (3, "a", None)),
        (1, True, (3, "a", None)),
        (1, 2, (3, "a", False)),
        (1, 2, (3, "b", None)),
        (1, 2, (3, "a", None), 4),
        (1, 2, (3.5, "a", None)),
        (1, 2, [3, "a", None]),
        (1, 2, (3, "a", None)),
    ]
    compiled = _over_global_values(uses_config, "CONFIG", values)
    assert kiln.counters["stats"]["recompiles"] >= len(values) - 2
    source = compiled._kiln_cache.entry_info[0].guard.source
    assert "___typed" not in source and "[2][1] == 'a'" in source


RATE = 0.0


def uses_rate(x):
    return x * 2, repr(RATE), repr((RATE, 1))


def test_zero_and_infinite_floats_compared_without_typed_constant():
    values = (0.0, -0.0, 0.0, math.inf, -math.inf, math.inf, 0.0)
    compiled = _over_global_values(uses_rate, "RATE", values)
    source = compiled._kiln_cache.entry_info[0].guard.source
    assert "___typed" not in source and "___copysign" in source
