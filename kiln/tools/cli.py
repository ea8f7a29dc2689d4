"""The `kiln` command line: `kiln bench` (the suite against eager and torch.compile), `kiln minify`."""

import argparse
import os
import shutil
import sys
import tempfile
import time

import torch

import kiln.config

BENCH_EPILOG = """\
compilers (--compare, comma-separated; eager is always run as the baseline):
  kiln                 kiln.compile(model, backend=--backend)
  kiln:BACKEND         kiln.compile with that backend (eager, aot_eager, kiln)
  torch.compile        torch.compile with its default backend (inductor): the reference
  torch.compile:BACKEND  torch.compile with another backend (eager, aot_eager)

examples:
  kiln bench --quick                          the demo: a few models, a few minutes
  kiln bench --models mlp,hf_gpt2 --mode training --iters 50
  kiln bench --compare kiln:eager,kiln:aot_eager,kiln --models all
  kiln bench --threads 1 --timer cpu          every model; steady timings on a shared machine
  kiln bench --list
  kiln bench --device cuda --compare kiln,kiln@reduce-overhead,torch.compile,torch.compile@reduce-overhead
                                              GPU: default and reduce-overhead side by side
"""


def _modes(text):
    modes = tuple(m.strip() for m in text.split(",") if m.strip())
    if text == "both":
        modes = ("inference", "training")
    for m in modes:
        if m not in ("inference", "training"):
            raise argparse.ArgumentTypeError(f"mode must be inference, training or both: {m!r}")
    return modes


def bench_parser(sub=None):
    """The argument parser of `kiln bench`."""
    kw = dict(
        description="Compile the model suite, check every compiler against eager PyTorch and "
        "time it: accuracy, speedup, cold/warm compile time, overhead, memory, graphs and breaks.",
        epilog=BENCH_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p = (
        sub.add_parser("bench", help="benchmark kiln against eager and torch.compile", **kw)
        if sub
        else argparse.ArgumentParser(prog="kiln bench", **kw)
    )
    p.add_argument(
        "--models",
        default=None,
        help="comma-separated names or 'all' (see --list); default all, or the quick subset with --quick",
    )
    p.add_argument(
        "--mode",
        type=_modes,
        default=("inference", "training"),
        help="inference, training or both (default both)",
    )
    p.add_argument(
        "--compare",
        default="kiln,torch.compile",
        help="compilers to run next to eager (default kiln,torch.compile)",
    )
    p.add_argument(
        "--backend",
        default="kiln",
        help="backend of the plain 'kiln' compiler: kiln, aot_eager or eager (default kiln)",
    )
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument(
        "--amp",
        choices=["bfloat16", "float16"],
        help="run each step's forward and loss under torch.autocast in this dtype",
    )
    p.add_argument(
        "--dtype", default="float32", choices=["float32", "float64", "bfloat16", "float16"]
    )
    p.add_argument(
        "--iters",
        type=int,
        default=None,
        help="timed iterations per compiler (default 20; 10 with --quick)",
    )
    p.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="untimed iterations first (default 3; 2 with --quick)",
    )
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    p.add_argument(
        "--batch", type=int, default=None, help="batch size for every model (default: per model)"
    )
    p.add_argument(
        "--optimizer", default="sgd", choices=["sgd", "adamw"], help="training step optimizer"
    )
    p.add_argument(
        "--timer",
        default="wall",
        choices=["wall", "cpu"],
        help="step timer: wall clock, or process CPU time (steadier on a busy machine with --threads 1)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="the quick subset with fewer iterations; prints what kiln captures for the first model",
    )
    p.add_argument(
        "--explain", action="store_true", help="print kiln's graphs and guards for the first model"
    )
    p.add_argument(
        "--out", default="results", help="results folder for bench.csv/json/png (default results/)"
    )
    p.add_argument(
        "--keep-cache",
        action="store_true",
        help="use the usual on-disk compile caches; by default a fresh temporary cache makes 'cold' really cold",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--list", action="store_true", help="list the suite's models and exit")
    return p


def list_models(out=None):
    """Print the suite: name, tags, description (and why HF entries are unavailable)."""
    from kiln_bench import models

    out = out or sys.stdout
    ok, why = models.transformers_available()
    for spec in models.REGISTRY.values():
        note = "" if ("hf" not in spec.tags or ok) else f"  [{why}]"
        print(f"{spec.name:10s} {','.join(spec.tags):28s} {spec.about}{note}", file=out)


def run_bench(args):
    """`kiln bench`: run, print the table, write the results folder."""
    if args.list:
        list_models()
        return 0
    saved = (dict(os.environ), kiln.config.cache_dir)
    tmp = None
    if not args.keep_cache:
        tmp = tempfile.mkdtemp(prefix="kiln-bench-cache-")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tmp, "inductor")
        os.environ["KILN_CACHE_DIR"] = kiln.config.cache_dir = os.path.join(tmp, "kiln")
    try:
        return _run_bench(args)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
            for name in ("TORCHINDUCTOR_CACHE_DIR", "KILN_CACHE_DIR"):
                if name in saved[0]:
                    os.environ[name] = saved[0][name]
                else:
                    os.environ.pop(name, None)
            kiln.config.cache_dir = saved[1]


def _run_bench(args):
    from kiln_bench import models, report
    from kiln_bench.runner import Runner, Settings, environment

    quick_names = ",".join(models.QUICK)
    settings = Settings(
        models=args.models or (quick_names if args.quick else "all"),
        modes=args.mode,
        compare=args.compare,
        backend=args.backend,
        device=args.device,
        dtype=args.dtype,
        amp=args.amp,
        iters=args.iters if args.iters is not None else (10 if args.quick else 20),
        warmup=args.warmup if args.warmup is not None else (2 if args.quick else 3),
        threads=args.threads,
        batch=args.batch,
        optimizer=args.optimizer,
        timer=args.timer,
        explain=args.explain or args.quick,
        progress=not args.no_progress,
    )
    if settings.device.startswith("cuda"):
        if not torch.cuda.is_available():
            print("kiln bench: --device cuda but torch sees no CUDA device", file=sys.stderr)
            return 2
    try:
        models.select(settings.models)
        runner = Runner(settings)
    except ValueError as e:
        print(f"kiln bench: {e}", file=sys.stderr)
        return 2
    load_start = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None
    cores = os.cpu_count() or 1
    steady = args.threads == 1 and args.timer == "cpu"
    if load_start is not None and load_start > cores - 0.5 and not steady:
        print(
            f"kiln bench: warning: the machine is busy (load average {load_start} on {cores} "
            "cores); timings will be noisy, multi-threaded ones most (try --threads 1 --timer cpu)",
            file=sys.stderr,
        )
    t0 = time.perf_counter()
    runner.run()
    wall = time.perf_counter() - t0
    env = environment(settings, runner)
    env["wall_s"] = round(wall, 1)
    env["load_avg_start"] = load_start
    print()
    print(report.table(runner.rows, runner.overhead, env))
    paths = report.write_all(runner, env, args.out)
    print(f"\nTotal {wall:.0f} s. Results: " + ", ".join(paths.values()))
    return 0


def main(argv=None):
    """Entry point of the `kiln` console script and `python -m kiln`."""
    parser = argparse.ArgumentParser(prog="kiln", description="kiln: a JIT compiler for PyTorch")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    bench_parser(sub)
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "minify":
        from kiln.tools.minifier import main as minify_main

        return minify_main(argv[1:])
    sub.add_parser("minify", help="shrink a repro.py to the smallest graph that still fails")
    args = parser.parse_args(argv)
    if args.command == "bench":
        return run_bench(args)
    parser.print_help()
    return 0
