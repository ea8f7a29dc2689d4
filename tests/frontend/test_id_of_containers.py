"""id() of a list / dict read from a source (a global): the real container's id, the
container pinned by an ID_MATCH guard (Note [Stdlib: id()])."""

import torch
from frontend_helpers import CountingBackend, assert_same

import kiln

TABLE = {"a": 1, "b": 2}
ITEMS = [1.0]


def memo_by_id(x):
    memo = {}
    memo[id(TABLE)] = True
    if id(TABLE) in memo:
        return x + 1.0, id(TABLE)
    return x + 2.0, 0


def list_id(x):
    return x * len(ITEMS), id(ITEMS)


def test_id_of_global_dict():
    kiln.reset()
    compiled = kiln.compile(memo_by_id, fullgraph=True)
    x = torch.randn(4)
    assert_same(memo_by_id(x), compiled(x))


def test_id_of_global_list_guarded():
    global ITEMS
    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(list_id, backend=backend, fullgraph=True)
    for items in ([1.0, 2.0], [1.0, 2.0]):
        ITEMS = items
        x = torch.randn(3)
        assert_same(list_id(x), compiled(x))
        assert_same(list_id(x), compiled(x))
    assert backend.calls == 2  # (another list: another id, a recompile)
