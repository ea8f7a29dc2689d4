"""int.__new__(int, ...) and bool.__new__(bool, ...) of constants fold to what Python returns."""

import pytest
import torch

import kiln


def test_new_of_the_type_itself_folds():
    def fn(x):
        vals = (
            int.__new__(int),
            int.__new__(int, "17"),
            bool.__new__(bool, 3),
            float.__new__(float, 2),
        )
        return x + sum(vals), vals

    x = torch.zeros(1)
    got, got_vals = kiln.compile(fn, backend="eager", fullgraph=True)(x)
    want, want_vals = fn(x)
    assert got_vals == want_vals
    assert [type(v) for v in got_vals] == [type(v) for v in want_vals]
    torch.testing.assert_close(got, want)


def test_new_of_a_subclass_is_not_folded():
    class MyInt(int):
        pass

    def fn(x):
        return x + int.__new__(MyInt, 4)

    compiled = kiln.compile(fn, backend="eager")
    torch.testing.assert_close(compiled(torch.zeros(1)), fn(torch.zeros(1)))


def test_new_that_raises_eagerly_raises_compiled():
    def fn(x):
        return x + int.__new__(int, "nope")

    with pytest.raises(ValueError):
        kiln.compile(fn, backend="eager")(torch.zeros(1))
