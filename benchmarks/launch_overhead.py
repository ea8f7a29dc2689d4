"""Where a compiled model's step time goes on a GPU: per-call times with Triton's launcher and
with kiln's direct relaunch (Note [Triton: launches on CUDA]), next to eager and torch.compile,
then the Python functions that the kiln call spends most time in (cProfile).

    python benchmarks/launch_overhead.py [--models nanogpt,mlp] [--calls 300] [--device cuda]

Inference, no grad; the median of 5 rounds of `--calls` calls each, synchronised at each round's
end (the time a launch-bound model takes per call).
"""

import argparse
import cProfile
import pstats
import statistics
import time

import torch

import kiln
from kiln import config
from kiln_bench.models import REGISTRY


def per_call_us(fn, inputs, calls, sync):
    rounds = []
    for _ in range(5):
        sync()
        t = time.perf_counter()
        for _ in range(calls):
            fn(*inputs)
        sync()
        rounds.append((time.perf_counter() - t) / calls * 1e6)
    return statistics.median(rounds)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="nanogpt,mlp,pointwise")
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--device", default="cuda")
    args = p.parse_args(argv)
    cuda = args.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for name in args.models.split(","):
        model, inputs, _ = REGISTRY[name].build(args.device)
        model.eval()
        kiln.reset()
        compiled = kiln.compile(model, backend="kiln")
        reference = torch.compile(model)
        row = {}
        with torch.no_grad():
            for label, fn, fast in (
                ("eager", model, True),
                ("kiln (Triton's launcher)", compiled, False),
                ("kiln (direct relaunch)", compiled, True),
                ("torch.compile", reference, True),
            ):
                config.triton_fast_launch = fast
                for _ in range(3):
                    fn(*inputs)
                row[label] = per_call_us(fn, inputs, args.calls, sync)
            config.triton_fast_launch = True
            print(f"{name}: " + ", ".join(f"{k} {v:.0f} us" for k, v in row.items()), flush=True)
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(args.calls):
                compiled(*inputs)
            prof.disable()
            sync()
        stats = pstats.Stats(prof)
        stats.sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
