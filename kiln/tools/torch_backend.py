"""kiln as a backend of torch's own compiler (`backend="kiln"` given to torch.compile).

Installing the distribution `torch-kiln` registers `kiln = kiln.tools.torch_backend:kiln` in the
`torch_dynamo_backends` entry-point group (pyproject.toml), where torch looks up backend names it
does not know. torch's frontend (TorchDynamo) then captures the graphs and kiln's AOT autograd and
code generator compile them.

Note [Torch backend: example inputs]
torch hands a backend `(gm, example_inputs)`. The graph's nodes carry torch's own metadata
(`example_value`: fake tensors with torch's symbolic sizes), which kiln's stages must not read, so
the graph is copied without it. The example inputs may be real tensors, fake tensors or SymInts
(a dynamic dimension): kiln takes only their metadata (sizes, strides, dtype, device,
requires_grad; a SymInt's hint) and traces with tensors of that metadata. kiln's AOT layer keeps
one plan per input metadata, so a graph torch made dynamic compiles again in kiln for each new
size it is called with (kiln does not share torch's symbolic shape environment).

Note [Torch backend: scalars read with .item()]
Under `dynamic=True` torch passes Python floats (a LayerNorm's eps) as 0-dim tensor inputs read
with `.item()`, which kiln's graphs cannot hold. kiln compiles such a graph once per value of those
scalars: each `.item()` of an input becomes the constant it read, and each call looks its values up.
"""

import torch
import torch.fx

from kiln import config, logs
from kiln.api import lookup_backend

_DYNAMO_META = ("example_value", "val", "tensor_dict", "grapharg", "unbacked_bindings")


def _is_fake(x):
    """A tensor without data of its own (torch's FakeTensor, or a meta tensor)."""
    return type(x) is not torch.Tensor and type(x) is not torch.nn.Parameter or x.is_meta


def _hint(s):
    """A SymInt's value in the example torch traced with."""
    node = getattr(s, "node", None)
    hint = getattr(node, "hint", None)
    if hint is None and node is not None and hasattr(node, "shape_env"):
        hint = node.shape_env.size_hint(node.expr)
    return int(hint) if hint is not None else int(s)


def _size(xs):
    return tuple(_hint(s) if isinstance(s, torch.SymInt) else int(s) for s in xs)


def materialize(x):
    """A real example input with x's metadata (Note [Torch backend: example inputs])."""
    if isinstance(x, torch.SymInt):
        return _hint(x)
    if isinstance(x, torch.SymFloat | torch.SymBool):
        return type(x.node.hint)(x.node.hint)
    if not isinstance(x, torch.Tensor) or not _is_fake(x):
        return x
    device = torch.device("cpu") if x.device.type == "meta" else x.device
    real = torch.empty_strided(_size(x.shape), _size(x.stride()), dtype=x.dtype, device=device)
    if x.dtype.is_floating_point or x.dtype.is_complex:
        real.normal_()
    else:
        real.zero_()
    return real.requires_grad_(x.requires_grad)


def clean_graph(gm):
    """A copy of torch's graph module with its node metadata dropped (kept: stack traces)."""
    graph = torch.fx.Graph()
    env = {}
    for node in gm.graph.nodes:
        new = graph.node_copy(node, lambda n: env[n])
        for key in _DYNAMO_META:
            new.meta.pop(key, None)
        env[node] = new
    out = torch.fx.GraphModule(gm, graph)
    out.meta.clear()
    return out


def _item_inputs(gm):
    """Positions of placeholders read only by `.item()` (Note [Torch backend: scalars ...])."""
    out = []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, n in enumerate(placeholders):
        users = list(n.users)
        if users and all(u.op == "call_method" and u.target == "item" for u in users):
            out.append(i)
    return out


def _with_constants(gm, positions, values):
    """The graph with each `.item()` of the placeholders at `positions` replaced by its value."""
    gm = clean_graph(gm)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, v in zip(positions, values):
        for user in list(placeholders[i].users):
            user.replace_all_uses_with(v)
            gm.graph.erase_node(user)
    gm.recompile()
    return gm


class PerScalarValue:
    """A graph compiled once per value of its `.item()` inputs."""

    def __init__(self, gm, positions, examples):
        self.gm, self.positions, self.compiled = gm, positions, {}
        self.get(examples)

    def get(self, args):
        key = tuple(args[i].item() for i in self.positions)
        fn = self.compiled.get(key)
        if fn is None:
            gm = _with_constants(self.gm, self.positions, key)
            fn = self.compiled[key] = lookup_backend("kiln")(gm, list(args))
        return fn

    def __call__(self, *args):
        return self.get(args)(*args)


def kiln(gm, example_inputs):
    """The `torch.compile` backend "kiln": kiln's AOT autograd and code generator."""
    kiln_backend = lookup_backend("kiln")
    examples = [materialize(x) for x in example_inputs]
    clean = clean_graph(gm)
    try:
        positions = _item_inputs(clean)
        if positions:
            return PerScalarValue(clean, positions, examples)
        return kiln_backend(clean, examples)
    except Exception as e:
        if config.strict:
            raise
        logs.warn(
            "kiln (torch.compile backend) failed, running this graph eagerly: %s: %s",
            type(e).__name__,
            e,
        )
        return gm.forward
