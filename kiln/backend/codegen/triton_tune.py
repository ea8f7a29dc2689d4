"""mode="max-autotune" for Triton kernels: block sizes and warps timed once per kernel and size.

Note [Triton: autotuning]
A kernel compiled under max-autotune launches with `tune=True`. Its first launch for a size
(xnumel, rnumel) and argument specialization times a few candidate configurations and keeps the
fastest, in memory and on disk (`<cache_dir>/triton/tuning.json`, keyed by the kernel's source,
the sizes, the device and Triton's version), so a later process starts from it. Candidates:
- pointwise: XBLOCK 64 to 2048 with 2, 4 or 8 warps (never more elements than the work);
- persistent reductions (the row in one block, RBLOCK fixed by the kernel): rows per program and
  warps;
- looped reductions: RBLOCK 64 to 2048 elements per step and rows per program, 4 or 8 warps.
Timing runs the kernel on copies of its tensor arguments (a kernel that writes over an input must
not see its own output), on a GPU with Triton's `do_bench` (median of a few milliseconds of runs),
under the interpreter with the wall clock (there it only checks that every candidate computes the
same thing: the tests compare each with eager). The default heuristics (`block_sizes`) are always
among the candidates, so a tuned kernel is never slower than default by more than timing noise.
"""

import hashlib
import time

import torch
import triton
import triton.testing

from kiln import config, logs
from kiln.backend.tuning_cache import TuningCache

_tuned = {}  # (kernel, xnumel, rnumel, spec) -> (XBLOCK, RBLOCK, warps)
_disk = TuningCache("triton", "tuning.json")


def _pow2(n):
    return 1 << max(int(n) - 1, 0).bit_length()


def candidates(xnumel, rnumel, rblock, default):
    """(XBLOCK, RBLOCK, warps) configurations worth timing for one launch; default first."""
    out = [default]
    xcap = max(_pow2(xnumel), 1)
    if rnumel is None:
        for x, w in ((64, 2), (128, 4), (256, 4), (512, 4), (1024, 4), (1024, 8), (2048, 8)):
            if x <= max(xcap, 64):
                out.append((x, 1, w))
    elif rblock:  # persistent: RBLOCK is the kernel's
        for x in (1, 2, 4, 8, 16, 32, 64):
            if x <= xcap and x * rblock <= 16384:
                for w in (4, 8) if x * rblock >= 2048 else (2, 4):
                    out.append((x, rblock, w))
    else:
        rcap = max(_pow2(rnumel), 16)
        for r in (64, 128, 256, 512, 1024, 2048):
            if r > rcap:
                continue
            for x in (1, 2, 4, 8, 16, 32):
                if x <= xcap and 512 <= x * r <= 8192:
                    out.append((x, r, 8 if x * r >= 4096 else 4))
    seen, unique = set(), []
    for c in out:
        if c not in seen:
            seen.add(c)
            unique.append(c)
    return unique[: config.autotune_max_candidates]


def _disk_key(kernel, sizes, spec, args):
    src = kernel if isinstance(kernel, str) else getattr(kernel, "src", "") or ""
    dev = next((a.device for a in args if isinstance(a, torch.Tensor)), None)
    name = torch.cuda.get_device_name(dev) if dev is not None and dev.type == "cuda" else "cpu"
    text = f"{src}|{'|'.join(map(str, sizes))}|{spec}|{name}|{triton.__version__}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def best(kernel, args, xnumel, rnumel, rblock, default, spec, run):
    """The fastest configuration for this launch; `run(config, args)` launches the kernel."""
    cands = candidates(xnumel, rnumel, rblock, default)
    return _best(kernel, args, (xnumel, rnumel), cands, spec, run)


# Note [Triton: matmul template configurations]
# (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, warps, stages). Timed under max-autotune: the square tiles
# of a large GEMM, the rectangular ones, and narrow ones for a few rows (a decode step's M <= 16);
# a tile much larger than the output is not offered. Untimed, the default: 128x128 tiles for large
# outputs, 64x64 otherwise, 16 rows for M <= 16 (under the interpreter 16x16x16 tiles and groups of
# 2 tile rows, so that small tests cross tile, group and K-step edges). A choice is keyed by the
# matmul (sizes, dtype, its operands' index expressions), not the kernel's source: the one-op graph
# timed for the ATen-or-template choice tunes it, and the graph's kernel, with its epilogue,
# reuses it (each candidate is a Triton compile of its own, seconds).
MM_CONFIGS = (
    (64, 64, 32, 8, 4, 3),
    (128, 128, 32, 8, 8, 3),
    (128, 64, 32, 8, 4, 4),
    (64, 128, 32, 8, 4, 4),
    (64, 64, 64, 8, 4, 3),
    (128, 128, 64, 8, 8, 3),
    (32, 64, 32, 8, 4, 4),
    (32, 32, 32, 8, 2, 4),
    (16, 64, 64, 8, 4, 4),
    (16, 128, 64, 8, 4, 3),
    (16, 32, 128, 8, 2, 4),
)


MM_MAX_CANDIDATES = 5  # each a Triton compile of its own (seconds): a model has many shapes


def mm_default(m, n, k, dtype, interpret):
    """The untimed configuration of a matmul template launch."""
    if interpret:
        return (16, 16, 16, 2, 4, 1)
    if m <= 16:
        return (16, 64, 64, 8, 4, 4)
    if m >= 128 and n >= 128 and m * n >= 1 << 16:
        return (128, 128, 32 if dtype == torch.float32 else 64, 8, 8, 3)
    return (64, 64, 32, 8, 4, 3)


def mm_candidates(m, n, k, default):
    """Configurations worth timing for a matmul of this size; default first."""
    out = [default]
    for c in MM_CONFIGS:
        bm, bn, bk = c[:3]
        if bm > max(_pow2(m), 16) or bn > max(_pow2(n), 16) or bk > max(_pow2(k), 16):
            continue
        if m <= 16 and bm > 32:
            continue
        if c not in out:
            out.append(c)
    return out[: min(config.autotune_max_candidates, MM_MAX_CANDIDATES)]


def best_mm(key, args, sizes, default, spec, run):
    """The fastest template configuration for a matmul (m, n, batch, k); `key` names the matmul
    (its sizes, dtype, operand indices) whatever its epilogue, which rarely moves the choice."""
    m, n, _, k = sizes
    return _best(key, args, sizes, mm_candidates(m, n, k, default), spec, run)


def _best(kernel, args, sizes, cands, spec, run):
    key = (kernel, sizes, spec)
    hit = _tuned.get(key)
    if hit is not None:
        return hit
    dkey = _disk_key(kernel, sizes, spec, args)
    stored = _disk.get(dkey)
    if stored is not None:
        _tuned[key] = tuple(stored)
        logs.counters["backend"]["autotune_disk_hits"] += 1
        return _tuned[key]
    copies = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    timed = []
    default = cands[0]
    for cfg in cands:
        try:
            timed.append((_time(lambda cfg=cfg: run(cfg, copies), copies), cfg))
        except Exception as e:  # a configuration Triton cannot compile (resources): not a choice
            logs.log("output_code", "kiln: autotune candidate %s failed: %s", cfg, e)
    choice = min(timed)[1] if timed else default
    logs.counters["backend"]["autotune_timed"] += 1
    logs.log(
        "output_code",
        "kiln: autotuned %s (sizes %s): %s of %d",
        getattr(kernel, "__name__", kernel),
        sizes,
        choice,
        len(timed),
    )
    _tuned[key] = choice
    _disk.put(dkey, list(choice))
    return choice


def _time(fn, args):
    """Seconds per run: Triton's benchmark on a GPU, one wall-clock run under the interpreter."""
    if any(isinstance(a, torch.Tensor) and a.is_cuda for a in args):  # pragma: no cover (GPU)
        return triton.testing.do_bench(fn, warmup=2, rep=8, return_mode="median")
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t
