"""A Python __getattr__ on a dict subclass (`cfg.offset` read as `cfg["offset"]`): the hook
is inlined as on any user object (the builtin containers' own __getattribute__ slot is the plain
lookup), and the items it reads are guarded."""

import torch
from frontend_helpers import CountingBackend, assert_same

import kiln


class AttrDict(dict):
    def __getattr__(self, name):
        return self[name]


def add_offset(cfg, x):
    return x + cfg.offset


def test_dict_subclass_getattr_inlined_and_guarded():
    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(add_offset, backend=backend, fullgraph=True)
    x = torch.randn(4)
    for cfg in (AttrDict(offset=5), AttrDict(offset=5), AttrDict(offset=torch.ones(4))):
        assert_same(add_offset(cfg, x), compiled(cfg, x))
    cfg = AttrDict(offset=7)
    assert_same(add_offset(cfg, x), compiled(cfg, x))
