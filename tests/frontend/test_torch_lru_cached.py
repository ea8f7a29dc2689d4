"""torch's lru_cache'd functions in compiled code (Note [Stdlib: lru_cache'd functions]): the
cached set `torch.overrides.get_default_nowrap_functions()` returns is read as that very set,
guarded by its contents; eager is the oracle."""

import torch
from torch.overrides import get_default_nowrap_functions as imported_nowrap

import kiln
from tests.frontend.frontend_helpers import CountingBackend, assert_same


def _nowrap_membership(x):
    funcs = torch.overrides.get_default_nowrap_functions()
    table = {frozenset(funcs): x * 2}
    if torch.Tensor.grad.__get__ in funcs:
        x = x + table[frozenset(funcs)]
    if torch.Tensor.data.__get__ in funcs:
        x = x * 10
    return x + len(funcs)


def _imported(x):
    return x + len(imported_nowrap()) + (torch.Tensor._base.__get__ in imported_nowrap())


def test_nowrap_functions_fold_and_a_changed_set_recompiles():
    cached = torch.overrides.get_default_nowrap_functions()
    extra = torch.Tensor.data.__get__
    assert extra not in cached
    x = torch.randn(3)
    for fn in (_nowrap_membership, _imported):
        kiln.reset()
        counting = CountingBackend()
        compiled = kiln.compile(fn, backend=counting, fullgraph=True)
        assert_same(fn(x), compiled(x))
        assert_same(fn(x), compiled(x))
        assert len(counting.graphs) == 1
        cached.add(extra)  # the cache's own set changes: the guard sees it
        try:
            assert_same(fn(x), compiled(x))
        finally:
            cached.discard(extra)
        assert len(counting.graphs) == 2
        assert kiln.counters["graph_break"] == {}
