"""Why a compiled model is slower or faster than another on a GPU: per inference call, the wall
time, the time to issue the call (no sync), the number of GPU kernels and their summed GPU time,
for eager, kiln and torch.compile side by side in one process; then the slowest kernels of each and
the Python functions the kiln call spends most time in (cProfile).

    python benchmarks/gpu_profile.py [--models mlp,resnet] [--calls 200] [--dump DIR]

`--dump DIR` keeps kiln's debug dir and torch.compile's trace for each model below DIR.
`--variants` adds kiln rows with settings changed: Triton's own launcher instead of kiln's
relaunch (Note [Triton: launches on CUDA]), matmuls as functional calls (extern_out=False), and
conv_channels_last=False on conv models.
`--externs` times the host cost of the ATen calls a linear layer can become (nanogpt's sizes).
`--training` profiles a forward and backward step (gradients reset, no optimizer) instead of an
inference call; `--dtype bfloat16` builds the models in that dtype; `--ro` adds kiln's and
torch.compile's mode="reduce-overhead" rows (and a cProfile of kiln's).
"""

import argparse
import contextlib
import cProfile
import os
import pstats
import statistics
import time

import torch

import kiln
from kiln import config
from kiln_bench.models import REGISTRY


@contextlib.contextmanager
def _settings(values):
    old = {k: getattr(config, k) for k in values}
    for k, v in values.items():
        setattr(config, k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(config, k, v)


def timed(fn, inputs, calls, sync):
    """(wall, issue) µs per call: the median of 5 rounds; issue = until the last call returned."""
    walls, issues = [], []
    for _ in range(5):
        sync()
        t = time.perf_counter()
        for _ in range(calls):
            fn(*inputs)
        issued = time.perf_counter()
        sync()
        done = time.perf_counter()
        walls.append((done - t) / calls * 1e6)
        issues.append((issued - t) / calls * 1e6)
    return statistics.median(walls), statistics.median(issues)


def _dev_time(e):
    for name in ("self_device_time_total", "self_cuda_time_total", "device_time_total"):
        v = getattr(e, name, None)
        if v is not None:
            return v
    return 0.0


def kernels(fn, inputs, calls, sync):
    """(kernels per call, GPU µs per call, {kernel name: µs per call}) from torch.profiler."""
    acts = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    sync()
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(calls):
            fn(*inputs)
        sync()
    count, total, per = 0, 0.0, {}
    for e in prof.events():
        if getattr(e, "device_type", None) != torch.autograd.DeviceType.CUDA:
            continue
        t = _dev_time(e)
        count += 1
        total += t
        per[e.name] = per.get(e.name, 0.0) + t / calls
    return count / calls, total / calls, per


def _training_step(fn, model, loss_fn):
    """A forward and backward step of `fn` on `model`'s parameters (gradients reset first)."""
    params = [p for p in model.parameters() if p.requires_grad]

    def step(*inputs):
        for p in params:
            p.grad = None
        loss_fn(fn(*inputs)).backward()

    return step


def externs(device, sync, dtype=torch.float32, calls=2000):
    """Per-call µs of the forms a linear layer's extern call can take (issue time, no sync)."""
    aten = torch.ops.aten
    x, w, b = (torch.randn(s, device=device, dtype=dtype) for s in ((256, 128), (384, 128), (384,)))
    out = torch.empty(256, 384, device=device, dtype=dtype)
    wt = w.t()
    forms = {
        "aten.linear.out(x, w, b)": lambda: aten.linear.out(x, w, b, out=out),
        "aten.addmm.out(b, x, w.t())": lambda: aten.addmm.out(b, x, wt, out=out),
        "torch.addmm(b, x, w.t(), out=)": lambda: torch.addmm(b, x, wt, out=out),
        "aten.mm.out(x, w.t())": lambda: aten.mm.out(x, wt, out=out),
        "torch.mm(x, w.t(), out=)": lambda: torch.mm(x, wt, out=out),
        "torch._C._nn.linear(x, w, b, out=)": lambda: torch._C._nn.linear(x, w, b, out=out),
        "F.linear(x, w, b)": lambda: torch.nn.functional.linear(x, w, b),
        "torch.addmm(b, x, w.t())": lambda: torch.addmm(b, x, wt),
        "torch.mm(x, w.t())": lambda: torch.mm(x, wt),
        "aten.mm.default._op(x, w.t())": lambda: aten.mm.default._op(x, wt),
        "aten.mm.out._op(x, w.t(), out=)": lambda: aten.mm.out._op(x, wt, out=out),
        "w.t()": lambda: w.t(),
        "out.view(256, 384)": lambda: out.view(256, 384),
        "torch.empty_strided": lambda: torch.empty_strided(
            (256, 384), (384, 1), dtype=dtype, device=device
        ),
    }
    for label, fn in forms.items():
        for _ in range(50):
            fn()
        sync()
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        issued = time.perf_counter()
        sync()
        print(f"extern {label:34} issue {(issued - t) / calls * 1e6:7.2f} us", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="mlp,resnet,nanogpt,hf_llama")
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--device", default="cuda")
    p.add_argument("--dump", default="")
    p.add_argument("--variants", action="store_true")
    p.add_argument("--externs", action="store_true")
    p.add_argument("--training", action="store_true")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--ro", action="store_true")
    args = p.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    cuda = args.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if args.externs:
        externs(args.device, sync, dtype)
    for name in args.models.split(","):
        model, inputs, loss_fn = REGISTRY[name].build(args.device, dtype)
        if args.training:
            model.train()
        else:
            model.eval()
        kiln.reset()
        torch._dynamo.reset()
        if args.dump:
            config.debug_dir = os.path.join(args.dump, name, "kiln")
            torch._dynamo.config.debug_dir_root = os.path.join(args.dump, name, "tc")
            torch._inductor.config.trace.enabled = True
        rows = [("eager", model, {})]
        rows.append(("kiln", kiln.compile(model, backend="kiln"), {}))
        if args.variants:
            variants = [{"triton_fast_launch": False}, {"extern_out": False}]
            if name == "resnet":
                variants.append({"conv_channels_last": False})
            for settings in variants:
                label = "kiln " + " ".join(f"{k}={v}" for k, v in settings.items())
                rows.append((label, kiln.compile(model, backend="kiln"), settings))
        rows.append(("torch.compile", torch.compile(model), {}))
        if args.ro:
            rows.append(("kiln@RO", kiln.compile(model, mode="reduce-overhead"), {}))
            rows.append(("torch.compile@RO", torch.compile(model, mode="reduce-overhead"), {}))
        if args.training:
            rows = [(label, _training_step(fn, model, loss_fn), s) for label, fn, s in rows]
        print(
            f"== {name} ({'training' if args.training else 'inference'}, {args.dtype})", flush=True
        )
        tops = {}
        grad_mode = contextlib.nullcontext() if args.training else torch.no_grad()
        with grad_mode:
            for label, fn, settings in rows:
                if settings:
                    kiln.reset()
                with _settings(settings):
                    t0 = time.perf_counter()
                    fn(*inputs)
                    sync()
                    first = time.perf_counter() - t0
                    for _ in range(3):
                        fn(*inputs)
                    wall, issue = timed(fn, inputs, args.calls, sync)
                    n, gpu, per = kernels(fn, inputs, 20, sync)
                tops[label] = per
                print(
                    f"{name:10} {label:32} wall {wall:8.1f} us  issue {issue:8.1f} us  "
                    f"kernels {n:6.1f}  gpu {gpu:8.1f} us  first call {first:6.1f} s",
                    flush=True,
                )
            for label, per in tops.items():
                print(f"-- {name} {label}: slowest kernels (us per call)")
                for k, v in sorted(per.items(), key=lambda kv: -kv[1])[:8]:
                    print(f"   {v:8.1f}  {k[:110]}")
            profiled = [rows[1]] + [r for r in rows if r[0] == "kiln@RO"]
            for label, compiled, _ in profiled:
                for _ in range(3):
                    compiled(*inputs)  # recompiled if a variant reset kiln
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(args.calls):
                    compiled(*inputs)
                prof.disable()
                sync()
                print(f"-- {name} {label}: cProfile over {args.calls} calls")
                pstats.Stats(prof).sort_stats("tottime").print_stats(14)
    config.debug_dir = ""


if __name__ == "__main__":
    main()
