"""The compilers `kiln bench` compares: eager (the baseline), kiln.compile and torch.compile.

Each is an adapter with one interface: `available()` (a reason when not), `compile(model)`,
`reset()` (drop in-memory compiled code; on-disk caches stay) and `counts()` (graphs and graph
breaks since the last reset). Names on the command line: "eager", "kiln" (kiln.compile with
--backend), "kiln:<backend>", "torch.compile" (inductor), "torch.compile:<backend>".
"""

import contextlib
import importlib


def _first_line(e):
    text = f"{type(e).__name__}: {e}".strip()
    return text.splitlines()[0] if text else type(e).__name__


class Eager:
    """The baseline: the model as it is."""

    kind = "eager"

    def __init__(self, name="eager"):
        self.name = name

    def available(self):
        return ""

    def compile(self, model):
        return model

    def reset(self):
        pass

    def counts(self):
        return None, None

    def break_reason(self):
        return ""


@contextlib.contextmanager
def kiln_bench_config():
    """kiln's settings while benchmarking, restored afterwards.

    A kiln failure must show in the table (config.strict), not fall back to eager
    silently.
    """
    try:
        from kiln import config
    except Exception:
        yield
        return
    saved = config.strict
    config.strict = True
    try:
        yield
    finally:
        config.strict = saved


class Kiln:
    """`kiln.compile(model, backend=...)`; counts from `kiln.counters`."""

    kind = "kiln"

    def __init__(self, name="kiln", backend="kiln", mode=None):
        self.name = name
        self.backend = backend
        self.mode = mode

    def available(self):
        try:
            kiln = importlib.import_module("kiln")
        except Exception as e:
            return f"import kiln failed: {_first_line(e)}"
        if not callable(getattr(kiln, "compile", None)):
            return "kiln.compile is not implemented yet"
        try:
            kiln.lookup_backend(self.backend)
        except Exception as e:
            return f"backend {self.backend!r}: {_first_line(e)}"
        return ""

    def compile(self, model):
        import kiln

        return kiln.compile(model, backend=self.backend, mode=self.mode)

    def reset(self):
        import kiln

        if callable(getattr(kiln, "reset", None)):
            kiln.reset()
        kiln.counters.clear()

    def counts(self):
        import kiln

        c = kiln.counters
        graphs = c["stats"].get("unique_graphs", 0)
        breaks = sum(c["graph_break"].values()) + sum(c["graph_breaks"].values())
        return graphs, breaks

    def break_reason(self):
        import kiln

        return _most_common(kiln.counters["graph_breaks"] + kiln.counters["graph_break"])


class TorchCompile:
    """`torch.compile(model, backend=...)` (inductor by default); counts from dynamo's counters."""

    kind = "torch.compile"

    def __init__(self, name="torch.compile", backend="inductor", mode=None):
        self.name = name
        self.backend = backend
        self.mode = mode

    def available(self):
        try:
            import torch._dynamo  # noqa: F401
        except Exception as e:
            return f"torch._dynamo not importable: {_first_line(e)}"
        return ""

    def compile(self, model):
        import torch

        return torch.compile(model, backend=self.backend, mode=self.mode)

    def reset(self):
        import torch._dynamo
        from torch._dynamo.utils import counters

        torch._dynamo.reset()
        counters.clear()

    def counts(self):
        from torch._dynamo.utils import counters

        return counters["stats"].get("unique_graphs", 0), sum(counters["graph_break"].values())

    def break_reason(self):
        from torch._dynamo.utils import counters

        return _most_common(counters["graph_break"])


def _most_common(counter):
    """The first line of the most frequent graph-break reason, or ""."""
    if not counter:
        return ""
    reason, _ = max(counter.items(), key=lambda kv: kv[1])
    return str(reason).strip().splitlines()[0][:160] if str(reason).strip() else ""


def parse_compare(spec, kiln_backend="kiln"):
    """Compiler adapters from "eager,kiln,kiln:aot_eager,torch.compile,kiln@reduce-overhead"
    (`@mode`: a compile mode); eager always first."""
    compilers = [Eager()]
    for item in (s.strip() for s in spec.split(",")):
        if not item or item == "eager":
            continue
        item, _, mode = item.partition("@")
        suffix = f"@{mode}" if mode else ""
        mode = mode or None
        head, _, backend = item.partition(":")
        if head == "kiln":
            backend = backend or kiln_backend
            label = ("kiln" if backend == "kiln" else f"kiln:{backend}") + suffix
            compilers.append(Kiln(label, backend, mode))
        elif head in ("torch.compile", "torch", "inductor"):
            label = "torch.compile" + (f":{backend}" if backend and backend != "inductor" else "")
            compilers.append(TorchCompile(label + suffix, backend or "inductor", mode))
        else:
            raise ValueError(
                f"unknown compiler {item!r}; use eager, kiln[:backend], torch.compile[:backend]"
            )
    names = [c.name for c in compilers]
    if len(set(names)) != len(names):
        raise ValueError(f"--compare names a compiler twice: {names}")
    return compilers
