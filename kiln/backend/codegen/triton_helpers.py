"""What generated Triton modules import: device functions, libdevice (or its CPU stand-in under
TRITON_INTERPRET=1), block-size heuristics and the launcher.

Note [Triton: libdevice under the interpreter]
Triton's interpreter cannot call libdevice (extern functions). Generated kernels call
`libdevice.<fn>` by name; on a GPU that is Triton's libdevice, under TRITON_INTERPRET=1 it is
`triton_interp` (the same functions computed by torch's CPU kernels on the interpreter's arrays),
so one kernel source serves both and the CPU run checks the kernel's structure, masks and indices.
"""

import functools
import os

import torch
import triton
import triton.language as tl
from triton.runtime import driver

try:
    from triton import knobs
except ImportError:  # a Triton before 3.4: its own launcher only
    knobs = None

from kiln import config
from kiln.backend.codegen import triton_tune

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"

if INTERPRET:
    from kiln.backend.codegen import triton_interp as libdevice
else:  # pragma: no cover (needs a GPU)
    from triton.language.extra import libdevice  # noqa: F401


if INTERPRET:
    from kiln.backend.codegen.triton_interp import round_bf16  # noqa: F401
else:  # pragma: no cover (needs a GPU)

    @triton.jit
    def round_bf16(x):
        """float32 rounded to bfloat16's precision (to nearest even), still float32."""
        return x.to(tl.bfloat16).to(tl.float32)


# --- device functions (C semantics of the index helpers the loop IR renders) ---------------------
@triton.jit
def kiln_floordiv_idx(a, b):
    q = a // b
    return tl.where((a % b != 0) & ((a < 0) != (b < 0)), q - 1, q)


@triton.jit
def kiln_mod_idx(a, b):
    m = a % b
    return tl.where(m < 0, m + b, m)


@triton.jit
def kiln_clamp_idx(a, n):
    return tl.where(a < 0, 0, tl.where(a >= n, tl.where(n > 0, n - 1, 0), a))


@triton.jit
def floordiv_i(a, b):
    q = a // b
    return tl.where((a % b != 0) & ((a < 0) != (b < 0)), q - 1, q)


@triton.jit
def remainder_i(a, b):
    m = a % b
    return tl.where((m != 0) & ((m < 0) != (b < 0)), m + b, m)


@triton.jit
def floordiv_f(a, b):
    """Eager's floor_divide for floats (kiln_floordiv_f in the C++ prelude)."""
    mod = libdevice.fmod(a, b)
    div = (a - mod) / b
    div = tl.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    fl = libdevice.floor(div)
    fl = tl.where(div - fl > 0.5, fl + 1, fl)
    fl = tl.where(div == 0, libdevice.copysign(div * 0, a / b), fl)
    return tl.where(b == 0, a / b, fl)


@triton.jit
def remainder_f(a, b):
    m = libdevice.fmod(a, b)
    return tl.where((m != 0) & ((b < 0) != (m < 0)), m + b, m)


@triton.jit
def maximum(a, b):
    """NaN wins; a tie gives b (eager's signed zeros)."""
    return tl.where((a > b) | (a != a), a, b)


@triton.jit
def minimum(a, b):
    return tl.where((a < b) | (a != a), a, b)


@triton.jit
def _prod(a, b):
    return a * b


@triton.jit
def red_sum(x, axis: tl.constexpr):
    return tl.sum(x, axis)  # a tree (pairwise under the interpreter), not a sequential fold


@triton.jit
def red_prod(x, axis: tl.constexpr):
    return tl.reduce(x, axis, _prod)


if INTERPRET:  # the interpreter's max is numpy's nanmax, and a custom combine function runs
    # element by element in Python: NaN put back by a sum (NaN when any element is)

    @triton.jit
    def red_max(x, axis: tl.constexpr):
        nan = tl.max((x != x).to(tl.int32), axis) > 0
        return tl.where(nan, tl.sum(x, axis), tl.max(x, axis))

    @triton.jit
    def red_min(x, axis: tl.constexpr):
        nan = tl.max((x != x).to(tl.int32), axis) > 0
        return tl.where(nan, tl.sum(x, axis), tl.min(x, axis))

else:  # pragma: no cover (needs a GPU: Triton's own max drops NaN)

    @triton.jit
    def red_max(x, axis: tl.constexpr):
        return tl.reduce(x, axis, maximum)

    @triton.jit
    def red_min(x, axis: tl.constexpr):
        return tl.reduce(x, axis, minimum)


@triton.jit
def red_welford_m2(mean, m2, n, axis: tl.constexpr):
    """The sum of squared deviations from each row's mean, from its lanes' running (mean, m2,
    count): sum(m2) + sum(count * (mean - row mean)**2) (Note [Triton: variance in one pass])."""
    total = tl.sum(n, axis)
    row_mean = tl.sum(n * mean, axis) / tl.maximum(total, 1.0)
    d = mean - tl.expand_dims(row_mean, axis)
    return tl.sum(m2, axis) + tl.sum(n * d * d, axis)


@triton.jit
def red_argmax(x, i, axis: tl.constexpr):
    """The lowest index i among the lanes holding the maximum (the first NaN if any)."""
    m = tl.expand_dims(red_max(x, axis), axis)
    best = (x == m) | ((m != m) & (x != x))
    return tl.min(tl.where(best, i, 9223372036854775807), axis)


@triton.jit
def red_argmin(x, i, axis: tl.constexpr):
    m = tl.expand_dims(red_min(x, axis), axis)
    best = (x == m) | ((m != m) & (x != x))
    return tl.min(tl.where(best, i, 9223372036854775807), axis)


# --- launch ---------------------------------------------------------------------------------------
# Note [Triton: block sizes]
# Pointwise kernels: XBLOCK up to 1024 (4 warps; 8 from 2048 elements on). Reductions: the whole
# row in one block when its extent is static and at most PERSISTENT_MAX (RBLOCK = the next power
# of two, fixed in the kernel), else RBLOCK_LOOP elements per step; XBLOCK rows per program so that
# a block holds about 4096 elements. Under the interpreter every program is a Python call: blocks
# are as large as the work (up to 2**16 elements) so that a graph runs in few programs.
RBLOCK_LOOP = 512


def _pow2(n):
    return 1 << max(int(n) - 1, 0).bit_length()


@functools.lru_cache(maxsize=4096)
def block_sizes(xnumel, rnumel, rblock):
    """(XBLOCK, RBLOCK, num_warps) for a launch; rblock: the kernel's persistent RBLOCK or 0."""
    if rnumel is None:  # pointwise
        cap = 1 << 16 if INTERPRET else 1024
        x = min(_pow2(xnumel), cap)
        return x, 1, (8 if x >= 2048 else 4)
    r = rblock or (min(_pow2(rnumel), 1 << 12) if INTERPRET else RBLOCK_LOOP)
    budget = (1 << 16) if INTERPRET else 4096
    x = max(1, min(_pow2(xnumel), budget // r, 1 << 12))
    return x, r, (8 if x * r >= 2048 else 4)


# Note [Triton: launches on CUDA]
# `kernel[grid](...)` goes through Triton's JIT dispatcher on every call: bind the arguments,
# compute their specialization, look the compiled kernel up, check globals: 10-20 us, more than
# many of our kernels run. The first launch of each specialization goes that way and returns the
# compiled kernel; later launches with the same specialization key call it directly. The key is a
# superset of what Triton specializes on: per int its width (32/64 bits), whether it is 1 and
# whether 16 divides it; per tensor its 16-byte alignment, and its dtype, which the kernel's source
# names in a comment (`# arg0_1 float32, buf1 bfloat16`): one source, one set of pointer dtypes.
# A launch's hit path is one dictionary lookup, keyed by the kernel, the current device, the
# sizes and the arguments' specialization, then the compiled kernel's launcher called with the
# current stream: grid, block sizes and trailing arguments are stored with the entry (keyed by
# the kernel's id: a JITFunction's hash is computed, ~2 µs; the entry keeps it alive). Launch
# hooks (a profiler's) send launches through Triton's own runner, which calls them; Triton 3.5+
# keeps an empty HookChain, not None, when none is set (it was taken for a hook: on the H100
# every launch went the slow way).
# Index checks: under the interpreter a kernel sets a flag the launcher reads (a clean IndexError);
# on CUDA reading it would synchronise with the device after every such kernel, so the kernel
# asserts on the device instead (`debug=True`, no integer-overflow checks), as eager CUDA code
# does: an out-of-bounds index is a device-side assert in both.
_compiled = {}  # (jit kernel, launch constants, warps, specialization) -> _Relaunch
_hits = {}  # (id of the jit kernel, device, xnumel, rnumel, spec) -> launch entry (the hit path)
_flags = {}  # device -> the index flag of CUDA kernels (written only before their assert fires)
_device = getattr(torch._C, "_cuda_getDevice", None)  # the current CUDA device's index
_stream = None  # Triton's driver's current-stream function, bound at the first CUDA launch


def _bind_driver():  # pragma: no cover (needs a GPU)
    """The driver's device and stream functions (looked up once: `driver.active` needs a GPU)."""
    global _device, _stream
    _device = _device or driver.active.get_current_device
    _stream = driver.active.get_current_stream


def _spec(args):
    """The specialization key of a launch's arguments (Note [Triton: launches on CUDA])."""
    return tuple(
        [
            a.data_ptr() & 15 == 0
            if isinstance(a, torch.Tensor)
            else (a == 1, a & 15 == 0, -2147483648 <= a < 2147483648)
            if type(a) is int
            else float
            if type(a) is float  # (Triton passes floats as fp32, never specialised on value)
            else (type(a), a)
            for a in args
        ]
    )


def _hooked():
    """Whether a launch hook is set (an empty HookChain is none: Note [Triton: launches on CUDA])."""
    rt = knobs.runtime
    for hook in (rt.launch_enter_hook, rt.launch_exit_hook):
        if hook is not None and getattr(hook, "calls", True):
            return True
    return False


class _Relaunch:
    """One compiled kernel, called through its launcher with the current stream (the work of
    Triton's `compiled[grid](*args)` minus its per-call closure and metadata), or through
    `compiled[grid]` while a launch hook is set (a profiler's)."""

    def __init__(self, compiled):
        self.compiled = compiled
        self.run = compiled.run  # loads the binary
        self.function, self.metadata = compiled.function, compiled.packed_metadata

    def __call__(self, grid, args):
        if _hooked():
            self.compiled[(grid, 1, 1)](*args)
        else:
            if _stream is None:
                _bind_driver()
            stream = _stream(_device())
            self.run(grid, 1, 1, stream, self.function, self.metadata, None, None, None, *args)


def _launch_cuda(kernel, args, consts, grid, warps, err, names=("XBLOCK", "RBLOCK"), stages=None):
    """A launch through the relaunch cache, or Triton's JIT the first time; the _Relaunch."""
    key = (kernel, consts, warps, stages, _spec(args))
    relaunch = _compiled.get(key) if config.triton_fast_launch else None
    if relaunch is not None:
        relaunch(grid, (*args, *consts))
        return relaunch
    names = names[: len(consts)]
    options = {"debug": True, "sanitize_overflow": False} if err else {}
    if stages is not None:
        options["num_stages"] = stages
    compiled = kernel[(grid,)](*args, **dict(zip(names, consts)), num_warps=warps, **options)
    if config.triton_fast_launch and compiled is not None and knobs is not None:
        try:
            relaunch = _compiled[key] = _Relaunch(compiled)
        except AttributeError:  # a Triton without these: its own launcher
            config.triton_fast_launch = False
    return relaunch


def _hit(kernel, sizes, args):
    """(key, True) when this launch ran through the hit path (one lookup, then the launcher);
    (key, False) when it must be launched the long way (key None: no hit path here)."""
    if INTERPRET or not config.triton_fast_launch:
        return None, False
    if _stream is None:  # pragma: no cover (GPU)
        _bind_driver()
    dev = _device()
    key = (id(kernel), dev, *sizes, _spec(args))  # (a JITFunction hashes slowly)
    hit = _hits.get(key)
    if hit is not None and not _hooked():
        run, function, metadata, grid, tail, _ = hit
        run(grid, 1, 1, _stream(dev), function, metadata, None, None, None, *args, *tail)
        return key, True
    return key, False


def _remember(key, relaunch, grid, tail, kernel):
    """Keep a launch's pieces for the hit path (the entry holds the kernel: its id stays unique
    while the entry lives)."""
    if key is not None and isinstance(relaunch, _Relaunch):
        _hits[key] = (relaunch.run, relaunch.function, relaunch.metadata, grid, tail, kernel)


def launch(kernel, args, xnumel, rnumel, rblock, err, tune=False):
    """Run a kernel over xnumel outputs (rnumel reduced elements each); the index-error flag.
    `tune`: block sizes and warps timed on the first launch (Note [Triton: autotuning])."""
    if xnumel <= 0:
        return 0
    # (a tuned launch takes the hit path too: its configuration is fixed after the first launch)
    hit_key, done = _hit(kernel, (xnumel, rnumel), args)
    if done:
        return 0
    cfg = block_sizes(xnumel, rnumel, rblock)
    extra = (xnumel,) if rnumel is None else (xnumel, rnumel)
    flag = None
    if err:
        dev = next(a.device for a in args if isinstance(a, torch.Tensor))
        if INTERPRET:
            flag = torch.zeros(1, dtype=torch.int32, device=dev)
        else:  # pragma: no cover (needs a GPU)
            flag = _flags.get(dev)
            if flag is None:
                flag = _flags[dev] = torch.zeros(1, dtype=torch.int32, device=dev)
        extra = (*extra, flag)
    args = (*args, *extra)
    if tune:
        cfg = triton_tune.best(
            kernel,
            args,
            xnumel,
            rnumel,
            rblock,
            cfg,
            _spec(args),
            lambda c, a: _run(kernel, a, c, xnumel, rnumel is not None, err),
        )
    relaunch = _run(kernel, args, cfg, xnumel, rnumel is not None, err)
    consts = cfg[:2] if rnumel is not None else cfg[:1]
    _remember(hit_key, relaunch, -(-xnumel // cfg[0]), (*extra, *consts), kernel)
    return int(flag.item()) if err and INTERPRET else 0


def _run(kernel, args, cfg, xnumel, reduction, err):
    """One launch with a configuration (XBLOCK, RBLOCK, warps)."""
    xb, rb, warps = cfg
    consts = (xb, rb) if reduction else (xb,)
    grid = -(-xnumel // xb)
    if not INTERPRET:  # pragma: no cover (needs a GPU)
        return _launch_cuda(kernel, args, consts, grid, warps, err)
    names = ("XBLOCK", "RBLOCK")[: len(consts)]
    kernel[(grid,)](*args, **dict(zip(names, consts)), num_warps=warps)
    return None


# --- the matmul template (Note [Triton: the matmul template]) -------------------------------------
MM_CONSTS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")

if INTERPRET:  # the interpreter's bfloat16 tl.dot is wrong: bfloat16 products are exact in float32

    @triton.jit
    def dot_bf16(a, b, acc):
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")

else:  # pragma: no cover (needs a GPU)

    @triton.jit
    def dot_bf16(a, b, acc):
        return tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16), acc)


def launch_mm(kernel, args, m, n, batch, k, tune=None):
    """Run a matmul template over an [batch, m, n] output (k reduced); 0 (no index checks).
    `tune`: the key (sizes, dtype, operand indices) of its block configuration, timed on the
    first launch with that key (triton_tune.best_mm), or None."""
    if m * n * batch <= 0:
        return 0
    hit_key, done = _hit(kernel, (m, n, batch, k), args)
    if done:
        return 0
    dtype = next(a.dtype for a in args if isinstance(a, torch.Tensor))
    cfg = triton_tune.mm_default(m, n, k, dtype, INTERPRET)
    if tune:
        cfg = triton_tune.best_mm(
            tune,
            args,
            (m, n, batch, k),
            cfg,
            (),  # (the epilogue's arguments differ between the timed graph and the real one)
            lambda c, a: _run_mm(kernel, a, c, m, n, batch),
        )
    relaunch = _run_mm(kernel, args, cfg, m, n, batch)
    _remember(hit_key, relaunch, -(-m // cfg[0]) * -(-n // cfg[1]) * batch, cfg[:4], kernel)
    return 0


def _run_mm(kernel, args, cfg, m, n, batch):
    """One launch of a matmul template with a configuration (BLOCK_M, N, K, GROUP_M, warps,
    stages): one program per output tile, the batch folded into the grid."""
    bm, bn, bk, gm, warps, stages = cfg
    consts = (bm, bn, bk, gm)
    grid = -(-m // bm) * -(-n // bn) * batch
    if not INTERPRET:  # pragma: no cover (needs a GPU)
        return _launch_cuda(kernel, args, consts, grid, warps, False, MM_CONSTS, stages)
    kernel[(grid,)](*args, **dict(zip(MM_CONSTS, consts)), num_warps=warps)
    return None
