"""torch.vmap inside a compiled function: kiln vs eager vs torch.compile, side by side.

    .venv/bin/python benchmarks/vmap.py [--case pointwise|per_sample_grads] [--batch 256]
        [--width 4096] [--repeat 50]

`pointwise` vmaps a per-sample pointwise chain with a softmax over a batch; `per_sample_grads`
computes each sample's gradients of an MLP's loss, `vmap(grad(loss))` over
`torch.func.functional_call` (width = the hidden size). Each compiler gets the same function
(backend kiln / inductor). Printed: median time per call of each, the ratios, and
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


MLP = None


def sample_loss(params, x, y):
    """One sample's loss of MLP with `params` (torch.func.functional_call)."""
    out = torch.func.functional_call(MLP, params, (x.unsqueeze(0),))
    return torch.nn.functional.cross_entropy(out, y.unsqueeze(0))


def per_sample_grads(params, xs, ys):
    """Every sample's gradients: vmap(grad(loss))."""
    return torch.vmap(torch.func.grad(sample_loss), in_dims=(None, 0, 0))(params, xs, ys)


def _inputs(args):
    """(function, its arguments) for the case asked."""
    global MLP
    if args.case == "pointwise":
        return batched, (torch.randn(args.batch, args.width), torch.randn(args.width))
    MLP = torch.nn.Sequential(
        torch.nn.Linear(64, args.width), torch.nn.ReLU(), torch.nn.Linear(args.width, 10)
    )
    params = {k: v.detach() for k, v in MLP.named_parameters()}
    return per_sample_grads, (
        params,
        torch.randn(args.batch, 64),
        torch.randint(0, 10, (args.batch,)),
    )


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
    parser.add_argument("--case", choices=("pointwise", "per_sample_grads"), default="pointwise")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    fn, inputs = _inputs(args)
    kiln.reset()
    compiled = kiln.compile(fn, backend="kiln")
    inductor = torch.compile(fn, backend="inductor")
    expected = fn(*inputs)
    torch.testing.assert_close(compiled(*inputs), expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(inductor(*inputs), expected, rtol=1e-4, atol=1e-5)
    stats = dict(kiln.counters["stats"])
    breaks = dict(kiln.counters["graph_break"])
    t_eager = median_time(fn, inputs, args.repeat)
    t_kiln = median_time(compiled, inputs, args.repeat)
    t_torch = median_time(inductor, inputs, args.repeat)
    print(
        f"{args.case} batch {args.batch} x {args.width}: eager {t_eager * 1e3:.3f} ms, "
        f"kiln {t_kiln * 1e3:.3f} ms, torch.compile {t_torch * 1e3:.3f} ms"
    )
    print(
        f"ratios: kiln/eager {t_kiln / t_eager:.2f}, torch.compile/eager {t_torch / t_eager:.2f}, "
        f"kiln/torch.compile {t_kiln / t_torch:.2f}"
    )
    print(f"kiln: graphs {stats.get('unique_graphs')}, graph breaks {breaks or 'none'}")


if __name__ == "__main__":
    main()
