"""kiln.export: the whole program as one graph, with its input/output specs and its state.

    prog = kiln.export(model, (x,), dynamic_shapes={"x": {0: kiln.export.Dim("batch", max=64)}})
    print(prog)                        # signature, symbols and guards, the graph as FX code
    prog(x2); prog.module()(x2)        # runs (inputs are checked against the specs)
    fast = prog.compile("kiln")        # any backend, on the exported graph
    kiln.save(prog, "m.kiln"); kiln.load("m.kiln")     # kiln/export/serialize.py

Note [Export: capture]
kiln's frontend runs the call once with a recorder (as kiln.explain does) and a backend that
keeps the graph: every graph break is collected, so the error lists all of them with their
reasons and source lines, not only the first. Without a break there is one graph, whose
placeholders carry their sources; each is matched by identity to a parameter or buffer of the
module (state), a leaf of the flattened (args, kwargs) (an input), or else kept as a constant.
The outputs are matched the same way: each leaf of the value the call returned is a graph output,
an input leaf, or a Python constant (an int the graph returns, a symbolic size, is matched by
its value). The run may mutate the module (BatchNorm statistics in
training mode): its state is saved before and put back after.

Note [Export: symbolic dims]
`dynamic_shapes` mirrors the arguments (a dict by parameter name, or a tuple by position) with
{dim: Dim} per tensor; those dims are marked dynamic before the run, so the graph reads their
sizes (`x.size(0)`). The frontend's shape environment then holds a symbol per dim and the facts
the graph relies on (`s0 >= 2`, divisibility ...): they are kept as text over the Dim names and
checked, with each Dim's range, on every call. Non-tensor leaves were specialised by the
frontend, so a call must pass the same value.
"""

import ast
import dataclasses
import inspect
import math

import sympy
import torch
import torch.fx
from torch.utils import _pytree as pytree

from kiln import api
from kiln.contracts import GraphMeta
from kiln.exc import KilnError
from kiln.frontend import frame_cache, frame_shapes
from kiln.frontend.guards import eval_sources
from kiln.frontend.user_errors import hint_for


class ExportError(KilnError):
    """The program cannot be exported as one graph (every reason listed)."""

    def __init__(self, msg, breaks=()):
        super().__init__(msg)
        self.breaks = list(breaks)  # the graph breaks that stopped it (none: another reason)


class InputError(KilnError):
    """Inputs that violate an exported program's specs."""


@dataclasses.dataclass(frozen=True)
class Dim:
    """A dynamic dimension: a name and an inclusive range (min at least 2: 0 and 1 specialise)."""

    name: str
    min: int = 2
    max: int = 2**31 - 1


@dataclasses.dataclass
class TensorMeta:
    """An input leaf's spec: dtype, device, and per dim an int or a Dim name."""

    dtype: str
    device: str
    shape: list
    requires_grad: bool = False
    example: list = None  # the sizes export saw (package=True compiles for them)

    def example_tensor(self):
        """A tensor of this spec at the export's sizes (random values)."""
        dtype = getattr(torch, self.dtype)
        size = self.example or [s if isinstance(s, int) else 2 for s in self.shape]
        if dtype.is_floating_point:
            return torch.randn(size, dtype=dtype, device=self.device)
        return torch.zeros(size, dtype=dtype, device=self.device)


@dataclasses.dataclass
class ExportedProgram:
    """One graph, the roles of its placeholders, the pytree specs and the state it reads."""

    graph_module: torch.fx.GraphModule
    placeholders: list  # per placeholder: ["state", name] | ["input", leaf index]
    in_spec: object  # TreeSpec of (args, kwargs)
    in_meta: list  # per input leaf: TensorMeta | ["const", value]
    outputs: list  # per output leaf: ["graph", k] | ["input", leaf] | ["const", value]
    out_spec: object
    state: dict  # name -> tensor (parameters, buffers, constants)
    parameters: list  # names in state that are parameters
    dims: dict  # Dim name -> [min, max]
    guards: list  # shape facts over Dim names, as text ("batch >= 2")

    # --- running ----------------------------------------------------------------------------
    def check_inputs(self, flat):
        """Raise InputError naming the first way `flat` leaves break the specs."""
        if len(flat) != len(self.in_meta):
            raise InputError(f"expected {len(self.in_meta)} input leaves, got {len(flat)}")
        sizes = {}
        for i, (x, meta) in enumerate(zip(flat, self.in_meta)):
            where = f"input leaf {i}"
            if isinstance(meta, list):
                if x != meta[1] or type(x) is not type(meta[1]):
                    raise InputError(f"{where}: exported with the constant {meta[1]!r}, got {x!r}")
                continue
            if not isinstance(x, torch.Tensor):
                raise InputError(f"{where}: expected a tensor, got {type(x).__name__}")
            if str(x.dtype).removeprefix("torch.") != meta.dtype:
                raise InputError(f"{where}: expected dtype {meta.dtype}, got {x.dtype}")
            if x.device.type != meta.device:
                raise InputError(f"{where}: expected device {meta.device}, got {x.device}")
            if x.dim() != len(meta.shape):
                raise InputError(
                    f"{where}: expected {len(meta.shape)} dims, got shape {tuple(x.shape)}"
                )
            for d, (got, want) in enumerate(zip(x.shape, meta.shape)):
                if isinstance(want, int):
                    if got != want:
                        raise InputError(
                            f"{where}: dim {d} is static {want} in the exported program, got {got} "
                            f"(export with dynamic_shapes to vary it)"
                        )
                    continue
                lo, hi = self.dims[want]
                if not lo <= got <= hi:
                    raise InputError(f"{where}: dim {d} ({want}) = {got} is outside [{lo}, {hi}]")
                if sizes.setdefault(want, got) != got:
                    raise InputError(
                        f"{where}: dim {d} ({want}) = {got}, but {want} = {sizes[want]} elsewhere"
                    )
        for g in self.guards:
            if not eval_guard(g, sizes):
                values = ", ".join(f"{k}={v}" for k, v in sizes.items())
                raise InputError(f"inputs violate the exported guard {g} ({values})")

    def flat_inputs(self, args, kwargs):
        flat, spec = pytree.tree_flatten((tuple(args), dict(kwargs or {})))
        if spec != self.in_spec:
            raise InputError(
                f"inputs do not have the exported structure:\n  expected {self.in_spec}\n  got {spec}"
            )
        self.check_inputs(flat)
        return flat

    def graph_args(self, flat, state=None):
        state = self.state if state is None else state
        return [state[r[1]] if r[0] == "state" else flat[r[1]] for r in self.placeholders]

    def finish(self, flat, graph_out):
        leaves = []
        for kind, value in self.outputs:
            leaves.append(
                graph_out[value] if kind == "graph" else flat[value] if kind == "input" else value
            )
        return pytree.tree_unflatten(leaves, self.out_spec)

    def __call__(self, *args, **kwargs):
        flat = self.flat_inputs(args, kwargs)
        return self.finish(flat, self.graph_module(*self.graph_args(flat)))

    def module(self):
        """An nn.Module holding the state as parameters and buffers, running the graph."""
        return ExportedModule(self)

    def compile(self, backend="kiln"):
        """A callable running the graph compiled by `backend` (a name or a callable)."""
        fn = api.lookup_backend(backend)
        compiled = {}

        def run(*args, **kwargs):
            flat = self.flat_inputs(args, kwargs)
            graph_args = self.graph_args(flat)
            call = compiled.get("fn")
            if call is None:  # compiled at the first call, for its inputs' metadata
                call = compiled["fn"] = fn(self.graph_module, graph_args)
            return self.finish(flat, call(*graph_args))

        return run

    def example_inputs(self):
        """(args, kwargs) of the export's input sizes with random values."""
        flat = [m.example_tensor() if isinstance(m, TensorMeta) else m[1] for m in self.in_meta]
        args, kwargs = pytree.tree_unflatten(flat, self.in_spec)
        return args, kwargs

    # --- printing ---------------------------------------------------------------------------
    def __str__(self):
        lines = ["ExportedProgram:"]
        lines.append(f"  inputs: {self.in_spec}")
        for i, m in enumerate(self.in_meta):
            lines.append(f"    leaf {i}: {_describe(m)}")
        lines.append(f"  outputs: {self.out_spec}")
        lines.append(f"  state: {len(self.state)} tensors ({len(self.parameters)} parameters)")
        for name, (lo, hi) in self.dims.items():
            lines.append(f"  dim {name}: {lo} <= {name} <= {hi}")
        for g in self.guards:
            lines.append(f"  guard: {g}")
        lines.append("  graph:")
        lines.extend("    " + line for line in self.graph_module.code.strip().splitlines())
        return "\n".join(lines)

    __repr__ = __str__


def _describe(meta):
    if isinstance(meta, list):
        return f"constant {meta[1]!r}"
    shape = ", ".join(str(s) for s in meta.shape)
    return f"{meta.dtype}[{shape}] on {meta.device}"


class ExportedModule(torch.nn.Module):
    """`ExportedProgram.module()`: the state as parameters/buffers; forward runs the graph."""

    def __init__(self, program):
        super().__init__()
        self._program = program
        self._names = {}
        for i, (name, t) in enumerate(program.state.items()):
            attr = f"s{i}_" + "".join(c if c.isalnum() else "_" for c in name)
            self._names[name] = attr
            if name in program.parameters:
                self.register_parameter(
                    attr, torch.nn.Parameter(t.detach().clone(), t.requires_grad)
                )
            else:
                self.register_buffer(attr, t.detach().clone())

    def forward(self, *args, **kwargs):
        p = self._program
        flat = p.flat_inputs(args, kwargs)
        state = {name: getattr(self, attr) for name, attr in self._names.items()}
        return p.finish(flat, p.graph_module(*p.graph_args(flat, state)))


# --- guards as safe text ----------------------------------------------------------------------
def eval_guard(text, values):
    """Evaluate a guard over Dim values; only arithmetic, comparisons and Mod/Eq/... calls."""
    funcs = {
        "Mod": lambda a, b: a % b,
        "FloorDiv": lambda a, b: a // b,
        "floor": math.floor,
        "ceiling": math.ceil,
        "Max": max,
        "Min": min,
        "Eq": lambda a, b: a == b,
        "Ne": lambda a, b: a != b,
        "Ge": lambda a, b: a >= b,
        "Gt": lambda a, b: a > b,
        "Le": lambda a, b: a <= b,
        "Lt": lambda a, b: a < b,
    }
    bins = {
        ast.Add: lambda a, b: a + b,
        ast.Sub: lambda a, b: a - b,
        ast.Mult: lambda a, b: a * b,
        ast.FloorDiv: lambda a, b: a // b,
        ast.Mod: lambda a, b: a % b,
        ast.Div: lambda a, b: a / b,
        ast.Pow: lambda a, b: a**b,
    }
    cmps = {
        ast.Eq: lambda a, b: a == b,
        ast.NotEq: lambda a, b: a != b,
        ast.Lt: lambda a, b: a < b,
        ast.LtE: lambda a, b: a <= b,
        ast.Gt: lambda a, b: a > b,
        ast.GtE: lambda a, b: a >= b,
    }

    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, int | float):
            return n.value
        if isinstance(n, ast.Name):
            if n.id not in values:
                raise InputError(f"guard {text!r} names {n.id}, which no input provides")
            return values[n.id]
        if isinstance(n, ast.BinOp) and type(n.op) in bins:
            return bins[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -ev(n.operand)
        if isinstance(n, ast.Compare) and len(n.ops) == 1 and type(n.ops[0]) in cmps:
            return cmps[type(n.ops[0])](ev(n.left), ev(n.comparators[0]))
        if isinstance(n, ast.BoolOp):
            vals = [ev(v) for v in n.values]
            return all(vals) if isinstance(n.op, ast.And) else any(vals)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in funcs:
            return funcs[n.func.id](*[ev(a) for a in n.args])
        raise InputError(f"guard {text!r}: unsupported expression {ast.dump(n)[:60]}")

    return bool(ev(ast.parse(text, mode="eval")))


# --- capture ----------------------------------------------------------------------------------
class _Capture:
    """explain()-style recorder plus a backend that keeps the graph and its example inputs."""

    def __init__(self):
        self.graphs, self.breaks, self.entries, self.outputs = [], [], [], []

    def on_graph(self, gm, fn):
        pass

    def on_break(self, record):
        self.breaks.append(record)

    def on_entry(self, entry):
        self.entries.append(entry)

    def backend(self, gm, example_inputs):
        self.graphs.append((gm, list(example_inputs)))
        GraphMeta.update(gm, size_generic=True)  # it runs gm as it is, for any size

        def run(*args):
            out = gm(*args)
            self.outputs.append(out)
            return out

        return run


def _bind_names(fn, args, kwargs):
    """Parameter name -> argument value (for dynamic_shapes given by name)."""
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        bound = inspect.signature(target).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return {}
    return dict(bound.arguments)


def _mark_dims(fn, args, kwargs, dynamic_shapes):
    """Mark the dims dynamic_shapes names; returns {(id(tensor), dim): Dim}."""
    if dynamic_shapes is None:
        return {}
    if isinstance(dynamic_shapes, dict):
        values = _bind_names(fn, args, kwargs)
        pairs = [(values.get(k), v) for k, v in dynamic_shapes.items()]
        missing = [k for k in dynamic_shapes if k not in values]
        if missing:
            raise ExportError(f"dynamic_shapes names {missing}, which are not arguments")
    else:
        pairs = list(zip(args, dynamic_shapes))
    marks = {}

    def walk(value, spec):
        if spec is None:
            return
        if isinstance(value, torch.Tensor):
            for d, dim in spec.items():
                if not isinstance(dim, Dim):
                    raise ExportError(
                        f"dynamic_shapes: dim {d} must be a kiln.export.Dim, got {dim!r}"
                    )
                if dim.min < 2:
                    raise ExportError(
                        f"Dim {dim.name}: min must be >= 2 (sizes 0 and 1 specialise)"
                    )
                frame_shapes.mark_dynamic(value, d, promise=False)  # (its own check below)
                marks[(id(value), d)] = dim
        elif isinstance(value, list | tuple):
            for v, s in zip(value, spec):
                walk(v, s)
        elif isinstance(value, dict):
            for k, s in spec.items():
                walk(value[k], s)

    for value, spec in pairs:
        walk(value, spec)
    return marks


def _format_breaks(breaks):
    lines = [f"cannot export as one graph: {len(breaks)} graph break(s)"]
    for i, b in enumerate(breaks):
        lines.append(f"  {i + 1}. {b.reason}\n     at {b.user_location}")
        hint = hint_for(b.reason)
        if hint:
            lines.append(f"     hint: {hint}")
    return "\n".join(lines)


def export(fn, args, kwargs=None, dynamic_shapes=None):
    """Capture fn(*args, **kwargs) as one graph (Note [Export: capture])."""
    kwargs = dict(kwargs or {})
    args = tuple(args)
    module = fn if isinstance(fn, torch.nn.Module) else None
    named = {}
    params = set()
    if module is not None:
        for name, p in module.named_parameters(remove_duplicate=False):
            named.setdefault(id(p), name)
            params.add(name)
        for name, b in module.named_buffers(remove_duplicate=False):
            named.setdefault(id(b), name)
    saved = {k: v.detach().clone() for k, v in module.state_dict().items()} if module else {}
    marks = _mark_dims(fn, args, kwargs, dynamic_shapes)
    cap = _Capture()
    cap.call_args = (fn, *args) if module is not None else args
    cap.call_kwargs = kwargs
    compiled = api.compile(fn, backend=cap.backend, dynamic=None if marks else False)
    frame_cache._recorders.append(cap)
    try:
        result = compiled(*args, **kwargs)
    finally:
        frame_cache._recorders.remove(cap)
        if module is not None:
            with torch.no_grad():
                module.load_state_dict(saved, strict=False)
    if cap.breaks:
        raise ExportError(_format_breaks(cap.breaks), cap.breaks)
    if len(cap.graphs) != 1 or len(cap.outputs) != 1:
        raise ExportError(f"cannot export: the call made {len(cap.graphs)} graphs (expected one)")
    gm, examples = cap.graphs[0]
    cap.shape_env = gm.meta.get("shape_env")
    flat, in_spec = pytree.tree_flatten((args, kwargs))
    leaf_of = {id(x): i for i, x in enumerate(flat) if isinstance(x, torch.Tensor)}
    state, placeholders = {}, []
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, value in zip(phs, examples):
        if id(value) in leaf_of:
            placeholders.append(["input", leaf_of[id(value)]])
            new = f"arg{leaf_of[id(value)]}"
        elif id(value) in named:
            name = named[id(value)]
            state[name] = _snapshot(value)
            placeholders.append(["state", name])
            new = ("p_" if name in params else "b_") + name.replace(".", "_")
        elif isinstance(value, torch.Tensor):
            name = f"constant{len(state)}"
            state[name] = value.detach()
            placeholders.append(["state", name])
            new = "c_" + name
        else:
            raise ExportError(f"cannot export: graph input {node.name} is a {type(value).__name__}")
        node.target = new
        node.name = new
    for node in gm.graph.nodes:
        node.meta.pop("example_value", None)
        node.meta.pop("source", None)
    gm.meta.clear()
    gm.recompile()
    # outputs: match the returned leaves to the graph's outputs (Note [Export: capture])
    graph_out = {id(t): k for k, t in enumerate(cap.outputs[0]) if isinstance(t, torch.Tensor)}
    # sizes the graph returns (a symbolic dim's value): matched by value, as ints are shared
    graph_ints = {}
    for k, v in enumerate(cap.outputs[0]):
        if type(v) is int:
            graph_ints.setdefault(v, k)
    out_flat, out_spec = pytree.tree_flatten(result)
    outputs = []
    for leaf in out_flat:
        if id(leaf) in graph_out:
            outputs.append(["graph", graph_out[id(leaf)]])
        elif type(leaf) is int and leaf in graph_ints:
            outputs.append(["graph", graph_ints[leaf]])
        elif id(leaf) in leaf_of:
            outputs.append(["input", leaf_of[id(leaf)]])
        elif isinstance(leaf, torch.Tensor):
            raise ExportError("cannot export: an output tensor is not made by the graph")
        else:
            outputs.append(["const", leaf])
    in_meta, dims, guards = _input_specs(flat, marks, cap)
    return ExportedProgram(
        gm,
        placeholders,
        in_spec,
        in_meta,
        outputs,
        out_spec,
        state,
        sorted(params & set(state)),
        dims,
        guards,
    )


def _snapshot(t):
    """The program's own copy of a parameter or buffer (running it leaves the module alone)."""
    if isinstance(t, torch.nn.Parameter):
        return torch.nn.Parameter(t.detach().clone(), t.requires_grad)
    return t.detach().clone()


def _input_specs(flat, marks, cap):
    """Per leaf its TensorMeta or constant; the Dims' ranges; the shape guards over Dim names."""
    dims, in_meta = {}, []
    for x in flat:
        if isinstance(x, torch.Tensor):
            shape = []
            for d, s in enumerate(x.shape):
                dim = marks.get((id(x), d))
                if dim is not None:
                    if dim.name in dims and dims[dim.name] != [dim.min, dim.max]:
                        raise ExportError(f"Dim {dim.name} given two ranges")
                    dims[dim.name] = [dim.min, dim.max]
                shape.append(dim.name if dim is not None else int(s))
            in_meta.append(
                TensorMeta(
                    str(x.dtype).removeprefix("torch."),
                    x.device.type,
                    shape,
                    x.requires_grad,
                    [int(s) for s in x.shape],
                )
            )
        elif x is None or isinstance(x, int | float | bool | str):
            in_meta.append(["const", x])
        else:
            raise ExportError(f"cannot export an input leaf of type {type(x).__name__}")
    guards = []
    env = cap.shape_env
    if marks and env is not None:
        guards = _dim_guards(env, flat, marks, cap)
    return in_meta, dims, guards


def _dim_guards(env, flat, marks, cap):
    """The environment's facts over Dim names (Note [Export: symbolic dims])."""
    guard = cap.entries[0].guard
    bases = {}
    for sym, source in env.var_to_source.items():
        text = str(source)
        base, sep, dim = text.rpartition(".size()[")
        if sep and dim.endswith("]") and dim[:-1].isdigit():
            bases[sym] = (base, int(dim[:-1]))
    found = eval_sources(
        guard, cap.call_args, cap.call_kwargs, sorted({b for b, _ in bases.values()})
    )
    rename = {}
    for sym, (base, d) in bases.items():
        t = found.get(base)
        dim = marks.get((id(t), d)) if t is not None else None
        if dim is not None:
            rename[sym] = sympy.Symbol(dim.name, integer=True, positive=True)
    for sym, value in env.specialised().items():
        if sym in rename:
            raise ExportError(
                f"Dim {rename[sym]} cannot vary: the program specialises it to {value} "
                "(a branch on the size, or an op kiln has no shape rule for)"
            )
    names = {str(v) for v in rename.values()}
    out = []
    for fact in env.guard_facts():
        f = fact.xreplace(rename)
        free = {str(x) for x in f.free_symbols}
        if not free:
            continue
        if not free <= names:
            raise ExportError(f"the shape guard {fact} reads a size that is not a marked Dim")
        text = str(f)
        if text not in out:
            out.append(text)
    return out
