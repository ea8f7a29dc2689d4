"""`kiln bench` results: the printed table with geometric means, and CSV, JSON and a PNG chart."""

import csv
import dataclasses
import json
import math
import os

from kiln_bench.runner import Row

COLUMNS = (
    # (header, Row field, format)
    ("model", "model", "{}"),
    ("mode", "mode", "{}"),
    ("compiler", "compiler", "{}"),
    ("acc", "accuracy", "{}"),
    ("max err", "max_err", "{:.1e}"),
    ("ms", "ms", "{:.2f}"),
    ("speedup", "speedup", "{:.2f}x"),
    ("cold s", "cold_s", "{:.2f}"),
    ("warm s", "warm_s", "{:.2f}"),
    ("graphs", "graphs", "{}"),
    ("breaks", "breaks", "{}"),
    ("step MB", "step_mb", "{:.0f}"),
    ("status", "status", "{}"),
)


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summary(rows):
    """Per compiler and mode: geomean speedup over passing rows, passes, mean cold/warm compile."""
    out = []
    keys = []
    for r in rows:
        if (r.compiler, r.mode) not in keys:
            keys.append((r.compiler, r.mode))
    for compiler, mode in keys:
        group = [r for r in rows if r.compiler == compiler and r.mode == mode]
        good = [r for r in group if r.ok and r.speedup]
        colds = [r.cold_s for r in group if r.cold_s is not None and r.ok]
        warms = [r.warm_s for r in group if r.warm_s is not None and r.ok]
        out.append(
            {
                "compiler": compiler,
                "mode": mode,
                "passed": len([r for r in group if r.ok]),
                "total": len(group),
                "geomean_speedup": geomean([r.speedup for r in good]),
                "mean_cold_s": sum(colds) / len(colds) if colds else None,
                "mean_warm_s": sum(warms) / len(warms) if warms else None,
            }
        )
    return out


def _cell(value, fmt):
    if value is None or value == "":
        return "-"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return fmt.format(value)


def _grid(headers, body):
    widths = [
        max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(headers)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in body]
    return "\n".join(lines)


def table(rows, overhead=(), env=None, status_width=60):
    """The text report: every row, then geometric means, then start-up and per-call overhead."""
    body = []
    for r in rows:
        cells = [_cell(getattr(r, field), fmt) for _, field, fmt in COLUMNS]
        cells[-1] = cells[-1][:status_width]
        body.append(cells)
    parts = [_grid([h for h, _, _ in COLUMNS], body)]
    sums = summary(rows)
    sbody = [
        [
            s["compiler"],
            s["mode"],
            f"{s['passed']}/{s['total']}",
            _cell(s["geomean_speedup"], "{:.2f}x"),
            _cell(s["mean_cold_s"], "{:.2f}"),
            _cell(s["mean_warm_s"], "{:.2f}"),
        ]
        for s in sums
    ]
    parts.append(
        "Geometric mean speedup over passing models (eager = 1.00x):\n"
        + _grid(["compiler", "mode", "pass", "geomean", "mean cold s", "mean warm s"], sbody)
    )
    broke = [r for r in rows if r.breaks and r.break_reason]
    if broke:
        parts.append(
            "Graph breaks (most frequent reason):\n"
            + "\n".join(
                f"  {r.model}/{r.mode} {r.compiler}: {r.breaks} break(s): {r.break_reason}"
                for r in broke
            )
        )
    if overhead:
        obody = [
            [
                o["compiler"],
                _cell(o["startup_s"], "{:.2f}"),
                _cell(o["call_us"], "{:.1f}"),
                o["status"][:status_width],
            ]
            for o in overhead
        ]
        parts.append(
            "Start-up (first compile of x + 1) and per-call time of that function on a 1-element tensor:\n"
            + _grid(["compiler", "start-up s", "call us", "status"], obody)
        )
    if env:
        parts.append(
            f"Machine: {env.get('cpu') or '?'} ({env.get('cpu_count')} cores, "
            f"{_threads(env)}), {env.get('device')}, {env.get('dtype')}, "
            f"{env.get('timer', 'wall')}-clock step times; "
            f"torch {env.get('torch')}, Python {env.get('python')}; {env.get('date')}; "
            f"load average {env.get('load_avg_start')} at start, {env.get('load_avg_1m')} at end"
        )
    return "\n\n".join(parts)


def _threads(env):
    n = env.get("torch_threads")
    return f"{n} torch thread{'' if n == 1 else 's'}"


def write_csv(rows, path):
    fields = [f.name for f in dataclasses.fields(Row)]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow(dataclasses.asdict(r))


def _json_safe(value):
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def write_json(rows, overhead, env, settings, path):
    doc = {
        "environment": env,
        "settings": dataclasses.asdict(settings)
        if dataclasses.is_dataclass(settings)
        else settings,
        "rows": [{k: _json_safe(v) for k, v in dataclasses.asdict(r).items()} for r in rows],
        "summary": summary(rows),
        "overhead": overhead,
    }
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)


COLORS = {"eager": "#9e9e9e", "kiln": "#d9541e", "torch.compile": "#3b75af"}
_EXTRA = ["#6a3d9a", "#33a02c", "#b15928", "#e7298a", "#1f78b4"]


def write_png(rows, path, env=None):
    """Speedup per model, one bar per compiler, one panel per mode; failures marked, geomean last."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    modes = list(dict.fromkeys(r.mode for r in rows))
    compilers = [c for c in dict.fromkeys(r.compiler for r in rows) if c != "eager"]
    models = list(dict.fromkeys(r.model for r in rows))
    colors = {}
    for i, c in enumerate(compilers):
        colors[c] = COLORS.get(c, _EXTRA[i % len(_EXTRA)])
    n_groups = len(models) + 1
    fig, axes = plt.subplots(
        len(modes),
        1,
        figsize=(min(15, max(7, 0.6 * n_groups * max(1, len(compilers)) + 2)), 3.8 * len(modes)),
        squeeze=False,
    )
    by_key = {(r.model, r.mode, r.compiler): r for r in rows}
    sums = {(s["compiler"], s["mode"]): s for s in summary(rows)}
    width = 0.8 / max(1, len(compilers))
    for ax, mode in zip(axes[:, 0], modes):
        top = 1.0
        for j, c in enumerate(compilers):
            xs, hs = [], []
            for i, m in enumerate(models + ["geomean"]):
                x = i - 0.4 + width * (j + 0.5)
                if m == "geomean":
                    val, ok, why = sums.get((c, mode), {}).get("geomean_speedup"), True, ""
                    ok = val is not None
                    why = "none passed"
                else:
                    r = by_key.get((m, mode, c))
                    val = r.speedup if r else None
                    ok = bool(r and r.ok and val)
                    why = _short_reason(r)
                if ok:
                    xs.append(x)
                    hs.append(val)
                    ax.text(x, val, f"{val:.2f}", ha="center", va="bottom", fontsize=7)
                    top = max(top, val)
                else:
                    ax.text(
                        x,
                        0.03,
                        why,
                        ha="center",
                        va="bottom",
                        fontsize=7,
                        rotation=90,
                        color=colors[c],
                    )
            ax.bar(xs, hs, width, color=colors[c])
        ax.axhline(1.0, color="#555555", linestyle="--", linewidth=1)
        ax.axvline(len(models) - 0.5, color="#bbbbbb", linewidth=1)
        ax.set_xticks(range(n_groups))
        ax.set_xticklabels(models + ["geomean"], fontsize=9)
        ax.get_xticklabels()[-1].set_fontweight("bold")
        ax.set_ylim(0, top * 1.18)
        ax.set_xlim(-0.6, n_groups - 0.4)
        ax.set_ylabel("speedup vs eager (x)")
        ax.set_title(f"{mode}", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        handles = [Patch(color=colors[c], label=c) for c in compilers]
        handles.append(Line2D([], [], color="#555555", linestyle="--", label="eager (1.0x)"))
        ax.legend(handles=handles, fontsize=8, loc="upper left", ncols=len(handles))
    title = "kiln bench: speedup over eager PyTorch (higher is better)"
    if env:
        title += (
            f"\n{env.get('cpu', '')}, {_threads(env)}, {env.get('device')} "
            f"{env.get('dtype')}, {env.get('timer', 'wall')}-clock step times"
        )
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _short_reason(row):
    if row is None:
        return "not run"
    if row.status.startswith("unavailable"):
        return "unavailable"
    if row.status.startswith("no graph"):
        return "no graph"
    if row.status != "ok":
        return "error"
    if row.accuracy == "FAIL":
        return "wrong result"
    return "no time"


def write_all(runner, env, outdir):
    """CSV, JSON, PNG and errors.log in outdir; returns the paths written."""
    os.makedirs(outdir, exist_ok=True)
    paths = {
        "csv": os.path.join(outdir, "bench.csv"),
        "json": os.path.join(outdir, "bench.json"),
        "png": os.path.join(outdir, "bench.png"),
    }
    write_csv(runner.rows, paths["csv"])
    write_json(runner.rows, runner.overhead, env, runner.s, paths["json"])
    write_png(runner.rows, paths["png"], env)
    log = os.path.join(outdir, "errors.log")
    if runner.errors:
        with open(log, "w") as f:
            f.write("\n".join(runner.errors))
        paths["errors"] = log
    elif os.path.exists(log):
        os.remove(log)
    return paths
