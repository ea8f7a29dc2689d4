"""Varying-shape inference: total time over a sequence of shapes, compilation included.

Each model of the suite runs over the same sequence of (batch, sequence length) shapes twice
(a first pass that compiles, a second pass over shapes already seen) under eager, kiln
(`backend="kiln"`, `dynamic=None`: automatic dynamic) and torch.compile (inductor, `dynamic=None`),
each compiler in a fresh process with empty cache directories, so that nobody starts warm.
Reported per model: total seconds for both passes, the ratio torch.compile/kiln of those totals
(above 1.00x: kiln finished first), the number of graphs each compiler compiled, and whether every
output matched eager.

    .venv/bin/python benchmarks/dynamic_shapes.py [--models mlp,nanogpt,attention,hf_gpt2,hf_bert]
        [--json PATH]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

SHAPES = [(1, 7), (4, 16), (8, 33), (16, 64), (3, 50), (32, 20), (64, 9), (2, 61)]

CHILD = r"""
import json, sys, time
import torch
from kiln_bench.models import REGISTRY

name, which = sys.argv[1], sys.argv[2]
shapes = json.loads(sys.argv[3])
torch.set_num_threads(1)
model, _, _ = REGISTRY[name].build()
model.eval()
gen = torch.Generator().manual_seed(0)


def inputs(b, t):
    if name == "mlp":
        return [torch.randn(b, 256, generator=gen)]
    if name == "nanogpt":
        return [torch.randint(0, 512, (b, t), generator=gen)]
    if name == "attention":
        return [torch.randn(b, t, 128, generator=gen)]
    if name == "hf_gpt2":
        return [torch.randint(0, 1000, (b, t), generator=gen)]
    if name == "hf_bert":
        ids = torch.randint(0, 1000, (b, t), generator=gen)
        return [ids, torch.ones(b, t, dtype=torch.long)]
    raise SystemExit(f"no input maker for {name}")


batches = [inputs(b, t) for b, t in shapes] * 2
with torch.no_grad():
    expected = [model(*x) for x in batches]
if which == "kiln":
    import kiln
    fn = kiln.compile(model, backend="kiln")
elif which == "torch.compile":
    fn = torch.compile(model, backend="inductor")
else:
    fn = model
ok = True
t0 = time.perf_counter()
with torch.no_grad():
    outs = [fn(*x) for x in batches]
seconds = time.perf_counter() - t0
for out, ref in zip(outs, expected):
    ok = ok and torch.allclose(out, ref, rtol=1e-3, atol=1e-3)
graphs = None
if which == "kiln":
    graphs = kiln.counters["stats"]["unique_graphs"]
elif which == "torch.compile":
    from torch._dynamo.utils import counters
    graphs = counters["stats"]["unique_graphs"]
print(json.dumps({"seconds": seconds, "ok": bool(ok), "graphs": graphs}))
"""

COMPILERS = ("eager", "kiln", "torch.compile")


def run(name, which, shapes):
    """One model under one compiler in a fresh process; the child's JSON result."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cache = tempfile.mkdtemp(prefix="kiln_dyn_")  # cold: no compiler starts from its disk cache
    env = dict(os.environ, PYTHONPATH=root, KILN_CACHE_DIR=cache, TORCHINDUCTOR_CACHE_DIR=cache)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, name, which, json.dumps(shapes)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="mlp,nanogpt,attention,hf_gpt2,hf_bert")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    print(f"shapes (batch, seq) x2: {SHAPES}")
    header = "| model | eager s | kiln s | torch.compile s | torch.compile / kiln |"
    print(header + " kiln graphs | torch.compile graphs | outputs |")
    print("| --- " * 8 + "|")
    results = {}
    for name in args.models.split(","):
        r = {which: run(name, which, SHAPES) for which in COMPILERS}
        results[name] = r
        if any("error" in x for x in r.values()):
            errors = "; ".join(f"{w}: {x['error'][:60]}" for w, x in r.items() if "error" in x)
            print(f"| {name} | {errors} |")
            continue
        e, k, tc = r["eager"], r["kiln"], r["torch.compile"]
        ok = "equal" if k["ok"] and tc["ok"] else f"kiln {k['ok']}, torch.compile {tc['ok']}"
        print(
            f"| {name} | {e['seconds']:.2f} | {k['seconds']:.2f} | {tc['seconds']:.2f} |"
            f" {tc['seconds'] / k['seconds']:.2f}x | {k['graphs']} | {tc['graphs']} | {ok} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"shapes": SHAPES, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
