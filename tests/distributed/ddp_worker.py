"""DDP scenarios, each compiled (kiln) and eager DDP side by side on the same data, 2 gloo ranks.

Run by tests/distributed/test_ddp.py through dist_helpers.run_workers.
"""

import copy

import torch
import torch.distributed as dist
import torch.nn as nn
from dist_helpers import main
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

import kiln


def mlp():
    return nn.Sequential(
        nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4)
    )


class PartlyUsed(nn.Module):
    """`extra` takes part only on even steps: unused parameters on odd ones."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 16)
        self.b = nn.Linear(16, 4)
        self.extra = nn.Linear(16, 4)
        self.unused = nn.Linear(16, 4)

    def forward(self, x, use_extra):
        h = torch.relu(self.a(x))
        out = self.b(h)
        if use_extra:
            out = out + self.extra(h)
        return out


def with_batchnorm():
    return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4))


def data(step, rank, *, n=6):
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(n, 8, generator=g) * (rank + 1)


def close(a, b, what, atol=1e-5):
    if not torch.allclose(a, b, atol=atol, rtol=1e-4):
        raise AssertionError(f"{what}: max diff {(a - b).abs().max().item()}")


def pair(build, order, backend, **ddp_kw):
    """(compiled DDP model, its inner module, eager DDP model, its inner module)."""
    torch.manual_seed(0)
    mod = build()
    ref_mod = copy.deepcopy(mod)
    ref = DDP(ref_mod, **ddp_kw)
    if order == "outer":
        model = kiln.compile(DDP(mod, **ddp_kw), backend=backend)
    else:
        model = DDP(kiln.compile(mod, backend=backend), **ddp_kw)
    return model, mod, ref, ref_mod


def compare_state(mod, ref_mod, what):
    for (name, p), q in zip(mod.named_parameters(), ref_mod.parameters()):
        if (p.grad is None) != (q.grad is None):
            raise AssertionError(f"{what}: grad of {name} is {p.grad} vs eager {q.grad}")
        if p.grad is not None:
            close(p.grad, q.grad, f"{what}: grad of {name}")
        close(p, q, f"{what}: {name}")
    for (name, b), c in zip(mod.named_buffers(), ref_mod.buffers()):
        close(b.float(), c.float(), f"{what}: buffer {name}")


def train(model, mod, ref, ref_mod, steps=3, extra_args=lambda step: ()):
    """SGD steps on both; losses, gradients, parameters and buffers equal every step."""
    opt = torch.optim.SGD(mod.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref_mod.parameters(), lr=0.1)
    rank = dist.get_rank()
    for step in range(steps):
        x = data(step, rank)
        loss = model(x, *extra_args(step)).pow(2).mean()
        loss.backward()
        ref_loss = ref(x, *extra_args(step)).pow(2).mean()
        ref_loss.backward()
        close(loss, ref_loss, f"step {step}: loss")
        compare_state(mod, ref_mod, f"step {step}")
        opt.step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
    return stats()


def stats():
    s = kiln.counters["stats"]
    return {k: s.get(k, 0) for k in ("graph_breaks", "unique_graphs", "ddp_pieces")}


def outer_kiln(rank, world):
    return train(*pair(mlp, "outer", "kiln"))


def inner_kiln(rank, world):
    return train(*pair(mlp, "inner", "kiln"))


def outer_find_unused(rank, world):
    model = pair(PartlyUsed, "outer", "aot_eager", find_unused_parameters=True)
    return train(*model, steps=4, extra_args=lambda step: (step % 2 == 0,))


def inner_find_unused(rank, world):
    model = pair(PartlyUsed, "inner", "aot_eager", find_unused_parameters=True)
    return train(*model, steps=4, extra_args=lambda step: (step % 2 == 0,))


def no_sync_accumulation(rank, world):
    """Two micro-batches under no_sync(), the third synchronizes: grads equal eager's."""
    for order in ("outer", "inner"):
        model, mod, ref, ref_mod = pair(mlp, order, "aot_eager")
        for step in range(2):
            for micro in range(3):
                x = data(10 * step + micro, rank)
                for m in (model, ref):
                    if micro < 2:
                        with m.no_sync():
                            m(x).pow(2).mean().backward()
                    else:
                        m(x).pow(2).mean().backward()
                if micro == 0:  # local only: ranks differ until the synchronizing step
                    compare_state(mod, ref_mod, f"{order} step {step} micro 0")
            compare_state(mod, ref_mod, f"{order} step {step}")
            mine = mod[0].weight.grad.clone()
            other = [torch.empty_like(mine) for _ in range(world)]
            dist.all_gather(other, mine)
            close(other[0], other[1], "synchronized grads equal across ranks")
            for m in (mod, ref_mod):
                m.zero_grad()
    return stats()


def batchnorm_buffers(rank, world):
    """broadcast_buffers (the default): rank 0's BatchNorm stats replace the others' each step."""
    out = {}
    for order in ("outer", "inner"):
        kiln.reset()
        out[order] = train(*pair(with_batchnorm, order, "aot_eager"), steps=3)
    return out


def bucket_overlap(rank, world):
    """Small buckets: the graph is split at their boundaries, and the last layers' bucket is
    all-reduced before autograd computes the gradient of the model's input."""
    out = {}
    for order in ("outer", "inner"):
        kiln.reset()
        model, mod, ref, ref_mod = pair(mlp, order, "aot_eager", bucket_cap_mb=0.01)
        ddp = model if order == "inner" else model._orig_mod
        events, per_step = [], []

        def hook(events, bucket):
            events.append(("bucket", len(bucket.parameters())))
            return default_hooks.allreduce_hook(None, bucket)

        ddp.register_comm_hook(events, hook)
        for step in range(2):
            events.clear()
            x = data(step, rank).requires_grad_()
            x.register_hook(lambda g, events=events: events.append(("input grad", 0)))
            loss = model(x).pow(2).mean()
            nodes = backward_nodes(loss.grad_fn)
            loss.backward()
            ref_loss = ref(x.detach()).pow(2).mean()
            ref_loss.backward()
            close(loss, ref_loss, f"{order} step {step}: loss")
            compare_state(mod, ref_mod, f"{order} step {step}")
            mod.zero_grad()
            ref_mod.zero_grad()
            per_step.append(list(events))
        buckets = ddp._get_ddp_logging_data()["bucket_sizes"]
        out[order] = {**stats(), "events": per_step, "buckets": buckets, "nodes": nodes}
    return out


def backward_nodes(fn):
    """Names of the autograd nodes reachable from fn that are not AccumulateGrad."""
    seen, todo, names = set(), [fn], []
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if type(node).__name__ != "AccumulateGrad":
            names.append(type(node).__name__)
        todo.extend(n for n, _ in node.next_functions)
    return names


SCENARIOS = {
    "bucket_overlap": bucket_overlap,
    "outer_kiln": outer_kiln,
    "inner_kiln": inner_kiln,
    "outer_find_unused": outer_find_unused,
    "inner_find_unused": inner_find_unused,
    "no_sync_accumulation": no_sync_accumulation,
    "batchnorm_buffers": batchnorm_buffers,
}

if __name__ == "__main__":
    main(SCENARIOS)
