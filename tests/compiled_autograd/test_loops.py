"""config.compiled_autograd with a graph break inside a training loop: the loop keeps compiling
(resume functions run as tail calls inside the frame's compiled-autograd context) and every
backward is captured; grads equal eager."""

import copy

import torch
from ca_helpers import ca_counters, clean

import kiln
from kiln import config, logs


def _train(model, xs):
    total = 0.0
    for x in xs:
        loss = model(x).pow(2).mean()
        kiln.graph_break()  # a graph break inside the loop
        loss.backward()
        total = total + loss.detach()
    return total


def test_graph_break_inside_a_training_loop_keeps_compiling():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    ref = copy.deepcopy(model)
    step = kiln.compile(_train, backend="aot_eager")
    prev = config.compiled_autograd
    config.compiled_autograd = True
    try:
        with clean("graph_breaks") as log:
            kiln.reset()
            for _ in range(3):
                xs = [torch.randn(3, 4) for _ in range(4)]
                torch.testing.assert_close(step(model, xs), _train(ref, xs))
                for p, q in zip(model.parameters(), ref.parameters()):
                    torch.testing.assert_close(p.grad, q.grad)
            counters = ca_counters()
            stats = dict(logs.counters["stats"])
    finally:
        config.compiled_autograd = prev
    assert "graph break inside a loop" not in log.getvalue()
    assert counters.get("fallbacks", 0) == 0 and counters["calls"] == 12, counters
    assert counters["captures"] <= 2, counters  # the first iteration's graphs, then the loop's
    assert stats["unique_graphs"] >= 2, stats  # the forward compiles (no eager frame)
