"""DDP training step time, 2 gloo processes on 127.0.0.1: eager DDP vs kiln.compile(DDP(m)) vs
torch.compile(DDP(m)), side by side in one run.

Each rank holds three DDP copies of the same MLP (one per variant, each with its own reducer);
a step is forward, loss, backward (with the gradient all-reduce) and an SGD step. Steps are
interleaved (eager, kiln, torch.compile, eager ...) and rank 0 reports the median step time and
the ratio eager / variant (above 1: faster than eager DDP), with kiln's graph and piece counts.

    .venv/bin/python benchmarks/ddp.py [--layers 8] [--width 512] [--batch 64] [--rounds 30]
"""

import argparse
import copy
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

import kiln


def model(layers, width):
    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*mods)


def worker(rank, world, port, args):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    base = model(args.layers, args.width)
    kw = {"bucket_cap_mb": args.bucket_mb}
    variants = {
        "eager DDP": DDP(copy.deepcopy(base), **kw),
        "kiln": kiln.compile(DDP(copy.deepcopy(base), **kw)),
        "torch.compile": torch.compile(DDP(copy.deepcopy(base), **kw)),
    }
    opts = {k: torch.optim.SGD(m.parameters(), lr=1e-3) for k, m in variants.items()}
    x = torch.randn(args.batch, args.width) + rank

    def step(name):
        loss = variants[name](x).pow(2).mean()
        loss.backward()
        opts[name].step()
        opts[name].zero_grad()
        return loss

    for name in variants:  # compile and warm up
        t0 = time.perf_counter()
        for _ in range(3):
            step(name)
        if rank == 0:
            print(f"  warm-up {name}: {time.perf_counter() - t0:.1f}s", flush=True)
    times = {k: [] for k in variants}
    for _ in range(args.rounds):
        for name in variants:
            dist.barrier()
            t0 = time.perf_counter()
            step(name)
            times[name].append(time.perf_counter() - t0)
    if rank == 0:
        med = {k: statistics.median(v) for k, v in times.items()}
        n = sum(p.numel() for p in base.parameters())
        print(f"DDP x{world} (gloo): {n / 1e6:.1f}M parameters, batch {args.batch}")
        for name, t in med.items():
            print(f"  {name:14s} {t * 1e3:8.2f} ms/step   eager/this {med['eager DDP'] / t:5.2f}x")
        s = kiln.counters["stats"]
        print(
            f"  kiln: {s['unique_graphs']} graph(s), {s['ddp_pieces']} bucket pieces, "
            f"{s['graph_breaks']} breaks"
        )
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--bucket-mb", type=float, default=2.0)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(2, port, args), nprocs=2)


if __name__ == "__main__":
    main()
