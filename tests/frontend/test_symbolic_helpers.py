"""torch.fx.experimental.symbolic_shapes' helpers called by user code (`guard_or_false(n == 0)`,
`guard_size_oblivious`) are traced like user code: on a frame's ints they take eager's path, on
size symbols they answer with a guard, and their deprecation warnings are replayed."""

import warnings

import pytest
import torch
from torch.fx.experimental.symbolic_shapes import (
    expect_true,
    guard_bool,
    guard_or_false,
    guard_or_true,
    guard_size_oblivious,
    statically_known_true,
)

import kiln


def branches_on_sizes(x):
    n = x.size(0)
    a = guard_or_false(n == 0) + guard_or_true(n > 1) + statically_known_true(n != 3)
    a += guard_bool(n < 5) + expect_true(n >= 0)
    if guard_size_oblivious(n == 0):
        return torch.zeros(1), a
    return x * 2, a


def run_recording_warnings(fn, x):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = fn(x)
    return out, [(w.category, str(w.message)) for w in seen]


@pytest.mark.parametrize("dynamic", [False, True])
def test_symbolic_shape_helpers_match_eager(dynamic):
    kiln.reset()
    compiled = kiln.compile(branches_on_sizes, backend="eager", fullgraph=True, dynamic=dynamic)
    for n in (0, 2, 3, 7, 2):
        x = torch.randn(n)
        (want, want_a), want_warnings = run_recording_warnings(branches_on_sizes, x)
        (got, got_a), got_warnings = run_recording_warnings(compiled, x)
        torch.testing.assert_close(got, want)
        assert got_a == want_a
        assert got_warnings == want_warnings and want_warnings  # (guard_size_oblivious warns)
