"""Export, save and load the suite's models; the loaded program's speed next to kiln.compile.

    python benchmarks/export_load.py [--models mlp,resnet] [--iters 30]

Per model (inference, default batch, 1 thread): export and save time, file size; in a fresh
process with an empty code cache: kiln.load time, the first call of `program.compile("kiln")`
(a plain file, then a package=True file) with its C++ compile count, and the first call of
kiln.compile(model) on the same empty cache; then median step times of eager, kiln.compile and
the loaded program compiled by kiln (one process, interleaved).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

import kiln
from kiln.export import Dim

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FRESH = r"""
import json, sys, time, torch
torch.set_num_threads(1)
t0 = time.perf_counter()
import kiln
from kiln.backend import codecache
t1 = time.perf_counter()
prog = kiln.load(sys.argv[1])
t2 = time.perf_counter()
args, kwargs = prog.example_inputs()
fast = prog.compile("kiln")
with torch.no_grad():
    fast(*args, **kwargs)
t3 = time.perf_counter()
print(json.dumps(dict(import_s=t1 - t0, load_s=t2 - t1, first_call_s=t3 - t2,
                      cpp_compiles=kiln.counters["backend"]["cpp_compiles"])))
"""

COLD_COMPILE = r"""
import json, sys, time, torch
torch.set_num_threads(1)
import kiln
from kiln_bench import models
model, inputs, _ = models.REGISTRY[sys.argv[1]].build()
model.eval()
t0 = time.perf_counter()
with torch.no_grad():
    kiln.compile(model)(*inputs)
print(json.dumps(dict(first_call_s=time.perf_counter() - t0,
                      cpp_compiles=kiln.counters["backend"]["cpp_compiles"])))
"""


def _fresh(code, arg, cache):
    env = dict(os.environ, PYTHONPATH=ROOT, KILN_CACHE_DIR=cache)
    res = subprocess.run(
        [sys.executable, "-c", code, arg], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


def _median_ms(fn, args, iters):
    with torch.no_grad():
        for _ in range(3):
            fn(*args)
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn(*args)
            times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def run(name, iters, folder):
    from kiln_bench import models

    spec = models.REGISTRY[name]
    model, inputs, _ = spec.build()
    model.eval()
    dyn = tuple({0: Dim("batch", max=1024)} for _ in inputs)
    t0 = time.perf_counter()
    with torch.no_grad():
        prog = kiln.export(model, tuple(inputs), dynamic_shapes=dyn)
    t1 = time.perf_counter()
    plain, packed = os.path.join(folder, f"{name}.kiln"), os.path.join(folder, f"{name}.pkg.kiln")
    kiln.save(prog, plain)
    t2 = time.perf_counter()
    kiln.save(prog, packed, package=True)
    row = dict(model=name, export_s=t1 - t0, save_s=t2 - t1, mb=os.path.getsize(plain) / 1e6)
    row["fresh_plain"] = _fresh(FRESH, plain, tempfile.mkdtemp(prefix="kiln-cold-"))
    row["fresh_package"] = _fresh(FRESH, packed, tempfile.mkdtemp(prefix="kiln-cold-"))
    row["fresh_kiln_compile"] = _fresh(COLD_COMPILE, name, tempfile.mkdtemp(prefix="kiln-cold-"))
    loaded = kiln.load(plain).compile("kiln")
    compiled = kiln.compile(model)
    for label, fn in (("eager", model), ("kiln_compile", compiled), ("loaded_kiln", loaded)):
        row[f"{label}_ms"] = _median_ms(fn, inputs, iters)
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="mlp,resnet,nanogpt,attention,pointwise")
    p.add_argument("--iters", type=int, default=30)
    args = p.parse_args()
    torch.set_num_threads(1)
    kiln.export(lambda x: x.sin() + 1, (torch.randn(3),))  # imports out of the first timing
    folder = tempfile.mkdtemp(prefix="kiln-export-bench-")
    print(
        "| model | export s | save s | MB | load s (fresh) | first call: loaded / packaged / "
        "kiln.compile s | C++ compiles: loaded / packaged / kiln.compile | eager ms | "
        "kiln.compile | loaded + kiln |"
    )
    print("| --- | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: |")
    for name in args.models.split(","):
        r = run(name, args.iters, folder)
        fp, fk, fc = r["fresh_plain"], r["fresh_package"], r["fresh_kiln_compile"]
        print(
            f"| {name} | {r['export_s']:.2f} | {r['save_s']:.2f} | {r['mb']:.1f} | "
            f"{fp['load_s']:.2f} | {fp['first_call_s']:.2f} / {fk['first_call_s']:.2f} / "
            f"{fc['first_call_s']:.2f} | {fp['cpp_compiles']} / {fk['cpp_compiles']} / "
            f"{fc['cpp_compiles']} | {r['eager_ms']:.2f} | "
            f"{r['eager_ms'] / r['kiln_compile_ms']:.2f}x | {r['eager_ms'] / r['loaded_kiln_ms']:.2f}x |",
            flush=True,
        )


if __name__ == "__main__":
    main()
