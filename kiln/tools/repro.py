"""Standalone scripts that rebuild one graph and its inputs and run it through kiln.

    write_script(path, gm, example_inputs, level="aot")   # debug-dir run.py, minifier repro.py
    python run.py            # compile and run the graph, compare with eager; exit 1 on failure
    python -m kiln minify repro.py

Note [Repro: what a script holds]
A script holds the graph as FX code (kiln.export.fx_text: read back without running it), one
InputSpec per input (sizes, strides, dtype, device, requires_grad; inputs get random values of
that metadata, ints their value), the level it runs at and the kiln settings that matter. Graph
constants (get_attr tensors) are saved beside it in `<script>.pt` as plain tensors. The levels:
  "aot"      an ATen graph as the code generator receives it (after AOT autograd): kiln's tracer
             re-records it and `compile_aten_graph` compiles it (config.raise_on_backend_error on);
  "backend"  a torch-level graph as the frontend hands it to a backend: the backend named in the
             settings compiles it (for "kiln": AOT autograd, then the code generator).
A script fails when compiling or running raises, or, with `accuracy`, when an output differs
from the eager graph's beyond the tolerance.
"""

import dataclasses
import os
import runpy
import sys

import torch
import torch.fx

from kiln import config
from kiln.api import lookup_backend
from kiln.autograd.aten_tracer import trace_aten
from kiln.backend.compile_fx import compile_aten_graph
from kiln.export.fx_text import graph_module, graph_to_text
from kiln.symbolic.shape_env import SymNode, from_torch

SETTINGS = ("cpp_compiler", "cpp_flags", "conv_channels_last", "partitioner", "fallback_random")


@dataclasses.dataclass
class InputSpec:
    """The metadata of one tensor input; `make()` builds one with random values."""

    shape: tuple
    stride: tuple
    dtype: str
    device: str = "cpu"
    requires_grad: bool = False

    def make(self, generator=None):
        dtype = getattr(torch, self.dtype)
        size = 1 + sum((s - 1) * st for s, st in zip(self.shape, self.stride))
        if any(s == 0 for s in self.shape):
            size = 0
        if dtype.is_floating_point or dtype.is_complex:
            flat = torch.randn(size, dtype=dtype, generator=generator)
        elif dtype == torch.bool:
            flat = torch.randint(0, 2, (size,), generator=generator).bool()
        else:
            flat = torch.randint(0, 8, (size,), dtype=dtype, generator=generator)
        t = flat.to(self.device).as_strided(self.shape, self.stride)
        if self.requires_grad:
            t = t.detach().requires_grad_()
        return t


def _hint(s):
    if isinstance(s, torch.SymInt):
        node = from_torch(s)
        return int(node.hint) if isinstance(node, SymNode) else int(s)
    return int(s)


def spec_of(x):
    """An InputSpec for a tensor (real or fake, symbolic sizes at their hints); other values as is."""
    if isinstance(x, torch.Tensor):
        return InputSpec(
            tuple(_hint(s) for s in x.shape),
            tuple(_hint(s) for s in x.stride()),
            str(x.dtype).removeprefix("torch."),
            x.device.type,
            bool(x.requires_grad),
        )
    if isinstance(x, torch.SymInt):
        return _hint(x)
    if isinstance(x, torch.SymFloat):
        return float(x.node.hint) if hasattr(x.node, "hint") else float(x)
    return x


def constants_of(gm):
    """{get_attr target: tensor} of a graph module."""
    out = {}
    for n in gm.graph.nodes:
        if n.op == "get_attr":
            v = gm
            for p in n.target.split("."):
                v = getattr(v, p)
            out[n.target] = v.detach() if isinstance(v, torch.Tensor) else v
    return out


def script_text(text, inputs, level, settings, const_file=None):
    """The source of a repro script (Note [Repro: what a script holds])."""
    lines = [
        '"""kiln repro: rebuild the graph and its inputs, compile and run it, compare with eager.',
        "",
        "    python THIS.py               # exit 0: it works; 1: it fails (printed)",
        "    python -m kiln minify THIS.py",
        '"""',
        "",
        "from kiln.tools.repro import InputSpec, main",
        "",
        f"LEVEL = {level!r}",
        f"SETTINGS = {settings!r}",
        f"CONSTANTS = {const_file!r}  # get_attr tensors, saved beside this script",
        "INPUTS = [",
    ]
    lines += [f"    {spec!r}," for spec in inputs]
    readable = '"""' not in text and "\\" not in text
    graph = f'"""\\\n{text}"""' if readable else repr(text)
    lines += ["]", "", "# the graph as FX code (kiln.export.fx_text reads it without running it)"]
    lines += [
        f"GRAPH = {graph}",
        "",
        'if __name__ == "__main__":',
        "    raise SystemExit(main(__file__))",
        "",
    ]
    return "\n".join(lines)


def current_settings(backend="kiln", accuracy=False, tolerance=1e-4):
    out = {name: getattr(config, name) for name in SETTINGS}
    out.update(backend=backend, accuracy=accuracy, tolerance=tolerance)
    return out


def write_script(path, gm, example_inputs, level="aot", settings=None):
    """Write a repro script for gm (Note [Repro: what a script holds]); returns its path."""
    text = graph_to_text(gm)
    consts = constants_of(gm)
    const_file = None
    if consts:
        const_file = os.path.basename(path) + ".pt"
        torch.save(consts, os.path.join(os.path.dirname(path) or ".", const_file))
    specs = [spec_of(x) for x in example_inputs]
    src = script_text(text, specs, level, settings or current_settings())
    with open(path, "w") as f:
        f.write(src)
    return path


@dataclasses.dataclass
class Repro:
    """A loaded repro script."""

    text: str
    inputs: list
    level: str
    settings: dict
    constants: dict

    def graph_module(self):
        return graph_module(self.text, self.constants)

    def make_inputs(self, seed=0):
        g = torch.Generator().manual_seed(seed)
        return [s.make(g) if isinstance(s, InputSpec) else s for s in self.inputs]


def load_script(path):
    """The Repro of a script file (its module-level GRAPH, INPUTS, LEVEL, SETTINGS, CONSTANTS)."""
    ns = runpy.run_path(path, run_name="kiln_repro")
    consts = {}
    if ns.get("CONSTANTS"):
        consts = torch.load(
            os.path.join(os.path.dirname(os.path.abspath(path)), ns["CONSTANTS"]),
            weights_only=True,
        )
    return Repro(ns["GRAPH"], list(ns["INPUTS"]), ns["LEVEL"], dict(ns["SETTINGS"]), consts)


def _flat(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, list | tuple):
        return [t for o in out for t in _flat(o)]
    return []


def compile_at_level(gm, inputs, level, settings):
    """The compiled callable of gm at a level (raises what the compiler raises)."""
    saved = {k: getattr(config, k) for k in (*SETTINGS, "raise_on_backend_error")}
    try:
        for k in SETTINGS:
            if k in settings:
                setattr(config, k, settings[k])
        config.raise_on_backend_error = True
        if level == "aot":
            aten = trace_aten(gm, list(inputs))
            return compile_aten_graph(aten, list(inputs))
        return lookup_backend(settings.get("backend", "kiln"))(gm, list(inputs))
    finally:
        for k, v in saved.items():
            setattr(config, k, v)


def check(gm, inputs, level, settings):
    """None when gm compiles, runs and (with settings["accuracy"]) matches eager; else why not."""
    try:
        with torch.no_grad() if level == "aot" else torch.enable_grad():
            expected = _flat(gm(*inputs))
            compiled = compile_at_level(gm, inputs, level, settings)
            got = _flat(compiled(*inputs))
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    if settings.get("accuracy"):
        if len(got) != len(expected):
            return f"accuracy: {len(got)} outputs, eager has {len(expected)}"
        tol = settings.get("tolerance", 1e-4)
        for i, (a, b) in enumerate(zip(got, expected)):
            if a.shape != b.shape or not torch.allclose(
                a.detach().float(), b.detach().float(), rtol=tol, atol=tol, equal_nan=True
            ):
                diff = (a.detach().float() - b.detach().float()).abs().max().item()
                return f"accuracy: output {i} differs from eager (max abs diff {diff:.3g})"
    return None


def main(path):
    """`python repro.py`: run the check, print the result; 0 when it works, 1 when it fails."""
    repro = load_script(path)
    gm = repro.graph_module()
    why = check(gm, repro.make_inputs(), repro.level, repro.settings)
    nodes = sum(1 for n in gm.graph.nodes if n.op not in ("placeholder", "output"))
    if why is None:
        print(f"kiln repro: {nodes} nodes at level {repro.level!r}: compiled and ran, no failure")
        return 0
    print(f"kiln repro: {nodes} nodes at level {repro.level!r} fail: {why}", file=sys.stderr)
    return 1
