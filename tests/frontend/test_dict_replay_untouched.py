"""A dict input the trace stores one key into is replayed by that key alone, even when its other
values have no source of their own (builtin functions): the transformed code stores one item,
and the dict afterwards equals eager's (Note [Side effects: dicts replayed key by key])."""

import dis
import math

import torch

import kiln


def _table():
    fns = [getattr(math, n) for n in dir(math) if callable(getattr(math, n))]
    return {f"f{i}": fn for i, fn in enumerate(fns * 4)}


def set_one(x, d):
    d["picked"] = d["f3"]
    return x + 1


def test_one_store_replayed_among_sourceless_values():
    kiln.reset()
    eager_d, compiled_d = _table(), _table()
    eager = set_one(torch.ones(2), eager_d)
    compiled = kiln.compile(set_one, backend="eager")
    torch.testing.assert_close(compiled(torch.ones(2), compiled_d), eager)
    assert list(compiled_d) == list(eager_d)
    assert all(compiled_d[k] is eager_d[k] for k in eager_d)
    (_, transformed), *_ = compiled._kiln_cache.entries
    stores = [i for i in dis.get_instructions(transformed) if i.opname == "STORE_SUBSCR"]
    assert len(stores) == 1
