"""Where a compiled graph's time goes: kiln's kernel ranges (`config.profile_kernels`) as a table.

    table = kernel_table(train_step, x, steps=5)   # runs train_step under torch.profiler
    print(table.format(top=10, kind="kernel"))      # kind: "kernel" | "extern" | None (both)
    table = table_from_profiler(prof)               # or from a torch.profiler run of your own

    kiln kernels, 5 steps: 2 graphs, 311.83 ms
      = kernels 43.32 ms (13.9%), externs 244.20 ms (78.3%), wrapper 24.31 ms (7.8%)
      total ms       %   calls  range
       100.963   32.4%       5  kiln:adc0ac graph (45 kernels, 16 externs)
       210.869   67.6%       5  kiln:aa3431 graph (72 kernels, 17 externs)
         6.220    2.0%       5  kiln:adc0ac kernel20 pointwise [8, 16, 32, 32] (2 nodes, 6 loads, ...
         4.627    1.5%       5  kiln:aa3431 kernel45 reduction(sum) [16 | 8, 32, 32] (3 nodes, ...

Percentages are of the graphs' total time; "wrapper" is the rest of it (allocations, layout
copies, Python). Ranges exist only in graphs compiled while the setting was on (Note [Backend:
kernel profiling]): `kernel_table` turns it on for its calls, but code compiled before (and cached
by the frontend) shows nothing; call `kiln.reset()` first or run with KILN_PROFILE_KERNELS=1.
"""

from typing import NamedTuple

import torch

from kiln import config


class Row(NamedTuple):
    """One profiler range: its label, how often it ran, its total time, its share of the graphs."""

    label: str
    calls: int
    total_ms: float
    percent: float


class KernelTable:
    """Kernel and extern rows, slowest first, with the graphs' total time they share."""

    def __init__(self, rows, graphs, steps=None):
        self.total_ms = sum(r.total_ms for r in graphs) or sum(r.total_ms for r in rows)
        self.rows = sorted(
            (r._replace(percent=_share(r.total_ms, self.total_ms)) for r in rows),
            key=lambda r: -r.total_ms,
        )
        # the graph ranges (whole compiled calls)
        self.graphs = [r._replace(percent=_share(r.total_ms, self.total_ms)) for r in graphs]
        self.steps = steps

    def time_of(self, kind):
        """Total ms of the rows of one kind: "kernel" or "extern"."""
        return sum(r.total_ms for r in self.rows if _kind(r.label) == kind)

    def format(self, top=None, kind=None):
        """The summary and the graph rows, then the `top` rows (of one kind), slowest first."""
        if not self.rows:
            return (
                "kiln kernels: no kiln profiler ranges seen (the graphs were compiled with "
                "config.profile_kernels off: call kiln.reset() first or set KILN_PROFILE_KERNELS=1)"
            )
        kernels, externs = self.time_of("kernel"), self.time_of("extern")
        wrapper = max(self.total_ms - kernels - externs, 0.0) if self.graphs else 0.0
        steps = f", {self.steps} steps" if self.steps else ""
        parts = [f"kernels {kernels:.2f} ms ({_share(kernels, self.total_ms):.1f}%)"]
        parts.append(f"externs {externs:.2f} ms ({_share(externs, self.total_ms):.1f}%)")
        if self.graphs:
            parts.append(f"wrapper {wrapper:.2f} ms ({_share(wrapper, self.total_ms):.1f}%)")
        lines = [f"kiln kernels{steps}: {len(self.graphs)} graphs, {self.total_ms:.2f} ms"]
        lines.append("  = " + ", ".join(parts))
        lines.append(f"{'total ms':>10} {'%':>7} {'calls':>7}  range")
        rows = [r for r in self.rows if kind is None or _kind(r.label) == kind]
        for r in self.graphs + rows[:top]:
            lines.append(f"{r.total_ms:10.3f} {r.percent:6.1f}% {r.calls:7d}  {r.label}")
        if top is not None and len(rows) > top:
            lines.append(f"{'':26}({len(rows) - top} more)")
        return "\n".join(lines)

    __str__ = format


def table_from_profiler(prof, steps=None):
    """The KernelTable of a finished `torch.profiler.profile` (its kiln ranges)."""
    rows, graphs = [], []
    for ev in prof.key_averages():
        if not ev.key.startswith("kiln:"):
            continue
        row = Row(ev.key, ev.count, ev.cpu_time_total / 1e3, 0.0)
        (graphs if _kind(ev.key) == "graph" else rows).append(row)
    return KernelTable(rows, graphs, steps)


def kernel_table(fn, *args, steps=5, warmup=1, **kwargs):
    """Run `fn(*args, **kwargs)` warmup times (compiling with kernel ranges on), then `steps`
    times under torch.profiler; the KernelTable of those steps."""
    saved = config.profile_kernels
    config.profile_kernels = True
    try:
        for _ in range(warmup):
            fn(*args, **kwargs)
        activities = [torch.profiler.ProfilerActivity.CPU]
        with torch.profiler.profile(activities=activities) as prof:
            for _ in range(steps):
                fn(*args, **kwargs)
    finally:
        config.profile_kernels = saved
    return table_from_profiler(prof, steps)


def _kind(label):
    """ "graph", "kernel" or "extern" from `kiln:<tag> kernel7 ...`."""
    what = label.split(" ", 2)[1] if " " in label else ""
    return what.rstrip("0123456789")


def _share(part, whole):
    return 100.0 * part / whole if whole else 0.0
