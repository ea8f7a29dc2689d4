"""kiln.explain(fn)(*args): run once under capture and report graphs, ops, breaks and guards."""

from kiln import api
from kiln.frontend import frame_cache as _cache
from kiln.frontend.user_errors import hint_for


class ExplainOutput:
    """What one explained call captured; prints as a readable report."""

    def __init__(self):
        self.graphs = []
        self.breaks = []
        self.guards = []
        self.entries = []

    @property
    def graph_count(self):
        return len(self.graphs)

    @property
    def graph_break_count(self):
        return len(self.breaks)

    @property
    def break_reasons(self):
        return [(b.reason, b.user_location) for b in self.breaks]

    @property
    def ops_per_graph(self):
        return [
            [n.target for n in gm.graph.nodes if n.op in ("call_function", "call_method")]
            for gm in self.graphs
        ]

    def on_graph(self, gm, fn):
        self.graphs.append(gm)

    def on_break(self, record):
        self.breaks.append(record)

    def on_entry(self, entry):
        self.entries.append(entry)
        self.guards.append(entry.guard.source)

    def __str__(self):
        lines = [f"Graph count: {self.graph_count}", f"Graph break count: {self.graph_break_count}"]
        for i, ops in enumerate(self.ops_per_graph):
            names = [getattr(o, "__name__", str(o)) for o in ops]
            lines.append(f"Graph {i}: {len(ops)} ops: {', '.join(names)}")
            lines.extend("    " + line for line in self.graphs[i].code.strip().splitlines())
        if self.breaks:
            lines.append("Break reasons:")
            for i, b in enumerate(self.breaks):
                lines.append(f"  {i + 1}. {b.reason}\n     at {b.user_location}")
                hint = hint_for(b.reason)
                if hint:
                    lines.append(f"     hint: {hint}")
        for i, g in enumerate(self.guards):
            lines.append(f"Guards of entry {i}:")
            lines.extend("    " + line for line in g.strip().splitlines())
        return "\n".join(lines)

    __repr__ = __str__


def explain(fn, **compile_kwargs):
    """A function that runs `fn` once under a fresh compile and returns an ExplainOutput."""
    compile_kwargs.setdefault("backend", "eager")

    def run(*args, **kwargs):
        out = ExplainOutput()
        compiled = api.compile(fn, **compile_kwargs)
        _cache._recorders.append(out)
        try:
            compiled(*args, **kwargs)
        finally:
            _cache._recorders.remove(out)
        return out

    return run
