"""mode="max-autotune" on CPU: each matmul timed as an ATen call and as loop IR, the faster kept.

Note [CPU: autotuning matmuls]
Under max-autotune, before a CPU graph is lowered, every mm/addmm/bmm that may be written as
loops (Note [Matmuls as loops]: float32/float64, static sizes) and may win that way (at most
`MAX_ROWS` rows, b contiguous along k or n: elsewhere a BLAS GEMM's register blocking always
won) is timed both ways on random inputs of its sizes and strides, each as a one-op graph
compiled by kiln (the wrapper's call included in both). The loops are kept only when faster by
a margin (`MARGIN`), so timing noise leaves the BLAS call; in the graph they are then also fused
with the ops after them, which the timing does not credit. Choices are kept in memory and on
disk (`<cache_dir>/cpu_tuning.json`), keyed by the op, sizes, strides, dtype, arguments, thread
count, CPU, compiler and kiln's backend source, so a later process compiles at once. What a
graph chose enters its cache key. Timing takes the best of a few interleaved rounds of at least
a millisecond each (wall clock: a kernel may run on several threads).
"""

import hashlib
import time

import torch

from kiln import config, modes, toolchain
from kiln.backend import codecache, matmul_choice
from kiln.backend.lowering_matmul import LOOP_LOWERINGS, offered
from kiln.backend.tuning_cache import TuningCache

MARGIN = 0.9  # loops are chosen when they take at most this fraction of the ATen call's time
ROUNDS = 5

_disk = TuningCache("cpu_tuning.json")
_tuned = {}  # disk key -> "loops" | "aten"


def matmuls_as_loops(gm, compile_graph, salt):
    """The names of gm's matmul nodes that run faster as loops (None unless max-autotune)."""
    if not modes.current("max_autotune"):
        return None
    names = set()
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in LOOP_LOWERINGS:
            continue
        val = node.meta.get("val")
        args = [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in node.args]
        if offered(node.target, val, args) and _worth_timing(args) and not node.kwargs.get("out"):
            if _choice(node.target, args, dict(node.kwargs), compile_graph, salt) == "loops":
                names.add(node.name)
    return frozenset(names)


MAX_ROWS = 64  # above this many rows (M) a BLAS GEMM's register blocking always won


def _worth_timing(args):
    """Whether the loops could win: few rows, and b contiguous along k with a (a dot product
    per output, vectorized along k) or along n (outputs side by side, vectorized along n: a
    column reduction). Other matmuls stay ATen calls without being timed."""
    a, b = [x for x in args if isinstance(x, torch.Tensor)][-2:]
    along_k = a.stride(-1) == 1 and b.stride(-2) == 1
    return (along_k or b.stride(-1) == 1) and a.shape[-2] <= MAX_ROWS


def _key(target, args, kwargs, salt):
    parts = [str(target), repr(sorted(kwargs.items())), str(codecache.num_threads())]
    for a in args:
        if isinstance(a, torch.Tensor):
            parts.append(f"{tuple(a.shape)}{a.stride()}{a.dtype}")
        else:
            parts.append(repr(a))
    parts += [toolchain.cpu_id(), config.cpp_compiler, config.cpp_flags, salt]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


def _choice(target, args, kwargs, compile_graph, salt):
    key = _key(target, args, kwargs, salt)
    return matmul_choice.choose(
        key,
        _tuned,
        _disk,
        target,
        args,
        kwargs,
        compile_graph,
        "loops",
        _time,
        tol=1e-3,
        margin=MARGIN,
    )


def _time(*fns):
    """Seconds per call of each: the best of ROUNDS rounds of at least a millisecond, the
    functions' rounds interleaved so that a slower moment of the machine falls on all."""
    n = []
    for fn in fns:
        fn()
        start = time.perf_counter()
        fn()
        n.append(max(1, int(1e-3 / max(time.perf_counter() - start, 1e-7))))
    best = [float("inf")] * len(fns)
    for _ in range(ROUNDS):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            for _ in range(n[i]):
                fn()
            best[i] = min(best[i], (time.perf_counter() - start) / n[i])
    return best
