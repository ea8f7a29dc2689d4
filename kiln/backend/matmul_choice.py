"""One matmul timed two ways, as its ATen call and as a kiln lowering, the faster kept (the
max-autotune choices of cpu_tune.py and codegen/triton_matmul.py share this)."""

import contextlib

import torch

from kiln import logs, modes
from kiln.autograd.aten_tracer import trace_aten
from kiln.backend.lowering_matmul import as_loops


def choose(key, memory, disk, target, args, kwargs, compile_graph, alternative, time_both, **how):
    """ "aten" or `alternative` for one matmul (`target` on example `args`): from memory, from
    disk, else by compiling it as a one-op graph both ways (the alternative with the matmul
    lowered as loop IR: `as_loops`) on random inputs of its layout, checking that both agree
    within `how["tol"]`, and timing them with `time_both(aten, alt) -> (aten s, alt s)`; the
    alternative is kept when it takes at most `how["margin"]` of the ATen call's time.
    `how["scope"]`: a context the compiles run under."""
    if key in memory:
        return memory[key]
    hit = disk.get(key)
    if hit is not None:
        memory[key] = hit
        logs.counters["backend"]["autotune_disk_hits"] += 1
        return hit
    inputs = [random_like(a) for a in args]
    tensors = [a for a in inputs if isinstance(a, torch.Tensor)]
    positions = [i for i, a in enumerate(inputs) if isinstance(a, torch.Tensor)]

    def call(*ts):
        full = list(inputs)
        for i, t in zip(positions, ts):
            full[i] = t
        return (target(*full, **kwargs),)

    with as_loops(()):
        gm = trace_aten(call, tensors)
    names = [n.name for n in gm.graph.nodes if n.target is target]
    with modes.applied({"max_autotune": False}), how.get("scope", contextlib.nullcontext)():
        with as_loops(()):
            aten = compile_graph(gm, tensors)
        with as_loops(names):
            alt = compile_graph(gm, tensors)
    tol = how["tol"]
    fell_back = getattr(alt, "kiln_fallback", False) or getattr(aten, "kiln_fallback", False)
    if fell_back or not torch.allclose(alt(*tensors)[0], aten(*tensors)[0], tol, tol):
        aten_time, alt_time = 1.0, float("inf")  # (one that disagrees is never chosen)
    else:
        aten_time, alt_time = time_both(lambda: aten(*tensors), lambda: alt(*tensors))
    choice = alternative if alt_time <= how["margin"] * aten_time else "aten"
    logs.counters["backend"]["autotune_timed"] += 1
    logs.log(
        "output_code",
        "kiln: autotuned %s %s: aten %.1fus, %s %.1fus -> %s",
        target,
        [tuple(a.shape) for a in tensors],
        aten_time * 1e6,
        alternative,
        alt_time * 1e6,
        choice,
    )
    memory[key] = choice
    disk.put(key, choice)
    return choice


def random_like(a):
    """A random tensor with a's sizes, strides, dtype and device (other arguments as they are)."""
    if not isinstance(a, torch.Tensor):
        return a
    t = torch.empty_strided(tuple(a.shape), a.stride(), dtype=a.dtype, device=a.device)
    return t.normal_() if t.numel() else t
