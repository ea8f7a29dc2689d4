"""A model whose submodules break: kiln with nested graph breaks vs kiln with breaks placed at the
root's call (config.nested_graph_breaks = False, torch.compile's default placement) vs
torch.compile vs eager, in one run.

The model is a stack of blocks; each block's feed-forward checks its activations on tensor data
(`if h.abs().amax() > limit: h = h.clamp(...)`, a data-dependent branch, a graph break) two
calls deep (with `--no-grad-check`, the check reads `.item()` of the peak inside `with
torch.no_grad():`, a break inside a callee's with block). Reported per variant: graphs compiled, compile (first call) seconds, and the median
seconds of a training step (forward + backward) and of an inference call, interleaved across the
variants over many rounds, with ratios to eager.

    .venv/bin/python benchmarks/nested_breaks.py [--blocks 4] [--rounds 30] [--width 256]
        [--batch 8] [--threads 1] [--no-grad-check]
"""

import argparse
import statistics
import time

import torch
import torch._inductor
from torch import nn

import kiln
from kiln.registry import lookup_backend

NO_GRAD_CHECK = False  # (--no-grad-check)


class FeedForward(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def checked(self, h):
        if NO_GRAD_CHECK:
            with torch.no_grad():
                too_big = h.abs().amax().item() > 1e4  # (the break: inside the with block)
        else:
            too_big = h.abs().amax() > 1e4  # (the break: a branch on tensor data)
        if too_big:  # (never true: the break is what is measured)
            h = h.clamp(-1e4, 1e4)
        return h

    def forward(self, x):
        return self.down(self.checked(torch.nn.functional.gelu(self.up(x))))


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.norm2 = nn.LayerNorm(width)
        self.mix = nn.Linear(width, width)
        self.ff = FeedForward(width)

    def forward(self, x):
        x = x + self.mix(self.norm1(x)).tanh()
        return x + self.ff(self.norm2(x))


class Model(nn.Module):
    def __init__(self, width, blocks):
        super().__init__()
        self.embed = nn.Linear(width, width)
        self.blocks = nn.ModuleList([Block(width) for _ in range(blocks)])
        self.head = nn.Linear(width, 1)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x).mean()


class Counting:
    def __init__(self, backend):
        self.backend, self.graphs = backend, 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return self.backend(gm, example_inputs)


def step(fn, model, x):
    model.zero_grad(set_to_none=True)
    fn(x).backward()


def measure(variants, model, x, rounds):
    """First-call seconds and median train/inference seconds of each variant, interleaved."""
    expected = model(x)
    first, train, infer = {}, {n: [] for n in variants}, {n: [] for n in variants}
    for name, (fn, _) in variants.items():
        t0 = time.perf_counter()
        torch.testing.assert_close(fn(x), expected, rtol=1e-4, atol=1e-4)
        step(fn, model, x)
        first[name] = time.perf_counter() - t0
    for _ in range(rounds):
        for name, (fn, _) in variants.items():
            t0 = time.perf_counter()
            step(fn, model, x)
            train[name].append(time.perf_counter() - t0)
            with torch.no_grad():
                t0 = time.perf_counter()
                fn(x)
                infer[name].append(time.perf_counter() - t0)
    return {
        n: (first[n], statistics.median(train[n]), statistics.median(infer[n])) for n in variants
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-grad-check", action="store_true")
    args = parser.parse_args()
    global NO_GRAD_CHECK
    NO_GRAD_CHECK = args.no_grad_check
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = Model(args.width, args.blocks)
    x = torch.randn(args.batch, 64, args.width)
    rows = []
    # kiln's entries are per code object: each placement compiles afresh (kiln.reset) and is
    # timed next to eager (and torch.compile) in its own interleaved loop
    for nested in (True, False):
        kiln.reset()
        kiln.config.nested_graph_breaks = nested
        counter = Counting(lookup_backend("kiln"))
        variants = {
            "eager": (model, None),
            f"kiln {'nested' if nested else 'at root'}": (
                kiln.compile(model, backend=counter),
                counter,
            ),
        }
        if nested:
            torch_count = Counting(torch._inductor.compile)
            variants["torch.compile"] = (torch.compile(model, backend=torch_count), torch_count)
        times = measure(variants, model, x, args.rounds)
        eager = times.pop("eager")
        for name, t in times.items():
            graphs = variants[name][1].graphs
            rows.append((name, graphs, t[0], t[1], eager[1] / t[1], t[2], eager[2] / t[2]))
    kiln.config.nested_graph_breaks = True
    print(
        f"{args.blocks} blocks, width {args.width}, batch {args.batch}, {args.threads} thread(s), "
        f"{args.rounds} rounds; x eager: measured in the same interleaved loop as the variant"
    )
    print(
        f"{'variant':14} {'graphs':>6} {'first s':>8} {'train ms':>9} {'x eager':>8} "
        f"{'infer ms':>9} {'x eager':>8}"
    )
    for name, graphs, first, tr, tr_x, inf, inf_x in rows:
        print(
            f"{name:14} {graphs:>6} {first:8.2f} {tr * 1e3:9.2f} {tr_x:8.2f} "
            f"{inf * 1e3:9.2f} {inf_x:8.2f}"
        )


if __name__ == "__main__":
    main()
