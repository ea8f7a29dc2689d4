"""Backward time of a training step with a hook on every parameter (as DDP registers them):
eager vs kiln (ahead-of-time backward) vs kiln + compiled autograd, and the same under
torch.compile + torch's compiled autograd; and the per-`.backward()` cost of kiln's compiled
autograd cache lookup (walk the autograd graph, build the key, find the entry).

    .venv/bin/python benchmarks/compiled_autograd.py [--layers 4] [--dim 128] [--iters 30]
        [--ca-compiler none|eager|aot_eager|kiln]

One run in one process, the five modes interleaved per iteration; median backward seconds per
mode and the ratios against eager are printed (and written as JSON with --json PATH). torch's
compiled autograd gets the matching compiler (`none`: the graph as is; `kiln`: inductor).

Note [Benchmark: compiled autograd, measured]
4 transformer blocks (d=128, 48 parameters, each with a grad hook and a post-accumulate hook),
batch 8 x 32, 1 torch thread, --ca-compiler none, --iters 20, on the shared 2-core development
machine under load (several percent are noise). Before (ab37aa8) and after the cheaper lookup
(Note [Compiled autograd: the hot path]), two runs each, alternated:
                      lookup / backward   kiln CA / kiln AOT   torch CA / torch   kiln CA / torch CA
  before              904, 822 us         1.05, 1.02           1.03, 0.99         1.04, 1.08
  after               492, 643 us         1.02, 1.15           1.02, 1.01         0.99, 1.10
In one process, old and new code interleaved (min of 20 x 20 calls): walk + key 330 -> 250 us,
trie lookup 60 -> 20 us, together 1.4-1.5x less. What is left is Python reading each tensor's
metadata (138 saved tensors and leaves, 52 nodes); the rest of the gap to the ahead-of-time
backward is running the graph (and cloning grads that went through hooks, which eager steals).
"""

import argparse
import copy
import json
import statistics
import time

import torch
import torch.nn as nn
from blocks import Block

import kiln
import kiln.compiled_autograd as ca
from kiln.compiled_autograd.backward_cache import lookup
from kiln.compiled_autograd.collect import collect


def make_model(layers, dim):
    return nn.Sequential(*[Block(dim) for _ in range(layers)])


def ddp_hooks(model, buckets):
    """A grad hook and a post-accumulate hook per parameter, like DDP's reducer registers."""
    for name, p in model.named_parameters():
        p.register_hook(lambda g: g)
        p.register_post_accumulate_grad_hook(lambda p, n=name: buckets.append(n))


MODES = ("eager", "kiln", "kiln+compiled_autograd", "torch", "torch+compiled_autograd")


def torch_ca_compiler(name):
    """torch's compiled autograd with the matching compiler (kiln's code generator: inductor)."""
    if name == "none":
        return lambda gm: gm
    return torch.compile(backend="inductor" if name == "kiln" else name, fullgraph=True)


def ca_compiler(name):
    if name == "none":
        return None
    return kiln.compile(backend=name, fullgraph=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--ca-compiler", default="none")
    ap.add_argument("--json", default="")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: less noise)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    base = make_model(args.layers, args.dim)
    x = torch.randn(args.batch, args.seq, args.dim)
    buckets = []
    models = {}
    for mode in MODES:
        m = copy.deepcopy(base)
        ddp_hooks(m, buckets)
        if mode == "eager":
            fwd = m
        elif mode.startswith("torch"):
            fwd = torch.compile(m, backend="aot_eager")
        else:
            fwd = kiln.compile(m, backend="aot_eager")
        models[mode] = (m, fwd)
    compiler = ca_compiler(args.ca_compiler)
    torch_compiler = torch_ca_compiler(args.ca_compiler)
    times = {mode: [] for mode in models}
    for it in range(args.iters + 3):
        for mode, (m, fwd) in models.items():
            m.zero_grad(set_to_none=True)
            loss = fwd(x).square().mean()
            t0 = time.perf_counter()
            if mode == "kiln+compiled_autograd":
                with ca.enable(compiler):
                    loss.backward()
            elif mode == "torch+compiled_autograd":
                with torch._dynamo.compiled_autograd._enable(torch_compiler):
                    loss.backward()
            else:
                loss.backward()
            dt = time.perf_counter() - t0
            if it >= 3:  # warm-up: compiles and first captures
                times[mode].append(dt)
    ref = models["eager"][0]
    for m, _ in models.values():
        for p, q in zip(ref.parameters(), m.parameters()):
            torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4)
    med = {mode: statistics.median(ts) for mode, ts in times.items()}

    # cache-lookup cost: the walk + key + trie lookup that every .backward() pays on a hit
    m, fwd = models["kiln+compiled_autograd"]
    loss = fwd(x).square().mean()
    roots, grads = (loss,), (torch.ones_like(loss),)
    g = collect(roots, grads, (), True)
    n_nodes = len(g.nodes)
    reps = 200
    t0 = time.perf_counter()
    for _ in range(reps):
        g = collect(roots, grads, (), True)
        _, _, entry = lookup(ca.runtime._cache, g)
    lookup_us = (time.perf_counter() - t0) / reps * 1e6
    assert entry is not None, "the lookup should hit the cached graph"
    counters = dict(kiln.counters["compiled_autograd"])

    result = {
        "config": vars(args),
        "backward_ms": {k: round(v * 1e3, 3) for k, v in med.items()},
        "ratio_vs_eager": {k: round(v / med["eager"], 3) for k, v in med.items()},
        "ratio_ca_vs_kiln": round(med["kiln+compiled_autograd"] / med["kiln"], 3),
        "ratio_torch_ca_vs_torch": round(med["torch+compiled_autograd"] / med["torch"], 3),
        "ratio_kiln_ca_vs_torch_ca": round(
            med["kiln+compiled_autograd"] / med["torch+compiled_autograd"], 3
        ),
        "cache_lookup_us_per_backward": round(lookup_us, 1),
        "autograd_nodes": n_nodes,
        "cache_lookup_us_per_node": round(lookup_us / n_nodes, 2),
        "compiled_autograd_counters": counters,
        "parameters": sum(1 for _ in base.parameters()),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
