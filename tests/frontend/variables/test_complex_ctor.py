"""complex(...) of constants in a compiled frame is the number Python makes; bad calls break."""

import pytest
import torch

import kiln


def test_complex_forms_fold_to_pythons_numbers():
    def fn(x):
        empty = complex()  # noqa: UP018  (the call itself is traced, not the literal 0j)
        zs = (empty, complex(3), complex(1.5, -2), complex(imag=4), complex("2-1j"))
        return [x * z for z in zs], zs

    x = torch.ones(2)
    got, got_zs = kiln.compile(fn, backend="eager", fullgraph=True)(x)
    want, want_zs = fn(x)
    assert got_zs == want_zs
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("args", [(1, 2, 3), ("not a number",), ([],)])
def test_complex_that_raises_eagerly_raises_compiled(args):
    def fn(x):
        return x + complex(*args)

    with pytest.raises((TypeError, ValueError)):
        fn(torch.ones(1))
    with pytest.raises((TypeError, ValueError)):
        kiln.compile(fn, backend="eager")(torch.ones(1))
