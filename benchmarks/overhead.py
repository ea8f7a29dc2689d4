"""Per-call overhead on a cache hit: kiln.compile vs torch.compile with the same trivial backend.

Both compile the same function with a backend that returns `gm.forward`, so the difference is the
frontend's hot path (guard check + transformed code). Timings are interleaved (kiln, torch, kiln,
torch ...) and the median per-call time of many rounds is reported, with the ratio kiln / torch.

    .venv/bin/python benchmarks/overhead.py [--rounds 200] [--calls 200]
"""

import argparse
import statistics
import time

import torch

import kiln


def trivial_backend(gm, example_inputs):
    return gm.forward


def one_op(x):
    return x.sin()


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x)


def ten_inputs(mod, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9):
    return mod(a0) + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9


def _per_call(fn, args, calls):
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter() - t0) / calls


def measure(name, fn, args, rounds, calls):
    """Median per-call seconds of eager, kiln and torch.compile, interleaved in one run."""
    torch._dynamo.reset()
    kiln.reset()
    k = kiln.compile(fn, backend=trivial_backend)
    t = torch.compile(fn, backend=trivial_backend)
    for f in (k, t):  # compile and warm up
        for _ in range(20):
            f(*args)
    times = {"eager": [], "kiln": [], "torch.compile": []}
    for _ in range(rounds):
        times["kiln"].append(_per_call(k, args, calls))
        times["torch.compile"].append(_per_call(t, args, calls))
        times["eager"].append(_per_call(fn, args, calls))
    med = {key: statistics.median(v) for key, v in times.items()}
    assert kiln.counters["stats"]["unique_graphs"] == 1, kiln.counters
    ratio = med["kiln"] / med["torch.compile"]
    over_k = med["kiln"] - med["eager"]
    over_t = med["torch.compile"] - med["eager"]
    print(
        f"{name:28s} eager {med['eager'] * 1e6:7.2f} us  kiln {med['kiln'] * 1e6:7.2f} us  "
        f"torch.compile {med['torch.compile'] * 1e6:7.2f} us  ratio kiln/torch {ratio:5.2f}  "
        f"(overhead over eager: kiln {over_k * 1e6:6.2f} us, torch {over_t * 1e6:6.2f} us)"
    )
    return ratio


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--calls", type=int, default=100)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    x = torch.randn(8)
    r1 = measure("1 tensor op", one_op, (x,), a.rounds, a.calls)
    xs = [torch.randn(4) for _ in range(10)]
    r2 = measure("10 tensor inputs + module", ten_inputs, (Small(), *xs), a.rounds, a.calls)
    print(
        f"ratios kiln/torch.compile: 1-op {r1:.2f}, 10-inputs+module {r2:.2f} (goal <= 2, ideally <= 1)"
    )
    return r1, r2


if __name__ == "__main__":
    main()
