"""FSDP2 (`fully_shard`) scenarios on gloo/CPU: compiled (kiln) and eager FSDP side by side on the
same data, 2 ranks. Run by tests/distributed/test_fsdp.py through dist_helpers.run_workers."""

import torch
import torch.nn as nn
from dist_helpers import main
from torch.distributed.fsdp import fully_shard

import kiln


def build():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
    for layer in m:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    return fully_shard(m)


def train(model, mod, ref, steps=3):
    """SGD steps on both: losses, full gradients and full parameters equal every step."""
    rank = torch.distributed.get_rank()
    opt = torch.optim.SGD(mod.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(steps):
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(10 * step + rank))
        loss = model(x).pow(2).mean()
        loss.backward()
        ref_loss = ref(x).pow(2).mean()
        ref_loss.backward()
        torch.testing.assert_close(loss, ref_loss)
        for (name, p), q in zip(mod.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad.full_tensor(), q.grad.full_tensor(), msg=name)
            torch.testing.assert_close(p.full_tensor(), q.full_tensor(), msg=name)
        opt.step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
    s = kiln.counters["stats"]
    reasons = kiln.counters["graph_break"]
    other = sum(n for r, n in reasons.items() if "fully_shard" not in r)
    return {**{k: s.get(k, 0) for k in ("graph_breaks", "unique_graphs")}, "other_breaks": other}


def per_block(rank, world):
    mod, ref = build(), build()
    for i in (0, 2, 4):
        mod[i] = kiln.compile(mod[i], backend="aot_eager")
    return train(mod, mod, ref)


def whole_model(rank, world):
    mod, ref = build(), build()
    return train(kiln.compile(mod, backend="aot_eager"), mod, ref)


SCENARIOS = {"per_block": per_block, "whole_model": whole_model}

if __name__ == "__main__":
    main(SCENARIOS)
