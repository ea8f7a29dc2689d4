"""The plan key of a graph whose inputs the frontend guards reads only its scalar inputs
(Note [AOT: the guarded key's positions])."""

import torch

from kiln.autograd.aot import aot_eager
from kiln.autograd.plan_keys import _guarded_key, guarded_key_positions
from kiln.contracts import GraphMeta


def _guarded_graph(fn):
    gm = torch.fx.symbolic_trace(fn)
    GraphMeta.update(gm, inputs_guarded=True)
    return gm


def test_scalar_inputs_still_key_the_plans():
    def fn(x, k, y):
        return x * k + y

    x, y = torch.randn(3), torch.randn(3)
    compiled = aot_eager(_guarded_graph(fn), [x, 2, y])
    assert compiled.guarded
    for k in (2, 3, 2, 5):
        torch.testing.assert_close(compiled(x, k, y), fn(x, k, y))
    assert compiled.key_positions == (1,)
    assert len(compiled.plans) == 3


def test_positions_skip_tensors_and_dynamic_scalars():
    args = [torch.randn(2), 3, torch.randn(2), 1.5, "s"]
    assert guarded_key_positions(args) == (1, 3, 4)
    assert guarded_key_positions(args, {3: True}) == (1, 4)
    assert _guarded_key(args) == _guarded_key(args, positions=(1, 3, 4))
    assert _guarded_key(args, {3: True}) == _guarded_key(args, {3: True}, (1, 4))
    with torch.no_grad():
        assert _guarded_key(args) != _guarded_key([*args[:1], 4, *args[2:]])
