"""The minifier: write repro.py when a compile fails, then shrink it to the smallest failing graph.

    KILN_REPRO_AFTER=aot      an exception in the code generator (the ATen graph after AOT autograd)
    KILN_REPRO_AFTER=backend  an exception in the backend (the frontend's torch-level graph)
    KILN_REPRO_LEVEL=accuracy also: compiled outputs that differ from eager beyond the tolerance
    python -m kiln minify repro.py [--out small.py]

Note [Minifier: delta debugging over nodes]
A candidate is a subset of the graph's compute nodes. It becomes a graph of its own: a value a
kept node reads from a dropped node becomes an input of the same metadata (the value the full
graph computed there, recorded once by running it eagerly), graph inputs stay inputs, and every
kept node nobody kept reads is an output, so nothing is dead. A candidate "still fails" when its
check (kiln/tools/repro.py) fails the same way: the same exception type, or any accuracy failure.
Every compile costs a C++ build, so the search starts with two binary searches that assume the
failure sits at one place: the shortest failing prefix of the nodes (in graph order), then the
latest start that still fails with that end. Classic ddmin (drop chunks, halve them until single
nodes) then removes whatever else can go. The inputs of the result are exactly what its nodes
read.
"""

import argparse
import os
import sys

import torch
import torch.fx

from kiln import config, logs
from kiln.export.fx_text import graph_to_text
from kiln.tools.repro import (
    Repro,
    _flat,
    check,
    constants_of,
    current_settings,
    load_script,
    script_text,
    spec_of,
    write_script,
)

# --- writing repro.py -----------------------------------------------------------------------------


def repro_path():
    """Where repro.py goes: config.repro_dir, else the current directory."""
    folder = config.repro_dir or os.getcwd()
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, "repro.py")


def write_repro(gm, example_inputs, level, backend="kiln", why=""):
    """Write repro.py for a failing graph and say so on stderr; returns its path (or None)."""
    accuracy = config.repro_level == "accuracy"
    settings = current_settings(backend=backend, accuracy=accuracy)
    path = repro_path()
    try:
        write_script(path, gm, example_inputs, level, settings)
    except Exception as e:
        logs.warn("kiln: could not write a repro for this graph (%s: %s)", type(e).__name__, e)
        return None
    logs.warn(
        "kiln: %s; wrote %s (shrink it: python -m kiln minify %s)", why or "failure", path, path
    )
    return path


def _fresh(example_inputs):
    """Inputs of the same metadata with random values (fake example inputs have none)."""
    g = torch.Generator().manual_seed(0)
    out = []
    for x in example_inputs:
        spec = spec_of(x)
        out.append(spec.make(g) if hasattr(spec, "make") else spec)
    return out


def accuracy_failure(gm, compiled, example_inputs):
    """Why compiled(inputs) differs from gm(inputs) beyond the tolerance, or None."""
    inputs = _fresh(example_inputs)
    clones = [
        x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x
        for x in inputs
    ]
    try:
        expected = _flat(gm(*inputs))
        got = _flat(compiled(*clones))
    except Exception as e:
        return f"running it raised {type(e).__name__}: {e}"
    tol = current_settings()["tolerance"]
    for i, (a, b) in enumerate(zip(got, expected)):
        a, b = a.detach().float(), b.detach().float()
        if a.shape != b.shape or not torch.allclose(a, b, rtol=tol, atol=tol, equal_nan=True):
            return f"output {i} differs from eager"
    return None


def backend_with_repro(backend, backend_name):
    """KILN_REPRO_AFTER=backend: the backend, writing repro.py when it raises (or is inaccurate)."""

    def run(gm, example_inputs):
        saved = config.raise_on_backend_error
        config.raise_on_backend_error = True  # the code generator raises instead of falling back
        try:
            compiled = backend(gm, example_inputs)
        except Exception as e:
            write_repro(
                gm, example_inputs, "backend", backend_name, f"backend raised {type(e).__name__}"
            )
            raise
        finally:
            config.raise_on_backend_error = saved
        if config.repro_level == "accuracy":
            why = accuracy_failure(gm, compiled, example_inputs)
            if why:
                write_repro(gm, example_inputs, "backend", backend_name, f"accuracy: {why}")
        return compiled

    return run


def after_aot(gm, example_inputs, compiled=None, error=None):
    """KILN_REPRO_AFTER=aot: called by compile_aten_graph with its result or its exception."""
    if error is not None:
        write_repro(gm, example_inputs, "aot", why=f"code generator raised {type(error).__name__}")
    elif config.repro_level == "accuracy":
        with torch.no_grad():
            why = accuracy_failure(gm, compiled, example_inputs)
        if why:
            write_repro(gm, example_inputs, "aot", why=f"accuracy: {why}")


# --- shrinking ------------------------------------------------------------------------------------


def _values(gm, inputs):
    """{node: the value it computed} for a run of gm on inputs."""
    values = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            out = super().run_node(n)
            values[n] = out
            return out

    with torch.no_grad():
        Recorder(gm).run(*inputs)
    return values


class Shrinker:
    """Candidates of a repro's graph, and whether they still fail (Note [Minifier: ...])."""

    def __init__(self, repro, log=None):
        self.repro = repro
        self.gm = repro.graph_module()
        self.inputs = repro.make_inputs()
        self.nodes = [n for n in self.gm.graph.nodes if n.op not in ("placeholder", "output")]
        self.values = _values(self.gm, self.inputs)
        self.log = log or (lambda msg: None)
        self.checks = 0
        self.kind = None
        self._seen = {}

    def build(self, keep):
        """(GraphModule, inputs) of the kept nodes, or None when a cut value cannot be an input."""
        keep = set(keep)
        graph = torch.fx.Graph()
        env, inputs = {}, []

        def read(a):
            if not isinstance(a, torch.fx.Node):
                return a
            if a in env:
                return env[a]
            v = self.values[a]
            if not isinstance(v, torch.Tensor | int | float | bool):
                raise _NotAnInput
            p = graph.placeholder(a.name if a.op == "placeholder" else f"{a.name}_in")
            env[a] = p
            inputs.append(v.clone() if isinstance(v, torch.Tensor) else v)
            return p

        try:
            for n in self.nodes:
                if n in keep:
                    args = torch.fx.node.map_arg(n.args, read)
                    kwargs = torch.fx.node.map_arg(n.kwargs, read)
                    env[n] = graph.create_node(n.op, n.target, args, kwargs, name=n.name)
        except _NotAnInput:
            return None
        outs = [
            env[n]
            for n in self.nodes
            if n in keep
            and isinstance(self.values[n], torch.Tensor)
            and not any(u in keep for u in n.users)
        ]
        if not outs:
            return None
        graph.output(tuple(outs))
        root = self.gm
        return torch.fx.GraphModule(root, graph), inputs

    def fails(self, keep):
        key = frozenset(keep)
        if key in self._seen:
            return self._seen[key]
        built = self.build(keep)
        result = False
        if built is not None:
            self.checks += 1
            why = check(built[0], built[1], self.repro.level, self.repro.settings)
            kind = why.split(":")[0] if why else None
            result = why is not None and (self.kind is None or kind == self.kind)
            self.log(f"  check {self.checks}: {len(keep)} nodes -> {'fails' if result else 'ok'}")
        self._seen[key] = result
        return result

    def shrink(self):
        """The smallest failing list of nodes found (Note [Minifier: delta debugging ...])."""
        why = check(self.gm, self.inputs, self.repro.level, self.repro.settings)
        if why is None:
            raise SystemExit("kiln minify: the repro does not fail; nothing to shrink")
        self.kind = why.split(":")[0]
        self.log(f"kiln minify: {len(self.nodes)} nodes fail with {why.splitlines()[0]}")
        nodes = self.nodes
        lo, hi = 1, len(nodes)  # shortest failing prefix
        while lo < hi:
            mid = (lo + hi) // 2
            if self.fails(nodes[:mid]):
                hi = mid
            else:
                lo = mid + 1
        end = hi if self.fails(nodes[:hi]) else len(nodes)
        lo, hi = 0, end - 1  # latest start that still fails with that end
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.fails(nodes[mid:end]):
                lo = mid
            else:
                hi = mid - 1
        current = nodes[lo:end] if self.fails(nodes[lo:end]) else nodes
        return self.ddmin(list(current))

    def ddmin(self, current):
        n = 2
        while len(current) >= 2:
            size = max(len(current) // n, 1)
            chunks = [current[i : i + size] for i in range(0, len(current), size)]
            reduced = False
            for chunk in chunks:
                rest = [x for x in current if x not in chunk]
                if rest and self.fails(rest):
                    current, n, reduced = rest, max(n - 1, 2), True
                    break
            if not reduced:
                if size == 1:
                    break
                n = min(n * 2, len(current))
        return current


class _NotAnInput(Exception):
    pass


def minify(path, out=None, log=print):
    """Shrink the repro at `path`; save the result beside it (or at `out`); returns (path, gm)."""
    repro = load_script(path)
    shrinker = Shrinker(repro, log)
    keep = shrinker.shrink()
    gm, inputs = shrinker.build(keep)
    out = out or os.path.splitext(path)[0] + "_min.py"
    consts = {}
    text = graph_to_text(gm)
    specs = [spec_of(x) for x in inputs]
    const_file = None
    consts = constants_of(gm)
    if consts:
        const_file = os.path.basename(out) + ".pt"
        torch.save(consts, os.path.join(os.path.dirname(out) or ".", const_file))
    with open(out, "w") as f:
        f.write(script_text(text, specs, repro.level, repro.settings, const_file))
    nodes = len(keep)
    log(
        f"kiln minify: {len(shrinker.nodes)} -> {nodes} node{'s' * (nodes != 1)} "
        f"in {shrinker.checks} checks; saved {out}"
    )
    log(gm.code.strip())
    return out, gm


def main(argv):
    """`python -m kiln minify repro.py [--out FILE]`."""
    p = argparse.ArgumentParser(prog="kiln minify", description=__doc__.splitlines()[0])
    p.add_argument(
        "repro", help="a repro.py written under KILN_REPRO_AFTER (or a debug-dir run.py)"
    )
    p.add_argument("--out", default=None, help="where to save the result (default <repro>_min.py)")
    args = p.parse_args(argv)
    minify(args.repro, args.out)
    return 0


__all__ = ["Repro", "minify", "write_repro", "backend_with_repro", "after_aot", "main"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
