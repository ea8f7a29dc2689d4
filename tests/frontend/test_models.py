"""The built-in benchmark models through the frontend: one graph each, eager-equal outputs,
gradients and buffers (backend="eager": the frontend alone)."""

import copy

import pytest
import torch

import kiln
from kiln_bench.models import REGISTRY

BUILTIN = [n for n, spec in REGISTRY.items() if "builtin" in spec.tags]


@pytest.mark.parametrize("name", BUILTIN)
def test_builtin_model_one_graph_train_step(name):
    kiln.reset()
    model, inputs, loss_fn = REGISTRY[name].build(batch=2)
    ref = copy.deepcopy(model)
    opt = kiln.compile(model, backend="eager")
    for _ in range(2):
        torch.manual_seed(0)
        loss = loss_fn(opt(*inputs))
        loss.backward()
        torch.manual_seed(0)
        ref_loss = loss_fn(ref(*inputs))
        ref_loss.backward()
        torch.testing.assert_close(loss, ref_loss)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    for a, b in zip(model.buffers(), ref.buffers()):
        torch.testing.assert_close(a, b)
    assert kiln.counters["stats"]["unique_graphs"] == 1
    assert kiln.counters["stats"]["graph_breaks"] == 0
    assert kiln.counters["stats"]["recompiles"] == 0
