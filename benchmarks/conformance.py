"""Op conformance sweep: PyTorch's own OpInfo database (`op_db`) run through kiln vs eager.

Every OpInfo op (about 700) is called on its first sample inputs, eagerly and through
`kiln.compile(..., backend=B)`; the result passes when outputs (and, with `--grad`, the gradients of
every floating input) match eager under the op's tolerance, or when both raise the same exception
type. Random ops draw eager's numbers (`config.fallback_random`). The corpus is not ours (it ships
with torch, `torch.testing._internal`, and needs the `expecttest` package: `pip install -e
.[bench]`), so it measures what a torch user would meet.

    .venv/bin/python benchmarks/conformance.py --backend eager|aot_eager|kiln [--grad]
        [--dtype float32] [--samples 1] [--ops abs,add] [--device cuda] [--jobs 8] [--json PATH]

Ops run in worker processes (a crash or a hang costs one op, not the sweep), `--jobs` of them
side by side over disjoint slices of the ops. Printed: the pass
rate, then every failure with its first line.
"""

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

WORKER = r"""
import json, sys, warnings
import torch
warnings.filterwarnings("ignore")
import kiln
from torch.testing._internal.common_methods_invocations import op_db

backend, dtype, samples, grad = sys.argv[1], getattr(torch, sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
names, device = set(sys.argv[5].split(",")), sys.argv[6]
torch.set_num_threads(1)
# random ops compared number for number need eager's draws (Triton kernels draw their own:
# Note [Random: numbers from a seed per graph], tested in tests/backend/test_lowering_random.py)
kiln.config.fallback_random = True


def clone(x):
    if isinstance(x, torch.Tensor):
        c = x.detach().clone()
        return c.requires_grad_(x.requires_grad)
    if isinstance(x, (list, tuple)):
        return type(x)(clone(i) for i in x) if not hasattr(x, "_fields") else type(x)(*map(clone, x))
    if isinstance(x, dict):
        return {k: clone(v) for k, v in x.items()}
    return x


def tensors(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for i in x for t in tensors(i)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in tensors(v)]
    return []


def run(fn, sample):
    args = clone([sample.input, *sample.args])
    kwargs = clone(sample.kwargs)
    torch.manual_seed(0)
    try:
        out = fn(*args, **kwargs)
        grads = None
        if grad:
            leaves = [t for t in tensors(args) + tensors(kwargs) if t.requires_grad]
            outs = [t for t in tensors(out) if t.requires_grad and t.is_floating_point()]
            if leaves and outs:
                total = sum(o.float().sum() for o in outs)
                grads = torch.autograd.grad(total, leaves, allow_unused=True)
        return ("ok", out, grads, args)
    except Exception as e:
        return ("raise", type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "", None)


UNINITIALIZED = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted"}


def compare(a, b, op):
    ta, tb = tensors(a), tensors(b)
    if len(ta) != len(tb):
        return f"{len(ta)} tensors vs {len(tb)}"
    if op.name in UNINITIALIZED:  # no values to compare: metadata only
        ok = all(x.shape == y.shape and x.dtype == y.dtype for x, y in zip(ta, tb))
        return None if ok else "shape/dtype differ"
    for x, y in zip(ta, tb):
        if x is None or y is None:
            if (x is None) != (y is None):
                return "None vs tensor"
            continue
        try:
            torch.testing.assert_close(y, x, equal_nan=True, rtol=1.3e-5 if dtype == torch.float32 else None, atol=1e-5 if dtype == torch.float32 else None, check_stride=False)
        except AssertionError as e:
            return str(e).strip().splitlines()[0][:200]
    return None


def upcast(x):
    if isinstance(x, torch.Tensor) and x.dtype in (torch.bfloat16, torch.float16):
        return x.detach().double()
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return type(x)(upcast(i) for i in x)
    if isinstance(x, dict):
        return {k: upcast(v) for k, v in x.items()}
    return x


def low_precision(op, sample, eager_out, kiln_out):
    # bf16/fp16: pass when kiln is no further from a float64 run than eager is (2x + 1e-5). Both
    # round differently (kiln computes in float32 and rounds once on store, as inductor does), so
    # the oracle is the float64 result with eager's own error as the tolerance. None: within it.
    try:
        r64 = op.op(upcast(sample.input), *upcast(list(sample.args)), **upcast(sample.kwargs))
    except Exception:
        return "no float64 reference"
    for e, k, r in zip(tensors(eager_out), tensors(kiln_out), tensors(r64)):
        if not e.is_floating_point():
            if not torch.equal(e, k):
                return "values differ"
            continue
        err_k = (k.double() - r.double()).abs().nan_to_num(0)
        err_e = (e.double() - r.double()).abs().nan_to_num(0)
        if (err_k > 2 * err_e.max() + 1e-5).any() or not torch.equal(k.isnan(), e.isnan()):
            return f"kiln error {err_k.max().item():.3g} vs eager's {err_e.max().item():.3g}"
    return None


for op in op_db:
    key = f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name
    if key not in names:
        continue
    if dtype not in op.supported_dtypes(device) or (grad and not op.supports_autograd):
        print(json.dumps({"op": key, "status": "skip"}), flush=True)
        continue
    status, why = "pass", ""
    try:
        sample_list = list(op.sample_inputs(device, dtype, requires_grad=grad))[:samples]
    except Exception as e:
        print(json.dumps({"op": key, "status": "skip", "why": f"samples: {e}"[:200]}), flush=True)
        continue
    for sample in sample_list:
        kiln.reset()
        def eager_fn(*a, **k):
            return op.op(*a, **k)
        def user_fn(*a, **k):
            return op.op(*a, **k)
        ref = run(eager_fn, sample)
        got = run(kiln.compile(user_fn, backend=backend), sample)
        if ref[0] == "raise":
            if got[0] != "raise" or got[1] != ref[1]:
                status, why = "fail", f"eager raised {ref[1]}, kiln gave {got[0]} {got[1] if got[0] == 'raise' else ''}"
        elif got[0] == "raise":
            status, why = "fail", f"kiln raised {got[1]}: {got[2]}"
        else:
            diff = compare(ref[1], got[1], op) or compare(ref[3], got[3], op)
            if diff and dtype in (torch.bfloat16, torch.float16):
                diff = low_precision(op, sample, ref[1], got[1]) and diff
            if diff is None and grad and ref[2] is not None:
                diff = compare(list(ref[2]), list(got[2] or []), op)
                diff = diff and "grad: " + diff
            if diff:
                status, why = "fail", diff
        if status != "pass":
            break
    stats = kiln.counters["stats"]
    how = "fallback" if stats["backend_failures"] else ("graph" if stats["unique_graphs"] else "eager")
    print(json.dumps({"op": key, "status": status, "why": why, "how": how}), flush=True)
"""


def op_names():
    """Every OpInfo key (name.variant) in op_db, in order."""
    code = (
        "from torch.testing._internal.common_methods_invocations import op_db\n"
        "for op in op_db: print(f'{op.name}.{op.variant_test_name}' if op.variant_test_name"
        " else op.name)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.split()


def sweep(names, args, timeout):
    """Run workers until every op has a result; an op that crashes or hangs its worker fails."""
    results = {}
    pending = list(names)
    while pending:
        cmd = [sys.executable, "-c", WORKER, args.backend, args.dtype, str(args.samples)]
        cmd += ["1" if args.grad else "0", ",".join(pending), args.device]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            stdout, crash = out.stdout, out.returncode != 0
            detail = out.stderr.strip().splitlines()[-1:] if crash else []
        except subprocess.TimeoutExpired as e:
            stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            crash, detail = True, ["timeout"]
        for line in stdout.splitlines():
            if line.startswith("{"):
                r = json.loads(line)
                results[r["op"]] = r
        pending = [n for n in pending if n not in results]
        if crash and pending:  # the first op without a result took the worker down
            results[pending[0]] = {"op": pending[0], "status": "fail", "why": f"crash: {detail}"}
            pending = pending[1:]
        elif not crash:
            break
    return results


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="eager")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--samples", type=int, default=1)
    p.add_argument("--grad", action="store_true")
    p.add_argument("--ops", default=None, help="comma-separated OpInfo names (default: all)")
    p.add_argument("--timeout", type=int, default=3600)
    p.add_argument("--json", default=None)
    p.add_argument("--device", default="cpu", help="cpu or cuda: where the samples are made")
    p.add_argument("--jobs", type=int, default=1, help="worker processes side by side")
    args = p.parse_args(argv)
    names = args.ops.split(",") if args.ops else op_names()
    with ThreadPoolExecutor(args.jobs) as pool:  # slices interleaved: slow ops spread out
        parts = pool.map(
            lambda i: sweep(names[i :: args.jobs], args, args.timeout), range(args.jobs)
        )
        results = {k: v for part in parts for k, v in part.items()}
    results = {n: results[n] for n in names if n in results}
    ran = [r for r in results.values() if r["status"] != "skip"]
    passed = [r for r in ran if r["status"] == "pass"]
    what = f"backend={args.backend} device={args.device} dtype={args.dtype} grad={args.grad}"
    what += f" samples={args.samples}"
    print(f"{what}: {len(passed)}/{len(ran)} pass ({100 * len(passed) / max(len(ran), 1):.1f}%),")
    print(f"{len(results) - len(ran)} skipped (dtype or autograd unsupported by the op)")
    hows = {h: sum(1 for r in passed if r.get("how") == h) for h in ("graph", "fallback", "eager")}
    print(
        f"of the passes: {hows['graph']} compiled by the backend, {hows['fallback']} fell back to"
        f" eager after a backend error, {hows['eager']} ran eagerly (no graph: graph breaks)"
    )
    for r in ran:
        if r["status"] != "pass":
            print(f"  FAIL {r['op']}: {r['why']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
