"""Per-call overhead on a cache hit: kiln.compile vs torch.compile with the same trivial backend.

Both compile the same function with a backend that returns `gm.forward`, so the difference is the
frontend's hot path (guard check + transformed code). Timings are interleaved (kiln, torch, kiln,
torch ...) and the median per-call time of many rounds is reported, with the ratio kiln / torch.

    .venv/bin/python benchmarks/overhead.py [--rounds 200] [--calls 200]

`--models mlp,nanogpt,hf_llama,resnet,hf_gpt2` times a cache hit of the suite's models instead
(inference, CPU, one thread): the host cost of a call (the call with its compiled graphs stubbed
out: they return what they computed once) split into the guard function alone (called in a loop
on the same arguments; with its number of conditions; interleaved with the same guard run as its
Python function, Note [Guards: a program evaluated in C]), the frontend's rest (the wrapper and the
transformed code) and the AOT runtime; then the compiled graphs (generated wrapper and kernels),
the whole call and eager; `--show-guard` prints each guard's source (and its program).
"""

import argparse
import statistics
import time

import torch

import kiln


def trivial_backend(gm, example_inputs):
    return gm.forward


def one_op(x):
    return x.sin()


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x)


def ten_inputs(mod, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9):
    return mod(a0) + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9


def _per_call(fn, args, calls):
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter() - t0) / calls


def measure(name, fn, args, rounds, calls):
    """Median per-call seconds of eager, kiln and torch.compile, interleaved in one run."""
    torch._dynamo.reset()
    kiln.reset()
    k = kiln.compile(fn, backend=trivial_backend)
    t = torch.compile(fn, backend=trivial_backend)
    for f in (k, t):  # compile and warm up
        for _ in range(20):
            f(*args)
    times = {"eager": [], "kiln": [], "torch.compile": []}
    for _ in range(rounds):
        times["kiln"].append(_per_call(k, args, calls))
        times["torch.compile"].append(_per_call(t, args, calls))
        times["eager"].append(_per_call(fn, args, calls))
    med = {key: statistics.median(v) for key, v in times.items()}
    assert kiln.counters["stats"]["unique_graphs"] == 1, kiln.counters
    ratio = med["kiln"] / med["torch.compile"]
    over_k = med["kiln"] - med["eager"]
    over_t = med["torch.compile"] - med["eager"]
    print(
        f"{name:28s} eager {med['eager'] * 1e6:7.2f} us  kiln {med['kiln'] * 1e6:7.2f} us  "
        f"torch.compile {med['torch.compile'] * 1e6:7.2f} us  ratio kiln/torch {ratio:5.2f}  "
        f"(overhead over eager: kiln {over_k * 1e6:6.2f} us, torch {over_t * 1e6:6.2f} us)"
    )
    return ratio


# --models: the host cost of a cache hit of the suite's models, split by layer


def _time_loop(fn, args, calls):
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter() - t0) / calls


def _captured_graph_calls(compiled, inputs):
    """[(AOTCompiled, args)] of the compiled graphs one call runs (recorded on one call)."""
    from kiln.autograd.aot import AOTCompiled

    seen = []
    orig = AOTCompiled.__call__

    def record(self, *args):
        seen.append((self, args))
        return orig(self, *args)

    AOTCompiled.__call__ = record
    try:
        compiled(*inputs)
    finally:
        AOTCompiled.__call__ = orig
    return seen


def _plan(aot, args):
    """The plan the AOT runtime runs for these arguments, and the arguments its graph gets."""
    from kiln.autograd.lift_floats import lift

    args = lift(args, aot.lifted) if aot.lifted else list(args)
    return aot.plan_for(args), args


def guard_conditions(guard):
    """The number of conditions in a generated guard function."""
    return guard.source.count("if not (")


def _hit(compiled, inputs):
    """(guard, its arguments) of the entry a call of `compiled` hits."""
    cache = compiled._kiln_cache
    call = compiled.__dict__.get("_kiln_call") if hasattr(compiled, "__dict__") else None
    args = (compiled._orig_mod, *inputs) if getattr(call, "__self__", None) is not None else inputs
    for guard, _ in cache.entries:
        if guard(*args):
            return guard, args
    raise AssertionError("no entry passes its guard")


class _Stubbed:
    """Within: each plan's compiled graph returns the outputs it computed once (no kernels run),
    so what is left of a call is its host cost on top of the graphs."""

    def __init__(self, plans):
        self.plans = plans

    def __enter__(self):
        self.saved = []
        for plan, args in self.plans:
            outs = plan.forward(*args)
            self.saved.append((plan, plan.forward))
            plan.forward = lambda *a, _outs=outs: _outs
        return self

    def __exit__(self, *exc):
        for plan, forward in self.saved:
            plan.forward = forward


def measure_model(name, rounds, calls, show_guard=False, kernel_rounds=3):
    """Per-call µs of a cache hit of model `name` (inference, CPU): the whole call, its host cost
    (the call with the compiled graphs stubbed out) split into the guard function alone, the rest
    of the frontend (wrapper, transformed code) and the AOT runtime; the graphs (generated wrapper
    and kernels) and eager, timed in the first `kernel_rounds` rounds only (they dominate)."""
    from kiln_bench.models import REGISTRY

    kiln.reset()
    model, inputs, _ = REGISTRY[name].build("cpu")
    model.eval()
    compiled = kiln.compile(model, backend="kiln")
    with torch.no_grad():
        for _ in range(3):
            compiled(*inputs)
        guard, gargs = _hit(compiled, inputs)
        graphs = _captured_graph_calls(compiled, inputs)
        plans = [_plan(aot, args) for aot, args in graphs]
        python_guard = getattr(guard, "python", guard)  # (the same guard as a Python function)
        keys = ("call", "eager", "graph", "host", "guard", "guard_py", "aot")
        t = {k: [] for k in keys}
        for r in range(rounds):
            if r < kernel_rounds:
                t["call"].append(_time_loop(compiled, inputs, calls))
                t["eager"].append(_time_loop(model, inputs, calls))
                t["graph"].append(sum(_time_loop(p.forward, a, calls) for p, a in plans))
            with _Stubbed(plans):
                t["host"].append(_time_loop(compiled, inputs, calls))
                t["guard"].append(_time_loop(guard, gargs, calls))
                t["guard_py"].append(_time_loop(python_guard, gargs, calls))
                t["aot"].append(sum(_time_loop(aot, args, calls) for aot, args in graphs))
    us = {k: statistics.median(v) * 1e6 for k, v in t.items()}
    print(
        f"{name:9s} conditions {guard_conditions(guard):4d}  host {us['host']:6.1f} us = guard "
        f"{us['guard']:6.1f} ({'C program' if guard is not python_guard else 'Python'}; as Python "
        f"{us['guard_py']:6.1f}) + frontend rest {us['host'] - us['guard'] - us['aot']:5.1f} + aot "
        f"runtime {us['aot']:5.1f}  |  graphs {us['graph']:8.1f} ({len(graphs)})  call "
        f"{us['call']:8.1f}  eager {us['eager']:8.1f} us",
        flush=True,
    )
    if show_guard:
        print(guard.source)
        if guard is not python_guard:
            print(guard.program_text)
    return us


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--calls", type=int, default=100)
    p.add_argument("--models", default="", help="comma-separated kiln_bench models (inference)")
    p.add_argument("--show-guard", action="store_true", help="print each model's guard source")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    if a.models:
        for name in a.models.split(","):
            measure_model(name, a.rounds, a.calls, a.show_guard)
        return None
    x = torch.randn(8)
    r1 = measure("1 tensor op", one_op, (x,), a.rounds, a.calls)
    xs = [torch.randn(4) for _ in range(10)]
    r2 = measure("10 tensor inputs + module", ten_inputs, (Small(), *xs), a.rounds, a.calls)
    print(
        f"ratios kiln/torch.compile: 1-op {r1:.2f}, 10-inputs+module {r2:.2f} (goal <= 2, ideally <= 1)"
    )
    return r1, r2


if __name__ == "__main__":
    main()
