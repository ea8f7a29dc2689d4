"""KILN_DEBUG_DIR: per compiled graph its files and a runnable script, and an index.html report.

    <dir>/frontend/<frame>_<entry>/   guards.py, graph.py, bytecode.txt   (frontend/cache.py)
    <dir>/aot/graph_<n>/              joint, forward and backward ATen graphs  (autograd/aot.py)
    <dir>/graphs/<NNN>_<frame>_<kind>/
        graph.py      the ATen graph the code generator compiled, as FX code
        kernels.cpp   the generated C++ kernels
        wrapper.py    the generated Python wrapper that allocates and calls them
        run.py        rebuilds the graph and inputs of the same metadata, compiles and runs it
    <dir>/index.html  the run: frames, graphs, breaks with source lines, recompiles with their
                      reasons, guards, kernels (times with KILN_PROFILE_KERNELS=1)

Note [Debug dir: kernel times]
With config.profile_kernels on, the first PROFILED_CALLS calls of each compiled graph run under
`torch.profiler` (unless a profiler is already running) and the report lists its kernel and
extern ranges with their time. Only runs with both settings on pay for it.
"""

import html
import linecache
import os
import re
import time

import torch
import torch.autograd.profiler as _profiler

from kiln import config
from kiln.tools.repro import current_settings, write_script

PROFILED_CALLS = 3


class Report:
    """What the run compiled; written to <debug_dir>/index.html after each event."""

    def __init__(self):
        self.started = time.strftime("%Y-%m-%d %H:%M:%S")
        self.frames = []  # dicts: name, where, entry, folder, guards, graph
        self.breaks = []  # dicts: fn, reason, where, source
        self.recompiles = []  # dicts: fn, where, reasons
        self.graphs = []  # dicts: id, frame, kind, nodes, kernels, folder, files, run, times
        self.current_frame = "graph"
        self.dir = None

    def reset_for(self, folder):
        if self.dir != folder:
            self.__init__()
            self.dir = folder


REPORT = Report()


def _slug(text):
    return re.sub(r"[^0-9A-Za-z_]+", "_", text).strip("_")[:60] or "graph"


def _where(code):
    return f"{code.co_filename}:{code.co_firstlineno}"


def on_frame_start(fn):
    """The frontend starts tracing fn: graphs the backend compiles now belong to it."""
    REPORT.reset_for(config.debug_dir)
    REPORT.current_frame = fn.__qualname__


def on_frame(fn, entry, index, folder):
    REPORT.reset_for(config.debug_dir)
    REPORT.frames.append(
        dict(
            name=fn.__qualname__,
            where=_where(fn.__code__),
            entry=index,
            folder=os.path.relpath(folder, config.debug_dir),
            guards=entry.guard.source,
            graph=entry.gm.code if entry.gm is not None else "",
        )
    )
    write_index()


def on_break(record):
    REPORT.reset_for(config.debug_dir)
    where = record.user_location or ""
    m = re.match(r"(.*):(\d+): ?(.*)$", where)
    source = m.group(3) if m else ""
    if m and not source:
        source = linecache.getline(m.group(1), int(m.group(2))).strip()
    REPORT.breaks.append(
        dict(fn=record.fn.__qualname__, reason=record.reason, where=where, source=source)
    )
    write_index()


def on_recompile(fn, reasons):
    REPORT.reset_for(config.debug_dir)
    REPORT.recompiles.append(dict(fn=fn.__qualname__, where=_where(fn.__code__), reasons=reasons))
    write_index()


def _kind(gm):
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    if any(n.startswith("tangents") for n in names):
        return "backward"
    if any(n.startswith("primals") for n in names):
        return "forward"
    return "inference"


def on_backend_graph(gm, example_inputs, compiled):
    """The code generator compiled gm: write its files and run.py; returns `compiled`."""
    REPORT.reset_for(config.debug_dir)
    gid = len(REPORT.graphs)
    kind = _kind(gm)
    name = f"{gid:03d}_{_slug(REPORT.current_frame)}_{kind}"
    folder = os.path.join(config.debug_dir, "graphs", name)
    os.makedirs(folder, exist_ok=True)
    files = {}

    def put(fname, text):
        with open(os.path.join(folder, fname), "w") as f:
            f.write(text)
        files[fname] = os.path.join("graphs", name, fname)

    put("graph.py", gm.code.strip() + "\n")
    put("kernels.cpp", compiled.cpp_src)
    put("wrapper.py", compiled.wrapper_src)
    run_error = None
    try:
        write_script(os.path.join(folder, "run.py"), gm, example_inputs, "aot", current_settings())
        files["run.py"] = os.path.join("graphs", name, "run.py")
    except Exception as e:  # a graph the text format cannot hold: reported, not fatal
        run_error = f"{type(e).__name__}: {e}"
    kernels = re.findall(r'extern "C" int (kernel\d+)\(', compiled.cpp_src)
    nodes = sum(1 for n in gm.graph.nodes if n.op not in ("placeholder", "output"))
    info = dict(
        id=gid,
        frame=REPORT.current_frame,
        kind=kind,
        nodes=nodes,
        kernels=kernels,
        externs=list(compiled.fallback_ops),
        folder=os.path.join("graphs", name),
        files=files,
        run_error=run_error,
        times={},
    )
    REPORT.graphs.append(info)
    if config.profile_kernels:
        compiled.call = _profiled(compiled.call, info)
    write_index()
    return compiled


def _profiled(call, info):
    """Note [Debug dir: kernel times]."""
    left = [PROFILED_CALLS]

    def run(*args):
        if left[0] <= 0 or _profiler._is_profiler_enabled:
            return call(*args)
        left[0] -= 1
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            out = call(*args)
        for ev in prof.key_averages():
            if ev.key.startswith("kiln:"):
                calls, ms = info["times"].get(ev.key, (0, 0.0))
                info["times"][ev.key] = (calls + ev.count, ms + ev.cpu_time_total / 1e3)
        if left[0] == 0:
            write_index()
        return out

    return run


# --- the page -------------------------------------------------------------------------------------
_STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin-bottom: 1.5em; }
th, td { border: 1px solid #bbb; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #eee; }
pre { background: #f6f6f6; padding: 6px; margin: 0; font-size: 12px; }
code { background: #f0f0f0; }
.num { text-align: right; }
"""


def _e(x):
    return html.escape(str(x))


def _table(section_id, headers, rows):
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    if not rows:
        body = f'<tr><td colspan="{len(headers)}">none</td></tr>'
    return f'<table id="{section_id}"><tr>{head}</tr>{body}</table>'


def _pre(text, summary):
    return f"<details><summary>{_e(summary)}</summary><pre>{_e(text)}</pre></details>"


def render(report=None):
    """index.html of a report."""
    r = report or REPORT
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>kiln debug report</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>kiln debug report</h1>",
        f"<p>Started {_e(r.started)}. {len(r.frames)} frames, {len(r.graphs)} compiled graphs, "
        f"{len(r.breaks)} graph breaks, {len(r.recompiles)} recompiles.</p>",
        "<h2>Frames</h2>",
        _table(
            "frames",
            ["function", "defined at", "entry", "graph", "guards", "files"],
            [
                [
                    _e(f["name"]),
                    _e(f["where"]),
                    _e(f["entry"]),
                    _pre(f["graph"], "graph code") if f["graph"] else "no graph",
                    _pre(f["guards"], "guards"),
                    f'<a href="{_e(f["folder"])}/">{_e(f["folder"])}</a>',
                ]
                for f in r.frames
            ],
        ),
        "<h2>Graph breaks</h2>",
        _table(
            "breaks",
            ["function", "reason", "at", "source line"],
            [
                [_e(b["fn"]), _e(b["reason"]), _e(b["where"]), f"<code>{_e(b['source'])}</code>"]
                for b in r.breaks
            ],
        ),
        "<h2>Recompiles</h2>",
        _table(
            "recompiles",
            ["function", "defined at", "guards that failed"],
            [
                [_e(c["fn"]), _e(c["where"]), _pre("\n".join(c["reasons"]), "reasons")]
                for c in r.recompiles
            ],
        ),
        "<h2>Compiled graphs</h2>",
        _table(
            "graphs",
            ["#", "frame", "kind", "nodes", "kernels", "ops run by ATen fallback", "files"],
            [
                [
                    _e(g["id"]),
                    _e(g["frame"]),
                    _e(g["kind"]),
                    f'<span class="num">{g["nodes"]}</span>',
                    f'<span class="num">{len(g["kernels"])}</span>',
                    _e(", ".join(map(str, g["externs"])) or "-"),
                    " ".join(f'<a href="{_e(p)}">{_e(n)}</a>' for n, p in g["files"].items())
                    + (f"<br>no run.py: {_e(g['run_error'])}" if g["run_error"] else ""),
                ]
                for g in r.graphs
            ],
        ),
        "<h2>Kernels</h2>",
    ]
    rows = []
    for g in r.graphs:
        if g["times"]:
            for label, (calls, ms) in sorted(g["times"].items(), key=lambda kv: -kv[1][1]):
                rows.append(
                    [
                        _e(g["id"]),
                        _e(label),
                        f'<span class="num">{calls}</span>',
                        f'<span class="num">{ms:.3f}</span>',
                    ]
                )
        else:
            for k in g["kernels"]:
                rows.append([_e(g["id"]), _e(k), "", ""])
    parts.append(_table("kernels", ["graph", "kernel", "calls", "total ms"], rows))
    if not config.profile_kernels:
        parts.append("<p>Kernel times: run with KILN_PROFILE_KERNELS=1.</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_index():
    """Write <debug_dir>/index.html."""
    if not config.debug_dir:
        return
    os.makedirs(config.debug_dir, exist_ok=True)
    path = os.path.join(config.debug_dir, "index.html")
    with open(path + ".tmp", "w") as f:
        f.write(render())
    os.replace(path + ".tmp", path)
