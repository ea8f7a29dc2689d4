"""An ndarray made inside a compiled frame is one object wherever the transformed code hands it out."""

import numpy as np
import torch

import kiln


def test_array_returned_twice_is_one_object():
    def fn(x):
        buf = np.zeros(3)
        return buf, buf, x + 1

    first, second, _ = kiln.compile(fn, backend="eager")(torch.ones(2))
    assert first is second
    first[0] = 5.0
    assert second[0] == 5.0


def test_out_argument_across_a_break_is_the_local():
    # np.sin(..., out=) runs eagerly after a break: its result must be the very `out` local.
    def fn():
        x = np.arange(4)
        out = np.empty((4, 4))
        res = np.sin(x, out=out)
        return res is out, out

    same, out = kiln.compile(fn, backend="eager")()
    eager_same, eager_out = fn()
    assert same is eager_same is True
    np.testing.assert_allclose(out, eager_out)
