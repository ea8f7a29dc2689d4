"""Optimizer step time: kiln.compile vs eager (foreach) vs torch.compile, side by side in one run.

A model of ~10M parameters in ~200 tensors (100 Linear layers of 316x316, weight and bias).
Each compiled function is `opt.step()`; the gradients are set once and reused. Steps are
interleaved (eager, kiln, torch.compile, eager ...) and the median per-step time is reported with
the ratios eager / kiln and eager / torch.compile (above 1: faster than eager).

    .venv/bin/python benchmarks/optimizer.py [--opt Adam] [--rounds 20] [--layers 100] [--quick]

`--quick` runs 20 layers (2M parameters in 40 tensors) and 5 rounds. The warm-up line is each
runner's first three steps: the compile (the first step also creates the state, so kiln and
torch.compile compile twice) and two more steps.
"""

import argparse
import statistics
import time

import torch

import kiln


def make(name, layers, width, compiler):
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-2
    opt = getattr(torch.optim, name)(model.parameters(), lr=1e-3, foreach=True)

    def step():
        opt.step()

    return compiler(step) if compiler else step


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--opt", default="Adam")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--layers", type=int, default=100)
    parser.add_argument("--width", type=int, default=316)
    parser.add_argument("--quick", action="store_true", help="20 layers, 5 rounds")
    parser.add_argument("--no-torch-compile", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.layers, args.rounds = 20, 5
    runs = {
        "eager foreach": make(args.opt, args.layers, args.width, None),
        "kiln": make(args.opt, args.layers, args.width, kiln.compile),
    }
    if not args.no_torch_compile:
        runs["torch.compile"] = make(args.opt, args.layers, args.width, torch.compile)
    n = sum(p.numel() for p in torch.nn.Linear(args.width, args.width).parameters()) * args.layers
    print(f"{args.opt}: {n / 1e6:.1f}M parameters in {2 * args.layers} tensors")
    for name, fn in runs.items():  # compile (first step creates the state) and warm up
        t0 = time.perf_counter()
        for _ in range(3):
            fn()
        print(f"  warm-up {name}: {time.perf_counter() - t0:.1f}s")
    times = {k: [] for k in runs}
    for _ in range(args.rounds):
        for name, fn in runs.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    for name, t in med.items():
        print(f"  {name:14s} {t * 1e3:8.2f} ms/step   eager/this {med['eager foreach'] / t:5.2f}x")
    print(
        f"  kiln graphs: {kiln.counters['stats']['unique_graphs']}, "
        f"breaks: {kiln.counters['stats']['graph_breaks']}"
    )


if __name__ == "__main__":
    main()
