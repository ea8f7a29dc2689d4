"""Entries whose identity-guarded objects died leave the cache (Note [Cache: entries of objects
that died])."""

import gc

import torch

import kiln
from kiln import config


def add_k(c, x):
    return x + c.k


def make_class(k):
    class Made:
        pass

    Made.k = k
    return Made


def test_a_class_per_call_never_reaches_the_cache_limit():
    kiln.reset()
    kiln.counters.clear()
    compiled = kiln.compile(add_k, backend="eager")
    x = torch.randn(3)
    for i in range(3 * config.cache_size_limit):
        torch.testing.assert_close(compiled(make_class(i), x), x + i)
    assert kiln.counters["frames"]["cache_limit_hit"] == 0
    assert kiln.counters["frames"]["ok"] == 3 * config.cache_size_limit  # (compiled every call)
    gc.collect()
    assert compiled._kiln_cache.entries == [] and compiled._kiln_cache.entry_info == []


def test_an_entry_of_a_live_class_stays():
    kiln.reset()
    compiled = kiln.compile(add_k, backend="eager")
    x = torch.randn(3)
    kept = make_class(2)
    for _ in range(2):
        torch.testing.assert_close(compiled(kept, x), x + 2)
    gc.collect()
    assert len(compiled._kiln_cache.entries) == 1
