"""Kernel benchmarks: kiln vs eager vs torch.compile (inductor), side by side in one run.

    (a) a chain of pointwise ops over 4096x4096 float32, also as achieved GB/s against a plain copy
        of the same bytes;
    (b) softmax, layer norm and a GELU MLP;
    (c) a chain of transcendental ops (sin, cos, tanh, log1p, sigmoid): compute-bound, vectorized.

Timings are interleaved (eager, kiln, inductor, eager, ...) and the median of the rounds is
reported with the ratios eager/kiln and inductor/kiln (> 1 means kiln is faster). Inference only
(torch.no_grad), the whole stack for both compilers (kiln.compile(backend="kiln") vs
torch.compile(backend="inductor")).

    .venv/bin/python benchmarks/kernels.py [--rounds 15] [--only chain,softmax]
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import kiln


def chain(x, y):
    a = x * 1.5 + y
    b = torch.relu(a) - x * y
    c = torch.abs(b) * 0.5 + torch.maximum(a, y)
    return c * c - a


def transcendental(x):
    return torch.sin(x) * torch.tanh(x) + torch.log1p(x.abs()) + torch.cos(x) * torch.sigmoid(x)


def transpose_add(x, y):
    return x.t() * 2 + y


def softmax(x):
    return torch.softmax(x, -1)


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def gelu_mlp(x, w1, b1, w2, b2):
    return F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)


def workloads():
    n = 4096
    x, y = torch.randn(n, n), torch.randn(n, n)
    d = 1024
    return {
        # name: (fn, args, bytes moved by an ideal fused kernel)
        "chain": (chain, (x, y), 3 * x.numel() * 4),
        # sin/cos/tanh/log1p/sigmoid: Sleef vector calls in kiln (codegen/vecmath.py)
        "transcendental": (transcendental, (torch.randn(2048, 1024),), 2 * 2048 * 1024 * 4),
        # y is read across its rows (staged through tiles in kiln: codegen/cpp_transpose.py)
        "transpose_add": (
            transpose_add,
            (torch.randn(2048, 2048), torch.randn(2048, 2048)),
            3 * 2048 * 2048 * 4,
        ),
        "softmax": (softmax, (torch.randn(8192, 1024),), 2 * 8192 * 1024 * 4),
        "layer_norm": (
            layer_norm,
            (torch.randn(8192, d), torch.randn(d), torch.randn(d)),
            2 * 8192 * d * 4,
        ),
        "gelu_mlp": (
            gelu_mlp,
            (
                torch.randn(512, d),
                torch.randn(4 * d, d) / 32,
                torch.randn(4 * d),
                torch.randn(d, 4 * d) / 64,
                torch.randn(d),
            ),
            None,
        ),
    }


def _time(fn, args, calls):
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter() - t0) / calls


def bench(name, fn, args, nbytes, rounds, calls, use_inductor):
    runners = {"eager": fn, "kiln": kiln.compile(fn, backend="kiln")}
    if use_inductor:
        runners["inductor"] = torch.compile(fn, backend="inductor")
    compile_s = {}
    with torch.no_grad():
        ref = fn(*args)
        for k, r in runners.items():
            t0 = time.perf_counter()
            out = r(*args)
            compile_s[k] = time.perf_counter() - t0
            torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
        times = {k: [] for k in runners}
        for _ in range(rounds):
            for k, r in runners.items():
                times[k].append(_time(r, args, calls))
    med = {k: statistics.median(v) for k, v in times.items()}
    row = {"name": name, **{f"{k}_ms": v * 1e3 for k, v in med.items()}}
    row["eager/kiln"] = med["eager"] / med["kiln"]
    if "inductor" in med:
        row["inductor/kiln"] = med["inductor"] / med["kiln"]
    if nbytes:
        row.update({f"{k}_GB/s": nbytes / v / 1e9 for k, v in med.items()})
    row["first_call_s"] = compile_s
    return row


def copy_bandwidth(rounds, calls):
    """GB/s of a plain copy into a preallocated tensor and into a fresh one (x.clone())."""
    x = torch.randn(4096, 4096)
    out = torch.empty_like(x)
    ts = [_time(lambda: out.copy_(x), (), calls) for _ in range(rounds)]
    tc = [_time(lambda: x.clone(), (), calls) for _ in range(rounds)]
    nbytes = 2 * x.numel() * 4
    return nbytes / statistics.median(ts) / 1e9, nbytes / statistics.median(tc) / 1e9


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--only", default="")
    p.add_argument("--no-inductor", action="store_true")
    a = p.parse_args()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    copy_gbs, clone_gbs = copy_bandwidth(a.rounds, a.calls)
    print(
        f"plain copy of 4096x4096 float32: {copy_gbs:.1f} GB/s into a preallocated tensor, "
        f"{clone_gbs:.1f} GB/s into a fresh one (clone; kernels that allocate pay page faults)"
    )
    for name, (fn, args, nbytes) in workloads().items():
        if a.only and name not in a.only.split(","):
            continue
        row = bench(name, fn, args, nbytes, a.rounds, a.calls, not a.no_inductor)
        parts = [
            f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
            for k, v in row.items()
            if k != "first_call_s"
        ]
        if nbytes:
            parts.append(f"kiln/copy_GB/s={row['kiln_GB/s'] / copy_gbs:.2f}")
            parts.append(f"kiln/clone_GB/s={row['kiln_GB/s'] / clone_gbs:.2f}")
        parts.append(
            "first_call_s=" + ",".join(f"{k}:{v:.2f}" for k, v in row["first_call_s"].items())
        )
        print("  ".join(parts), flush=True)


if __name__ == "__main__":
    main()
