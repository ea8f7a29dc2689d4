"""Bytes saved for backward: eager autograd vs kiln (min-cut, default) vs torch.compile, one run.

    .venv/bin/python benchmarks/memory.py [--json out.json]

Every variant is measured the same way: `torch.autograd.graph.saved_tensors_hooks` sees each
tensor that autograd keeps for the backward during one forward (eager ops, kiln's and torch's
CompiledFunction alike); we add up the bytes of distinct tensors. "activations" leaves out the
parameters and the input, which are alive anyway.
"""

import argparse
import copy
import json
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))

from kiln.autograd.aot import nop  # noqa: E402
from kiln.autograd.aot_module import aot_module  # noqa: E402
from kiln.autograd.partition import (  # noqa: E402
    default_partition,
    min_cut_rematerialization_partition,
)


class TransformerBlock(nn.Module):
    """Pre-norm GPT block: causal SDPA attention and a GELU MLP."""

    def __init__(self, d=256, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def mlp(d=512, depth=4):
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(d, d), nn.LayerNorm(d), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(d, 10))


def measure(model, x):
    """(all bytes, activation bytes) saved for backward by one forward of model(x)."""
    fixed = {p.data_ptr() for p in model.parameters()} | {x.data_ptr()}
    seen = {}

    def pack(t):
        key = (t.data_ptr(), t.numel() * t.element_size())
        seen[key] = t.data_ptr() in fixed
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
    out.float().sum().backward()
    total = sum(n for (_, n) in seen)
    acts = sum(n for (_, n), is_fixed in seen.items() if not is_fixed)
    return total, acts


def variants(model, inductor=False):
    yield "eager", model
    yield (
        "kiln min-cut",
        aot_module(copy.deepcopy(model), nop, partition_fn=min_cut_rematerialization_partition),
    )
    yield "kiln default", aot_module(copy.deepcopy(model), nop, partition_fn=default_partition)
    try:
        import kiln

        yield "kiln.compile aot_eager", kiln.compile(copy.deepcopy(model), backend="aot_eager")
    except Exception as e:  # the frontend may not handle this model yet
        print(f"  (kiln.compile skipped: {e})")
    yield "torch.compile aot_eager", torch.compile(copy.deepcopy(model), backend="aot_eager")
    from functorch.compile import make_boxed_func
    from functorch.compile import min_cut_rematerialization_partition as torch_min_cut
    from torch._dynamo.backends.common import aot_autograd

    def boxed_nop(gm, example_inputs):
        return make_boxed_func(gm.forward)

    torch_mc = aot_autograd(fw_compiler=boxed_nop, partition_fn=torch_min_cut)
    yield "torch.compile min-cut", torch.compile(copy.deepcopy(model), backend=torch_mc)
    if inductor:
        yield "torch.compile inductor", torch.compile(copy.deepcopy(model))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the numbers here")
    ap.add_argument("--inductor", action="store_true", help="also torch.compile's default backend")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    cases = {
        "transformer block (B=4, T=128, d=256)": (
            TransformerBlock(),
            torch.randn(4, 128, 256, requires_grad=True),
        ),
        "MLP (B=64, d=512, 4 layers)": (mlp(), torch.randn(64, 512, requires_grad=True)),
    }
    results = {}
    for name, (model, x) in cases.items():
        print(f"\n{name}")
        print(f"  {'variant':26s} {'saved bytes':>14s} {'activations':>14s} {'vs eager':>9s}")
        rows = results[name] = {}
        base = None
        for vname, m in variants(model, args.inductor):
            try:
                measure(m, x)  # compile / warm up
                total, acts = measure(m, x)
            except Exception as e:
                print(f"  {vname:26s} failed: {type(e).__name__}: {e}")
                continue
            base = base or acts
            rows[vname] = {"saved_bytes": total, "activation_bytes": acts}
            print(f"  {vname:26s} {total:14,d} {acts:14,d} {acts / base:9.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
