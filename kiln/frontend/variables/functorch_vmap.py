"""torch.vmap in traced code: the function traced once per example, one call that vmaps it.

Note [Vmap: the body traced, vmap applied at run time]
`torch.vmap(fn, in_dims, out_dims, randomness=, chunk_size=)(*args)` (torch.func.vmap is the same
function) runs `fn` on one example of each batched argument at a time. kiln traces `fn` once into
a graph of its own (the body), on per-example tensors (each batched argument without its batch
dimension), as a torch.cond branch is traced (control_flow._trace_branch: side effects are graph
breaks, and so are in-place changes of a tensor other than one the body made itself). Tensors of the frame the body reads (closed-over
tensors, parameters, tensors given as keyword arguments, which vmap does not batch) become extra
arguments with in_dim None. The frame's graph gets one node whose target is a `VmapCall`: a
callable holding the body and vmap's settings that calls `torch.vmap(body, ...)(*operands)`. So
eager runs torch's own vmap on the body's ops, and a backend that traces the graph at the ATen
level (kiln's AOT tracer) traces through vmap and sees the batched ATen ops, gradients included.
Randomness, chunking and vmap's own errors are torch's at run time.

The node's example results come from running that call on the meta examples (their shapes and
strides are vmap's). What vmap refuses there (batch sizes that differ, no batched input, an op
without a batching rule on meta, data-dependent control flow) is a graph break, so the call runs
in Python and torch raises its own error. Also graph breaks, with the reason: arguments and
results other than trees of tensors (tuples, lists, dicts: Note [Vmap: arguments and results as
trees]) and constants given with in_dim None, in_dims that do not match an argument's tree,
symbolic sizes other than the batch size, autocast on, and a body kiln cannot trace. A batch size that changed between calls is
symbolic (the body, traced per example, does not see it; batch sizes of two arguments are compared
as user code would compare them, with a guard); reading it from the interpreter breaks.

Note [Vmap: metadata]
Inside vmap the function sees batched tensors, whose metadata is their own: `requires_grad` is
False and `is_leaf` True even for a batch of a tensor that requires grad (autograd records the
ops on the tensors underneath), `torch._C._dispatch_keys` has FuncTorchBatched, and the strides of
an intermediate result depend on where the batching rules put the batch dimension. The traced
per-example examples answer otherwise, so these queries are graph breaks while a body is traced
(tensor.py's _VMAP_UNFOLDED, torch_queries._dispatch_keys); shapes, dtypes and devices fold.

Note [Vmap: the functorch interpreter inside the body]
`torch._functorch.pyfunctorch.retrieve_current_functorch_interpreter()` in a body answers the
vmap level being traced: its `key()` (TransformType.Vmap), `level()`, `batch_size()` and
`randomness()` fold to constants. vmap numbers its levels from the innermost transform around the
call, so the level is the frame's functorch level (`maybe_current_level()`, None outside any
transform) plus the depth of the traced vmap; a STATE_QUERY guard checks that the frame runs at
the level it was traced at. Outside a traced vmap the call is not folded.
"""

import operator
import types

import torch

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.variables import control_flow as cf
from kiln.frontend.variables import functorch_trees as trees
from kiln.frontend.variables.base import BoundMethodVariable, PythonValueVariable, VariableTracker
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.operators import binary_op
from kiln.frontend.variables.tensor import TensorVariable
from kiln.frontend.variables.torch import _as_fakes, wrap_tensor_result
from kiln.symbolic.fake import is_symbolic

VMAP = getattr(torch, "vmap", None)
_RANDOMNESS = ("error", "different", "same")
_C_FUNCTORCH = getattr(torch._C, "_functorch", None)
_TRANSFORM_VMAP = getattr(getattr(_C_FUNCTORCH, "TransformType", None), "Vmap", None)


def torch_func_name(value):
    """The name of torch.func's own function `value` (grad, jacrev, functional_call ...), else
    None: recognised as the user's program reaches it, with no hash or equality of `value` run
    (a user's __hash__ never runs), and called at run time as the very object given."""
    if isinstance(value, types.FunctionType) and value.__module__ == "torch.func":
        return value.__name__
    return None


def is_vmap(value):
    """Whether `value` is torch.vmap (torch.func.vmap)."""
    return VMAP is not None and value is VMAP


def is_interpreter_query(value):
    """Whether `value` is functorch's `retrieve_current_functorch_interpreter`."""
    return (
        isinstance(value, types.FunctionType)
        and value.__module__ == "torch._functorch.pyfunctorch"
        and value.__qualname__ == "retrieve_current_functorch_interpreter"
    )


def is_transform_type(value):
    """A value of functorch's TransformType enum (compared with an interpreter's key())."""
    return _TRANSFORM_VMAP is not None and type(value) is type(_TRANSFORM_VMAP)


class VmapCall:
    """The target of a vmap node: `torch.vmap(body, ...)(*operands)`."""

    __name__ = "vmap"
    __qualname__ = "vmap"

    def __init__(self, body, in_dims, out_dims, randomness, chunk_size):
        self.body = body
        self.in_dims = in_dims
        self.out_dims = out_dims
        self.randomness = randomness
        self.chunk_size = chunk_size

    def __call__(self, *operands):
        fn = VMAP(
            self.body,
            in_dims=self.in_dims,
            out_dims=self.out_dims,
            randomness=self.randomness,
            chunk_size=self.chunk_size,
        )
        return fn(*operands)

    def settings(self):
        """(in_dims, out_dims, randomness, chunk_size)."""
        return self.in_dims, self.out_dims, self.randomness, self.chunk_size

    def __repr__(self):
        return f"VmapCall(in_dims={self.in_dims}, out_dims={self.out_dims})"


def _is_device(a):
    return isinstance(a, torch.device) or (
        isinstance(a, str) and a.split(":")[0] in ("cpu", "cuda", "xpu", "mps", "meta")
    )


def _on_meta(body):
    """A copy of the body whose explicit devices are meta (the examples' device, Note [Tensors:
    meta execution]): what the node's example results are computed with."""
    graph = torch.fx.Graph()
    out = graph.graph_copy(body.graph, {})
    graph.output(out)
    meta = torch.device("meta")
    for node in graph.nodes:
        if "device" in node.kwargs:
            node.kwargs = {**node.kwargs, "device": meta}
        if node.op == "call_method" and node.target == "to":
            node.args = tuple(meta if _is_device(a) else a for a in node.args)
    return torch.fx.GraphModule(torch.nn.Module(), graph)


class TransformFunctionVariable(PythonValueVariable):
    """A torch.func transform itself (torch.vmap, torch.func.grad ...), before it is called."""

    def bind(self, names, args, kwargs, positional=None):
        """(the function given, {setting name: its variable or None}): the call's arguments bound
        to `names` (the function first, the first `positional` of them positional), each setting
        a constant; a break where the transform would raise or a setting is not constant."""
        what = "torch.vmap" if self.value is VMAP else f"torch.func.{self.value.__name__}"
        bound = dict(zip(names, args))
        if len(args) > (positional or len(names)):
            unimplemented(f"{what} called with too many arguments (torch raises)")
        for k, v in kwargs.items():
            if k not in names or k in bound:
                unimplemented(f"{what} argument {k!r} (torch raises)")
            bound[k] = v
        if "func" not in bound:
            unimplemented(f"{what} called without a function (torch raises)")
        settings = {}
        for k in names[1:]:
            v = bound.get(k)
            if v is not None and not v.is_python_constant():
                unimplemented(f"{what}'s {k} is not a constant")
            settings[k] = v
        return bound["func"], settings

    def reconstruct(self, cg):
        if self.source is not None:
            return super().reconstruct(cg)
        cg.load_object(self.value)

    def __repr__(self):
        return f"{type(self).__name__}()"


class TransformedVariable(VariableTracker):
    """`transform(fn, **settings)`: its calls are traced; `settings` maps the transform's keyword
    names to the variables given (or None)."""

    def __init__(self, fn, settings, transform, **kw):
        super().__init__(**kw)
        self.fn = fn
        self.settings = settings
        self.transform = transform

    def setting(self, name, default):
        v = self.settings.get(name)
        return default if v is None else v.as_python_constant()

    def python_type(self):
        return types.FunctionType

    def var_getattr(self, tx, name):
        unimplemented(f"attribute {name!r} of a {self.transform.__name__} function")

    def reconstruct(self, cg):
        cg.load_object(self.transform, push_null=True)
        cg.reconstruct(self.fn)
        given = {k: v for k, v in self.settings.items() if v is not None}
        for v in given.values():
            cg.reconstruct(v)
        cg.extend(emit.call_kw(1 + len(given), tuple(given)) if given else emit.call(1))

    def __repr__(self):
        return f"{type(self).__name__}({self.fn})"


class VmapFunctionVariable(TransformFunctionVariable):
    """torch.vmap itself, before it is called."""

    def call_function(self, tx, args, kwargs):
        names = ("func", "in_dims", "out_dims", "randomness", "chunk_size")
        fn, settings = self.bind(names, args, kwargs, positional=len(names) - 1)
        vmapped = VmappedVariable(fn, settings, VMAP)  # (chunk_size is keyword-only)
        if vmapped.setting("randomness", "error") not in _RANDOMNESS:
            unimplemented("torch.vmap: an unknown randomness (torch.vmap raises)")
        chunk_size = vmapped.setting("chunk_size", None)
        if chunk_size is not None and (type(chunk_size) is not int or chunk_size < 1):
            unimplemented(f"torch.vmap: chunk_size {chunk_size!r} (torch.vmap raises)")
        return vmapped


class VmappedVariable(TransformedVariable):
    """`torch.vmap(fn, ...)`: calls are traced (Note [Vmap: the body traced, vmap applied at run
    time])."""

    def call_function(self, tx, args, kwargs):
        return trace_vmap(tx, self, args, kwargs)


def _in_dims(in_dims, args):
    """One in_dim (an int or None) per argument; a break for what kiln does not capture."""
    if isinstance(in_dims, int) and not isinstance(in_dims, bool):
        return [in_dims] * len(args)
    if isinstance(in_dims, tuple):
        if len(in_dims) != len(args):
            unimplemented(
                f"torch.vmap: in_dims has {len(in_dims)} entries for {len(args)} arguments "
                "(torch.vmap raises)"
            )
        return list(in_dims)  # (each a tree prefix: Note [Vmap: arguments and results as trees])
    unimplemented(
        f"torch.vmap: in_dims {in_dims!r} (an int or a tuple expected; torch.vmap raises)"
    )


def _batch_size(tx, batched):
    """The batch size (an int, or None when symbolic) once the batched arguments' sizes along
    their in_dims are known equal (a symbolic comparison is guarded)."""
    first = batched[0][0].size_var(tx, batched[0][1])
    for v, d in batched[1:]:
        if not binary_op(tx, operator.eq, first, v.size_var(tx, d)).truthy(tx):
            unimplemented("torch.vmap: the batched arguments' sizes differ (torch.vmap raises)")
    return first.as_python_constant() if isinstance(first, ConstantVariable) else None


def _symbolic_sizes(t):
    return any(not isinstance(s, int) for s in t.shape)


def _per_example(v, dim):
    """The example a body placeholder traces with: `v`'s example without its batch dimension."""
    ex = v.example
    if ex.dim() == 0 or not -ex.dim() <= dim < ex.dim():
        unimplemented(f"torch.vmap: in_dim {dim} of a {ex.dim()}-d tensor (torch.vmap raises)")
    if ex.shape[dim] == 0:  # (no example to select: one of the same sizes and strides)
        if is_symbolic(ex):
            unimplemented("torch.vmap over a batch of size 0 with symbolic sizes")
        sizes, strides = list(ex.shape), list(ex.stride())
        del sizes[dim], strides[dim]
        per = torch.empty_strided(sizes, strides, dtype=ex.dtype, device="meta")
        return types.SimpleNamespace(example=per, device=v.device)
    return types.SimpleNamespace(example=ex.select(dim, 0), device=v.device)


def _levels(tx):
    """The vmap levels being traced in this frame: [(batch size, randomness)], innermost last."""
    return tx.output.__dict__.setdefault("vmap_levels", [])


def trace_vmap(tx, vmapped, args, kwargs):
    """A call of `torch.vmap(fn, ...)` (Note [Vmap: the body traced, vmap applied at run time])."""
    in_dims = vmapped.setting("in_dims", 0)
    out_dims = vmapped.setting("out_dims", 0)
    randomness = vmapped.setting("randomness", "error")
    chunk_size = vmapped.setting("chunk_size", None)
    dims = _in_dims(in_dims, args)
    tensors, items = [], []

    def add(v, d):
        if is_symbolic(v.example) and (d is None or _symbolic_sizes(_per_example(v, d).example)):
            unimplemented("torch.vmap on tensors with symbolic sizes other than the batch size")
        tensors.append((v, d))
        items.append(_per_example(v, d) if d is not None else v)

    # Note [Vmap: arguments and results as trees]
    rebuilds = [trees.flatten_arg(v, d, add) for v, d in zip(args, dims)]
    batched = [v for v, d in tensors if d is not None]
    if not batched:
        unimplemented("torch.vmap: no argument is batched (torch.vmap raises)")
    size = _batch_size(tx, [(v, d) for v, d in tensors if d is not None])
    devices = {v.device for v, _ in tensors}
    if any(d.type != "meta" and torch.is_autocast_enabled(d.type) for d in devices):
        unimplemented("torch.vmap under autocast is not captured")  # (meta has no autocast)

    def pack(placeholders):
        it = iter(placeholders)
        return [rebuild(lambda: next(it)) for rebuild in rebuilds]

    levels, transforms = _levels(tx), tx.output.__dict__.setdefault("functorch_levels", [])
    levels.append((size, randomness))
    transforms.append("vmap")
    try:
        graph, out = cf._trace_branch(
            tx,
            _KwargsCall(vmapped.fn, kwargs),
            items,
            "the vmapped function",
            pack=pack,
            op="torch.vmap",
            local_writes=True,
        )
    finally:
        levels.pop()
        transforms.pop()
    out_items, rebuild_out = trees.flatten_result(out)
    single = isinstance(out, TensorVariable)  # (else its tensors come back flat, as a tuple)
    lifted = cf._lift([graph], [out_items], op="torch.vmap")
    (out_node,) = [n for n in graph.nodes if n.op == "output"]
    values = out_node.args[0]
    out_node.args = (values[0] if single else tuple(values),)
    body = torch.fx.GraphModule(torch.nn.Module(), graph, class_name="VmapBody")
    call = VmapCall(
        body,
        tuple(d for _, d in tensors) + (None,) * len(lifted),
        out_dims if single else tuple(trees.flat_dims(out_dims, out)),
        randomness,
        chunk_size,
    )
    examples = [v.example for v, _ in tensors] + [n.meta["example_value"] for n in lifted]
    probe = VmapCall(_on_meta(body), *call.settings())
    try:
        with torch.device("meta"):
            result = probe(*examples)
    except Exception as e:
        unimplemented(f"torch.vmap on meta tensors raised {type(e).__name__}: {e}")
    if tx.output.fake_inputs:
        result = _as_fakes(result, next(iter(devices)))
    flat = [result] if isinstance(result, torch.Tensor) else list(result)
    if len(flat) != len(out_items) or any(
        not isinstance(r, torch.Tensor) or r.dtype != v.example.dtype
        for r, v in zip(flat, out_items)
    ):
        unimplemented("torch.vmap: the batched results differ from the traced ones")
    node = tx.output.create_node(
        "call_function", call, tuple(v.proxy for v, _ in tensors) + tuple(lifted), {}
    )
    device = next(iter(devices))
    made = wrap_tensor_result(tx, node, result, device)
    return made if single else rebuild_out(made.items)


class _KwargsCall(VariableTracker):
    """`fn` called with the body's arguments and the (unbatched) keyword arguments given."""

    def __init__(self, fn, kwargs, **kw):
        super().__init__(**kw)
        self.fn = fn
        self.kwargs = kwargs

    def call_function(self, tx, args, kwargs):
        return self.fn.call_function(tx, args, {**self.kwargs, **kwargs})


class FunctorchInterpreterQueryVariable(PythonValueVariable):
    """`retrieve_current_functorch_interpreter` (Note [Vmap: the functorch interpreter inside
    the body])."""

    def call_function(self, tx, args, kwargs):
        levels = _levels(tx)
        innermost = tx.output.__dict__.get("functorch_levels") or [None]
        if args or kwargs or not levels or _C_FUNCTORCH is None or innermost[-1] != "vmap":
            unimplemented("retrieve_current_functorch_interpreter outside a traced torch.vmap")
        query = _C_FUNCTORCH.maybe_current_level
        base = query()
        tx.output.guards.add(GuardKind.STATE_QUERY, None, (query, base))
        size, randomness = levels[-1]
        return VmapInterpreterVariable((base or 0) + len(levels), size, randomness)

    def reconstruct(self, cg):
        if self.source is not None:
            return super().reconstruct(cg)
        cg.load_object(self.value)


class VmapInterpreterVariable(VariableTracker):
    """The interpreter of a traced vmap level: its queries fold to constants."""

    def __init__(self, level, batch_size, randomness, **kw):
        super().__init__(**kw)
        self.answers = {
            "key": _TRANSFORM_VMAP,
            "level": level,
            "batch_size": batch_size,
            "randomness": randomness,
        }

    def call_method(self, tx, name, args, kwargs):
        if name == "batch_size" and self.answers[name] is None:
            unimplemented("a symbolic vmap batch size read from its interpreter")
        if name in self.answers and not args and not kwargs:
            return ConstantVariable(self.answers[name])
        unimplemented(f"functorch interpreter method {name!r} is not captured")

    def var_getattr(self, tx, name):
        if name in self.answers:
            return BoundMethodVariable(self, name)
        unimplemented(f"functorch interpreter attribute {name!r} is not captured")

    def reconstruct(self, cg):
        unimplemented("a functorch interpreter outliving its traced torch.vmap")
