"""`kiln bench`: every model x mode x compiler in ONE process, interleaved, checked against eager.

For one model and mode the runner
  1. builds the model once (fixed seed) and runs eager on a fresh copy: the reference result
     (inference: the output; training: output, loss, every gradient, updated parameter and buffer
     after ONE forward + backward + optimizer step);
  2. per compiler: reset it, compile a fresh copy and time its first call (cold compile, which
     includes running the step once), compare that call's result with the reference; reset
     again and compile another fresh copy (warm compile: in-memory caches gone, on-disk caches
     hit); the warm copy is the one that is timed;
  3. times all compilers interleaved (one step of each in turn, rotating the order), after
     warm-up, and takes the median: speedup = eager median / compiled median;
  4. measures each compiler's step memory (see Note [Bench: memory]).
A compiler that raises or disagrees with eager is recorded in the row's status, never a crash.

Note [Bench: timer]
  Step times are wall-clock (time.perf_counter) by default. On a machine shared with other work,
  multi-threaded steps stall whenever one of their threads is descheduled, and wall times swing by
  10-100x; `--threads 1 --timer cpu` times each step by the process's CPU time instead, which
  other processes barely disturb, and which equals wall time for a single-threaded step on an idle
  machine. Compile times are always wall-clock.

Note [Bench: memory]
  tracemalloc does not see torch's CPU allocations, so on CPU we read the process's resident-set
  high-water mark (VmHWM, reset through /proc/self/clear_refs) around one step, after
  gc + malloc_trim: "step MB" is how far RSS rose above its resting level during that step
  (activations, temporaries, workspaces). It is process-wide and page-granular, and memory the
  C allocator kept from earlier steps can hide part of the peak; compile workers in other
  processes are not counted. "compile MB" is the same measure around the cold first call. On
  CUDA both are torch.cuda.max_memory_allocated() above the allocation at the start.
"""

import contextlib
import copy
import ctypes
import dataclasses
import gc
import math
import os
import statistics
import sys
import time
import traceback

import torch

from kiln.frontend import tensor_match
from kiln_bench import models as suite
from kiln_bench.compilers import Eager, Kiln, kiln_bench_config, parse_compare

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DTYPES["float64"] = torch.float64
# Note [Bench: tolerance] a tensor passes when max|actual - expected| <= atol + rtol * max|expected|:
# relative to the tensor's largest magnitude, so small gradients are not waved through by atol.
TOLERANCE = {
    torch.float64: (1e-12, 1e-7),
    torch.float32: (1e-7, 1e-4),
    torch.float16: (1e-5, 1e-2),
    torch.bfloat16: (1e-4, 5e-2),
}


# Note [Bench: no TF32 in the accuracy step] On CUDA, float32 convolutions run in TF32 by default
# (torch.backends.cudnn.allow_tf32): 10 bits of mantissa, so two correct programs that sum in
# different orders differ by ~1e-3 relative, more after a backward through batch norm (resnet
# training failed the check for every compiler, eager included against another eager order).
# The reference step and each compiler's checked step run with TF32 off; the timed runs keep the
# user's settings (each compiler recompiles for them after its reset).
@contextlib.contextmanager
def exact_float32(device):
    """TF32 off for matmuls and convolutions on CUDA while checking accuracy."""
    if device.type != "cuda":
        yield
        return
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@dataclasses.dataclass
class Row:
    """One model x mode x compiler result."""

    model: str
    mode: str
    compiler: str
    status: str = "ok"  # "ok", "error: <first line>", "unavailable: <reason>"
    accuracy: str = ""  # "pass", "FAIL", "" when not reached
    max_err: float | None = None  # largest max|actual - expected| over compared tensors
    worst: str = ""  # the tensor with the largest relative error
    ms: float | None = None  # median step time
    eager_ms: float | None = None
    speedup: float | None = None  # eager_ms / ms
    cold_s: float | None = None  # first call of a fresh compile, caches cold
    warm_s: float | None = None  # first call after reset, on-disk caches warm
    graphs: int | None = None
    breaks: int | None = None
    break_reason: str = ""  # the most frequent graph-break reason
    compile_mb: float | None = None  # see Note [Bench: memory]
    step_mb: float | None = None

    @property
    def ok(self):
        return self.status == "ok" and self.accuracy == "pass"


@dataclasses.dataclass
class Settings:
    models: str = "all"
    modes: tuple = ("inference", "training")
    compare: str = "kiln,torch.compile"
    backend: str = "kiln"
    device: str = "cpu"
    dtype: str = "float32"
    amp: str | None = (
        None  # "bfloat16"/"float16": each step's forward and loss under torch.autocast
    )
    iters: int = 20
    warmup: int = 3
    threads: int = 0
    batch: int | None = None
    optimizer: str = "sgd"
    timer: str = (
        "wall"  # "wall" (perf_counter) or "cpu" (process CPU time; see Note [Bench: timer])
    )
    explain: bool = False
    progress: bool = True


# --- memory --------------------------------------------------------------------------------------

_LIBC = None


def _trim():
    global _LIBC
    gc.collect()
    if sys.platform.startswith("linux"):
        try:
            _LIBC = _LIBC or ctypes.CDLL("libc.so.6")
            _LIBC.malloc_trim(0)
        except OSError:
            pass


def _status_kb(field):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


class PeakMemory:
    """Peak memory growth (MB) over a block; None where the platform cannot tell."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"
        self.mb = None

    def __enter__(self):
        _trim()
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
        else:
            try:
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")  # reset VmHWM to the current RSS
                self.base = _status_kb("VmRSS")
            except OSError:
                self.base = None
        return self

    def __exit__(self, *exc):
        if self.cuda:
            torch.cuda.synchronize()
            self.mb = (torch.cuda.max_memory_allocated() - self.base) / 2**20
        elif self.base is not None:
            peak = _status_kb("VmHWM")
            self.mb = None if peak is None else max(0, peak - self.base) / 1024
        return False


# --- one step ------------------------------------------------------------------------------------


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def _make_optimizer(kind, model):
    params = list(model.parameters())
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=1e-3)
    return torch.optim.SGD(params, lr=1e-2, momentum=0.9)


@dataclasses.dataclass
class Live:
    """A compiled (or eager) copy of the model with its optimizer, ready to step."""

    compiler: object
    model: torch.nn.Module
    fn: object  # compiler.compile(model)
    opt: object  # the optimizer in training mode, else None


def _step(fn, model, opt, inputs, loss_fn, mode, amp=None):
    """One inference call, or one training step; returns (output, loss). With `amp` (a dtype)
    the forward and the loss run under torch.autocast, the backward outside it, as users write."""
    autocast = torch.autocast(inputs[0].device.type, dtype=amp) if amp else contextlib.nullcontext()
    if mode == "inference":
        with torch.no_grad(), autocast:
            return fn(*inputs), None
    opt.zero_grad(set_to_none=True)
    with autocast:
        out = fn(*inputs)
        loss = loss_fn(out)
    loss.backward()
    opt.step()
    return out, loss


def _snapshot(model, out, loss, mode):
    """The tensors a step produced, detached: compared against eager's."""
    snap = {"output": out.detach().clone()}
    if mode == "training":
        snap["loss"] = loss.detach().clone()
        for name, p in model.named_parameters():
            if p.grad is not None:
                snap[f"grad {name}"] = p.grad.detach().clone()
            snap[f"param {name}"] = p.detach().clone()
        for name, b in model.named_buffers():
            snap[f"buffer {name}"] = b.detach().clone()
    return snap


def compare(actual, expected, dtype):
    """(passed, max abs error, worst tensor name) of two snapshots; see Note [Bench: tolerance]."""
    atol, rtol = TOLERANCE.get(dtype, TOLERANCE[torch.float32])
    passed, max_err, worst, worst_rel = True, 0.0, "", -1.0
    missing = set(expected) ^ set(actual)
    if missing:
        return False, math.inf, f"tensors differ: {sorted(missing)[:3]}"
    for name, e in expected.items():
        a = actual[name]
        if a.shape != e.shape or a.dtype != e.dtype:
            return (
                False,
                math.inf,
                f"{name}: {tuple(a.shape)}/{a.dtype} vs {tuple(e.shape)}/{e.dtype}",
            )
        if not e.is_floating_point():
            err = float((a != e).sum()) and math.inf
            scale = 1.0
        else:
            a64, e64 = a.double(), e.double()
            if not torch.equal(torch.isnan(a64), torch.isnan(e64)):
                return False, math.inf, f"{name}: NaN pattern differs"
            diff = (a64 - e64).nan_to_num(0.0).abs()
            err = float(diff.max()) if diff.numel() else 0.0
            scale = float(e64.nan_to_num(0.0).abs().max()) if e64.numel() else 0.0
        if err > atol + rtol * scale:
            passed = False
        rel = err / (atol + rtol * scale)
        max_err = max(max_err, err)
        if rel > worst_rel:
            worst, worst_rel = name, rel
    return passed, max_err, worst


# --- the run -------------------------------------------------------------------------------------


def _first_line(e):
    text = f"{type(e).__name__}: {e}"
    return text.splitlines()[0][:200]


class Runner:
    """Runs the suite for a Settings; results in .rows, .overhead, .errors."""

    def __init__(self, settings, out=None):
        self.s = settings
        self.device = torch.device(settings.device)
        self.dtype = DTYPES[settings.dtype]
        self.amp = DTYPES[settings.amp] if settings.amp else None
        self.compilers = parse_compare(settings.compare, settings.backend)
        self.unavailable = {c.name: c.available() for c in self.compilers}
        self.rows: list[Row] = []
        self.overhead: list[dict] = []
        self.errors: list[str] = []  # full tracebacks, written to errors.log
        self.out = out or sys.stdout
        self.torch_threads = torch.get_num_threads()  # as set for the run

    def log_error(self, where, exc):
        self.errors.append(f"=== {where}\n{traceback.format_exc()}")

    # phase 0: per compiler, the first compile of a trivial function (imports, start-up) and the
    # cache-hit cost of calling it: the per-call overhead.
    def measure_overhead(self):
        def tiny(x):
            return x + 1

        x = torch.ones(1, device=self.device, dtype=self.dtype)
        for c in self.compilers:
            entry = {"compiler": c.name, "startup_s": None, "call_us": None, "status": "ok"}
            self.overhead.append(entry)
            if self.unavailable[c.name]:
                entry["status"] = f"unavailable: {self.unavailable[c.name]}"
                continue
            try:
                c.reset()
                fn = c.compile(tiny)
                t0 = time.perf_counter()
                fn(x)
                _sync(self.device)
                entry["startup_s"] = time.perf_counter() - t0
                for _ in range(20):
                    fn(x)
                times = []
                for _ in range(7):
                    t0 = time.perf_counter()
                    for _ in range(100):
                        fn(x)
                    _sync(self.device)
                    times.append((time.perf_counter() - t0) / 100)
                entry["call_us"] = statistics.median(times) * 1e6
            except Exception as e:
                entry["status"] = f"error: {_first_line(e)}"
                self.log_error(f"overhead {c.name}", e)

    def explain_first(self, spec):
        """Print the graphs and guards kiln captures for one model (the demo's first model)."""
        kilns = [c for c in self.compilers if isinstance(c, Kiln)]
        print(f"\n== What kiln captures for {spec.name!r} (inference) ==", file=self.out)
        if not kilns or self.unavailable[kilns[0].name]:
            why = self.unavailable[kilns[0].name] if kilns else "kiln not in --compare"
            print(f"   (skipped: {why})\n", file=self.out)
            return
        import kiln

        model, inputs, _ = spec.build(self.device, self.dtype, self.s.batch)
        model.eval()
        try:
            kiln.reset()
            with torch.no_grad():
                if callable(getattr(kiln, "explain", None)):
                    print(kiln.explain(model)(*inputs), file=self.out)
                else:
                    from kiln import logs

                    old = set(logs._enabled)
                    logs.set_logs("graph_code,guards")
                    try:
                        kiln.compile(model, backend="eager")(*inputs)
                    finally:
                        logs.set_logs(",".join(old))
        except Exception as e:
            print(f"   (explain failed: {_first_line(e)})", file=self.out)
            self.log_error(f"explain {spec.name}", e)
        finally:
            kiln.reset()
        print(file=self.out)

    def run_case(self, spec, mode, progress=None):
        """All compilers on one model and mode; appends one Row per compiler."""
        s, dev = self.s, self.device
        rows = {c.name: Row(spec.name, mode, c.name) for c in self.compilers}
        self.rows.extend(rows.values())
        try:
            base, inputs, loss_fn = spec.build(dev, self.dtype, s.batch)
        except Exception as e:
            for r in rows.values():
                r.status = f"error: build: {_first_line(e)}"
            self.log_error(f"build {spec.name}", e)
            return
        (base.eval if mode == "inference" else base.train)()

        def fresh(compiler):
            model = copy.deepcopy(base)
            opt = _make_optimizer(s.optimizer, model) if mode == "training" else None
            return Live(compiler, model, suite.compile_model(compiler.compile, model), opt)

        def step(live):
            return _step(live.fn, live.model, live.opt, inputs, loss_fn, mode, self.amp)

        # the reference: eager, one step from a fresh copy
        ref_live = fresh(Eager())
        with exact_float32(dev):
            out, loss = step(ref_live)
        reference = _snapshot(ref_live.model, out, loss, mode)
        del ref_live, out, loss

        timed = {}
        for c in self.compilers:
            row = rows[c.name]
            if self.unavailable[c.name]:
                row.status = f"unavailable: {self.unavailable[c.name]}"
                continue
            phase = "compile"
            try:
                if progress:
                    progress(f"{spec.name}/{mode} {c.name}: compile")
                c.reset()
                live = fresh(c)
                with PeakMemory(dev) as mem, exact_float32(dev):
                    t0 = time.perf_counter()
                    out, loss = step(live)
                    _sync(dev)
                    row.cold_s = time.perf_counter() - t0
                row.compile_mb = mem.mb
                row.graphs, row.breaks = c.counts()
                row.break_reason = c.break_reason()
                phase = "accuracy"
                ok, row.max_err, row.worst = compare(
                    _snapshot(live.model, out, loss, mode), reference, self.amp or self.dtype
                )
                row.accuracy = "pass" if ok else "FAIL"
                del live, out, loss
                phase = "warm compile"
                c.reset()
                live = fresh(c)
                t0 = time.perf_counter()
                step(live)
                _sync(dev)
                row.warm_s = time.perf_counter() - t0
                if c.kind == "eager":  # nothing compiles: the first call is just a call
                    row.cold_s = row.warm_s = None
                elif row.graphs == 0:
                    why = f": {row.break_reason}" if row.break_reason else ""
                    row.status = f"no graph captured (ran eagerly){why}"
                timed[c.name] = live
            except Exception as e:
                row.status = f"error: {phase}: {_first_line(e)}"
                self.log_error(f"{spec.name}/{mode} {c.name} {phase}", e)

        if progress:
            progress(f"{spec.name}/{mode}: timing")
        self._time(timed, step, rows)

        for name, live in timed.items():
            try:
                with PeakMemory(dev) as mem:
                    step(live)
                rows[name].step_mb = mem.mb
            except Exception as e:
                rows[name].status = f"error: memory step: {_first_line(e)}"
                self.log_error(f"{spec.name}/{mode} {name} memory", e)
        eager_ms = rows["eager"].ms
        for row in rows.values():
            row.eager_ms = eager_ms
            if row.ms and eager_ms:
                row.speedup = eager_ms / row.ms

    def _time(self, timed, step, rows):
        """Interleaved timing: each iteration steps every compiler once, in a rotating order."""
        s, dev = self.s, self.device
        clock = time.process_time if s.timer == "cpu" else time.perf_counter
        names = list(timed)
        samples = {n: [] for n in names}
        for i in range(s.warmup + s.iters):
            k = i % max(1, len(names))
            for name in names[k:] + names[:k]:
                if name not in timed:
                    continue
                try:
                    t0 = clock()
                    step(timed[name])
                    _sync(dev)
                    dt = clock() - t0
                except Exception as e:
                    rows[name].status = f"error: timing: {_first_line(e)}"
                    self.log_error(f"{rows[name].model}/{rows[name].mode} {name} timing", e)
                    del timed[name]
                    continue
                if i >= s.warmup:
                    samples[name].append(dt)
        for name, xs in samples.items():
            if name in timed and xs:
                rows[name].ms = statistics.median(xs) * 1e3

    def run(self):
        """Phase 0 (start-up and overhead), then every model x mode with a progress bar."""
        threads = torch.get_num_threads()
        try:
            if self.s.threads:
                torch.set_num_threads(self.s.threads)
            self.torch_threads = torch.get_num_threads()
            with kiln_bench_config():
                return self._run()
        finally:
            torch.set_num_threads(threads)

    def _run(self):
        specs = suite.select(self.s.models)
        if self.s.explain and specs:
            self.explain_first(specs[0])
        cases = [(spec, mode) for spec in specs for mode in self.s.modes if mode in spec.modes]
        bar = _progress(len(cases) + 1, enabled=self.s.progress)
        bar.set_postfix_str("start-up + per-call overhead")
        self.measure_overhead()
        # the guards' C++ tensor checks are built in the background from the first compile
        # (Note [Guards: tensor checks in C++]): the timed cases start once they are loaded
        tensor_match.module(wait=True)
        bar.update(1)
        for spec, mode in cases:
            bar.set_postfix_str(f"{spec.name}/{mode}")
            self.run_case(spec, mode, progress=bar.set_postfix_str)
            bar.update(1)
        bar.close()
        return self


def _progress(total, enabled=True):
    """A tqdm bar on stderr, or a silent stand-in."""
    if enabled:
        try:
            from tqdm import tqdm

            return tqdm(total=total, unit="case", file=sys.stderr, dynamic_ncols=True)
        except ImportError:
            pass

    class Quiet:
        def set_postfix_str(self, s):
            pass

        def update(self, n):
            pass

        def close(self):
            pass

    return Quiet()


def environment(settings, runner=None):
    """Machine and software facts stored with the results."""
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    info = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "torch_threads": runner.torch_threads if runner else torch.get_num_threads(),
        "device": settings.device,
        "dtype": settings.dtype + (f" (autocast {settings.amp})" if settings.amp else ""),
        "timer": settings.timer,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "command": " ".join(["kiln"] + sys.argv[1:]),
        "load_avg_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }
    if settings.device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except Exception:
        pass
    return info
