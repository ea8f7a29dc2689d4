"""Cold and warm compile time: kiln vs torch.compile (inductor), each in fresh processes.

Cold: a new process with an empty cache directory compiles a small transformer-style block
(layer norm, attention with softmax, GELU MLP) for inference and for one training step. Warm: a
second new process with the same cache directory does the same (kiln: the graph and kernel caches;
inductor: its FX graph cache). Reported: seconds to the first result, and inductor/kiln ratios.

    .venv/bin/python benchmarks/compile_time.py
"""

import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, os, sys, time
import torch
sys.path.insert(0, sys.argv[3])
from blocks import Block

which, mode = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
m = Block()
x = torch.randn(4, 16, 64)
t0 = time.perf_counter()
if which == "kiln":
    import kiln
    c = kiln.compile(m, backend="kiln")
else:
    c = torch.compile(m, backend="inductor")
if mode == "inference":
    with torch.no_grad():
        out = c(x)
else:
    out = c(x)
    out.sum().backward()
dt = time.perf_counter() - t0
with torch.no_grad():
    ok = torch.allclose(out, m(x), rtol=1e-4, atol=1e-4)
stats = {}
if which == "kiln":
    import kiln
    stats = dict(kiln.logs.counters["backend"])
print(json.dumps({"seconds": dt, "ok": bool(ok), "stats": stats}))
"""


def run(which, mode, env):
    out = subprocess.run(
        [sys.executable, "-c", CHILD, which, mode, os.path.dirname(os.path.abspath(__file__))],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    results = {}
    for mode in ("inference", "training"):
        for which in ("kiln", "inductor"):
            with tempfile.TemporaryDirectory() as d:
                env = dict(
                    os.environ,
                    PYTHONPATH=root,
                    KILN_CACHE_DIR=os.path.join(d, "kiln"),
                    TORCHINDUCTOR_CACHE_DIR=os.path.join(d, "inductor"),
                )
                cold = run(which, mode, env)
                warm = run(which, mode, env)
            results[(mode, which)] = (cold, warm)
            print(
                f"{mode:9s} {which:8s} cold {cold['seconds']:6.2f}s  warm {warm['seconds']:6.2f}s"
                f"  correct={cold['ok'] and warm['ok']}  {cold['stats']} {warm['stats']}",
                flush=True,
            )
    for mode in ("inference", "training"):
        k, i = results[(mode, "kiln")], results[(mode, "inductor")]
        print(
            f"{mode}: cold inductor/kiln = {i[0]['seconds'] / k[0]['seconds']:.2f}x, "
            f"warm inductor/kiln = {i[1]['seconds'] / k[1]['seconds']:.2f}x"
        )


if __name__ == "__main__":
    main()
