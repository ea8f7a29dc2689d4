"""torch.vmap inside a compiled function: kiln vs eager vs torch.compile, side by side.

    .venv/bin/python benchmarks/vmap.py [--batch 256] [--width 4096] [--repeat 50]

The function vmaps a per-sample pointwise chain with a softmax over a batch; each compiler gets the
same function (backend kiln / inductor). Printed: median time per call of each, the ratios, and
kiln's graph count and graph-break reasons (a capture that fell back to eager would show there).
"""

import argparse
import statistics
import time

import torch

import kiln


def per_sample(x, w):
    """One sample's work: a pointwise chain and a softmax."""
    return (x.sin() * w + x.cos()).softmax(-1) * x.tanh()


def batched(xs, w):
    """per_sample over the batch, w shared."""
    return torch.vmap(per_sample, in_dims=(0, None))(xs, w)


def median_time(fn, args, repeat):
    """Median seconds per call after two warm-up calls."""
    fn(*args)
    fn(*args)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    xs, w = torch.randn(args.batch, args.width), torch.randn(args.width)
    kiln.reset()
    compiled = kiln.compile(batched, backend="kiln")
    inductor = torch.compile(batched, backend="inductor")
    expected = batched(xs, w)
    torch.testing.assert_close(compiled(xs, w), expected)
    torch.testing.assert_close(inductor(xs, w), expected)
    stats = dict(kiln.counters["stats"])
    breaks = dict(kiln.counters["graph_break"])
    t_eager = median_time(batched, (xs, w), args.repeat)
    t_kiln = median_time(compiled, (xs, w), args.repeat)
    t_torch = median_time(inductor, (xs, w), args.repeat)
    print(
        f"vmap batch {args.batch} x {args.width}: eager {t_eager * 1e3:.3f} ms, "
        f"kiln {t_kiln * 1e3:.3f} ms, torch.compile {t_torch * 1e3:.3f} ms"
    )
    print(
        f"ratios: kiln/eager {t_kiln / t_eager:.2f}, torch.compile/eager {t_torch / t_eager:.2f}, "
        f"kiln/torch.compile {t_kiln / t_torch:.2f}"
    )
    print(f"kiln: graphs {stats.get('unique_graphs')}, graph breaks {breaks or 'none'}")


if __name__ == "__main__":
    main()
