"""`torch.set_default_dtype` inside a compiled frame (Note [Torch: set_default_dtype traced])."""

import contextlib

import torch
from frontend_helpers import CountingBackend

import kiln


@contextlib.contextmanager
def default_dtype(dtype):
    old = torch.get_default_dtype()
    try:
        torch.set_default_dtype(dtype)
        yield
    finally:
        torch.set_default_dtype(old)


def scoped(x):
    with default_dtype(torch.float64):
        y = torch.tensor([1.5, 2.5]) + x
        inside = torch.get_default_dtype()
    return y, inside, torch.ones(2).dtype


def leaves_it_set(x):
    torch.set_default_dtype(torch.float64)
    return torch.ones(2) + x


def test_scoped_default_dtype_matches_eager():
    backend = CountingBackend()
    f = kiln.compile(scoped, backend=backend, fullgraph=True)
    x = torch.ones(2)
    for _ in range(2):
        assert f(x)[1:] == scoped(x)[1:] == (torch.float64, torch.float32)
        assert f(x)[0].dtype == scoped(x)[0].dtype == torch.float64
        assert torch.get_default_dtype() == torch.float32
    assert len(backend.graphs) == 1


def test_setting_left_behind_as_eagerly():
    for backend in ("eager", "kiln"):
        kiln.reset()
        try:
            expected = leaves_it_set(torch.ones(2, dtype=torch.float64))
            assert torch.get_default_dtype() == torch.float64
            torch.set_default_dtype(torch.float32)
            got = kiln.compile(leaves_it_set, backend=backend)(torch.ones(2, dtype=torch.float64))
            assert torch.get_default_dtype() == torch.float64
            assert torch.equal(got, expected)
        finally:
            torch.set_default_dtype(torch.float32)


def test_guarded_on_the_entry_default_dtype():
    backend = CountingBackend()
    f = kiln.compile(scoped, backend=backend)
    x = torch.ones(2)
    f(x)
    try:
        torch.set_default_dtype(torch.float64)
        got, expected = f(x), scoped(x)
        assert got[1:] == expected[1:] and got[2] == torch.float64
    finally:
        torch.set_default_dtype(torch.float32)
    assert len(backend.graphs) == 2
