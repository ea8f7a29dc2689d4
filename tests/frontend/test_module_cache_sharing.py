"""Compiled wrappers of modules with one forward function and equal settings share one frame
cache (Note [Cache: one per forward and settings]); a method read from a module is guarded
against an instance attribute of that name (which Python would find first)."""

import gc
import weakref

import torch

import kiln


class Scaled(torch.nn.Module):
    k = 2.0

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.helper(self.lin(x)) * self.k

    def helper(self, x):
        return x + 1


class Shifted(Scaled):
    def helper(self, x):
        return x - 3


def test_wrappers_of_one_forward_share_entries():
    kiln.reset()
    x = torch.randn(2, 4)
    mods = [Scaled() for _ in range(4)]
    for m in mods:
        torch.testing.assert_close(kiln.compile(m, backend="eager")(x), m(x))
    assert kiln.counters["stats"]["unique_graphs"] == 1


def test_other_classes_and_instance_overrides_are_not_reused():
    kiln.reset()
    x = torch.randn(2, 4)
    shadowed = Scaled()
    shadowed.helper = lambda t: t * 10  # an instance attribute hides the method
    for m in (Scaled(), Shifted(), shadowed):
        torch.testing.assert_close(kiln.compile(m, backend="eager")(x), m(x))


def test_method_shadowed_after_compiling():
    kiln.reset()
    x = torch.randn(2, 4)
    m = Scaled()
    compiled = kiln.compile(m, backend="eager")
    torch.testing.assert_close(compiled(x), m(x))
    m.helper = lambda t: t * 10
    torch.testing.assert_close(compiled(x), m(x))
    del m.helper
    torch.testing.assert_close(compiled(x), m(x))


def test_shared_cache_dies_with_its_wrappers():
    kiln.reset()
    m = Scaled()
    first, second = kiln.compile(m, backend="eager"), kiln.compile(m, backend="eager")
    assert first._kiln_cache is second._kiln_cache
    ref = weakref.ref(first._kiln_cache)
    del first, second
    gc.collect()
    assert ref() is None
