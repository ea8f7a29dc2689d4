"""Autograd leaves made in the frame (`t.detach().requires_grad_()`) and `.backward()` traced.

Note [Autograd: leaves made in the frame]
`y = f(x).detach().requires_grad_()` makes y a new autograd leaf; code then runs
`loss.backward()` and reads `y.grad` (chunked losses, gradient checkpoints by hand). kiln traces
this when the leaf never leaves the frame:
  - requires_grad_() on a frame-made tensor that needs no grad is a graph node (it is a leaf: a
    tensor without grad always is); its example requires grad from then on, so the ops after it
    record autograd on the examples as eager does. The AOT trace of such a graph runs with grad
    mode on (kiln/autograd/aot.py), so autograd itself records what the graph asks of it.
  - `loss.backward(gradient)` is written as `torch.autograd.grad(loss, leaves, gradient,
    allow_unused=True)` over the leaves loss depends on (walked back through its graph nodes),
    then each gradient is accumulated as eager's AccumulateGrad does: it becomes `.grad` when
    there was none, and is added in place into the `.grad` there was. A frame leaf's `.grad`
    lives in the trace (undone with the side effects); an input leaf's (`x` that requires grad,
    a parameter) is read from its source and stored with the other tensor attributes.
  - A frame-made tensor that is no frame leaf has `.grad` None (a leaf never given one, or a
    non-leaf: kiln traces no retain_grad()).
A frame leaf cannot leave the frame: the compiled graph's outputs are made by one autograd
Function (or need no grad at all), never the leaf eager made. So when a graph's outputs would
hold a frame leaf, or a tensor that requires grad through one, the frame is traced again from its
start with frame leaves refused for its code, and requires_grad_() is a graph break there (with
the way out in its reason) as torch does.
Not traced (graph breaks with a reason): backward(inputs=...), create_graph=True, a loss that
depends on an input that requires grad and is no leaf (its gradient flows out of the frame), an
input leaf with hooks, and requires_grad_(False) on a frame leaf.
"""

import functools

import torch

from kiln.exc import RestartTrace, unimplemented
from kiln.frontend.variables import optim, tensor_attrs
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.lists import TupleVariable
from kiln.frontend.variables.tensor_hooks import has_pending_hooks
from kiln.frontend.variables.torch import TorchVariable, call_tensor_op

# requires_grad_() on a tensor the frame computed, where it would leave the frame
REQUIRES_GRAD_ON_INTERMEDIATE = (
    "Tensor.requires_grad_() on a tensor computed in the compiled frame (it would become a new "
    "autograd leaf that leaves the frame, which kiln does not trace): make the leaf outside the "
    "compiled function with `t.detach().requires_grad_()` and pass it in"
)

# the note a trace leaves for the next one of the same compile: no frame leaves
_REFUSED = "no frame leaves"


def _refused(output):
    return _REFUSED in output.__dict__.get("restart_notes", ())


def _state(output):
    """The frame leaves of this trace: {id(variable): variable}, and their grads by id."""
    return output.__dict__.setdefault("frame_leaves", {}), output.__dict__.setdefault(
        "frame_leaf_grads", {}
    )


def _alive(var):
    return not getattr(var.proxy, "_erased", False)


def is_frame_leaf(tx, var):
    """Whether var is a leaf made by requires_grad_() in this frame."""
    leaves, _ = _state(tx.output)
    return leaves.get(id(var)) is var and _alive(var)


def requires_grad_(tx, tensor, args, kwargs):
    """`t.requires_grad_(flag)` on a tensor the frame computed."""
    flag = kwargs.get("requires_grad", args[0] if args else ConstantVariable(True))
    if len(args) + len(kwargs) > 1 or not flag.is_python_constant():
        unimplemented("Tensor.requires_grad_() with a flag that is not a constant")
    flag = bool(flag.as_python_constant())
    example = tensor.example
    if not flag:
        if example.requires_grad:
            unimplemented("Tensor.requires_grad_(False) on a tensor computed in the frame")
        return tensor  # (a leaf that needs no grad: nothing changes)
    if example.requires_grad:
        return tensor  # (already requires grad: nothing changes)
    if _refused(tx.output) or getattr(tensor, "data_assigned", False):
        unimplemented(REQUIRES_GRAD_ON_INTERMEDIATE)
    if getattr(tensor, "wrapper_subclass", False) or tx.output.__dict__.get("functorch_levels"):
        unimplemented("Tensor.requires_grad_() on a tensor subclass or inside torch.vmap")
    call_tensor_op(tx, "call_method", "requires_grad_", [tensor], {})
    leaves, _ = _state(tx.output)
    leaves[id(tensor)] = tensor

    def undo():
        leaves.pop(id(tensor), None)
        example.requires_grad_(False)

    tx.output.side_effects.data_undo.append(undo)
    return tensor


def frame_grad(tx, tensor):
    """`.grad` of a tensor the frame made: what a traced backward gave a frame leaf, else None."""
    _, grads = _state(tx.output)
    if is_frame_leaf(tx, tensor) and id(tensor) in grads:
        return grads[id(tensor)]
    return ConstantVariable(None)


def check_outputs(output, outputs):
    """Before a graph is compiled: trace again without frame leaves if one would leave it."""
    leaves, _ = _state(output)
    nodes = {v.proxy for v in leaves.values() if _alive(v)}
    if not nodes:
        return
    for var in outputs:
        node = var.proxy
        grad = getattr(getattr(var, "example", None), "requires_grad", False)
        if node in nodes or (grad and _ancestors(node) & nodes):
            if _refused(output) or "restart_notes" not in output.__dict__:
                unimplemented(REQUIRES_GRAD_ON_INTERMEDIATE)  # (no trace again to come)
            output.restart_notes.add(_REFUSED)
            raise RestartTrace("a leaf made in the frame would leave it")


def _ancestors(node):
    seen, todo = set(), [node]
    while todo:
        n = todo.pop()
        for a in n.all_input_nodes:
            if a not in seen:
                seen.add(a)
                todo.append(a)
    return seen


def backward(tx, loss, args, kwargs):
    """`loss.backward(gradient, retain_graph)`: autograd.grad over its leaves, accumulated."""
    names = ("gradient", "retain_graph", "create_graph", "inputs")
    if len(args) > len(names) or any(k not in names for k in kwargs):
        unimplemented("Tensor.backward() with arguments kiln does not know")
    given = dict(zip(names, args), **kwargs)
    for name in ("create_graph", "inputs"):
        value = given.get(name)
        if value is not None and not (
            value.is_python_constant() and not value.as_python_constant()
        ):
            unimplemented(f"Tensor.backward({name}=...) inside the compiled frame")
    if not loss.example.requires_grad:
        unimplemented("Tensor.backward() of a tensor that does not require grad (eager raises)")
    if has_pending_hooks(tx.output.side_effects):
        unimplemented("Tensor.backward() after a hook registration (registered after a graph)")
    up = _ancestors(loss.proxy) | {loss.proxy}
    for n in up:  # (a constant of the graph that requires grad would get a gradient in eager)
        value = n.meta.get("example_value")
        if n.op == "get_attr" and isinstance(value, torch.Tensor) and value.requires_grad:
            unimplemented("Tensor.backward() into a tensor held as a constant of the graph")
    leaves, grads = _state(tx.output)
    wrt = [v for v in leaves.values() if _alive(v) and v.proxy in up]
    for var, _source in list(tx.output._input_by_id.values()):
        if not tensor_attrs.is_tensor_var(var) or var.proxy not in up:
            continue
        real = next((v for _, v, n in tx.output.graph_inputs if n is var.proxy), None)
        if not isinstance(real, torch.Tensor) or not real.requires_grad:
            continue
        if not real.is_leaf:
            unimplemented("Tensor.backward() into a tensor made before the frame (not a leaf)")
        if real._backward_hooks or getattr(real, "_post_accumulate_grad_hooks", None):
            unimplemented("Tensor.backward() into a tensor with hooks")
        wrt.append(var)
    if not wrt:
        return ConstantVariable(None)
    grad_kwargs = {"allow_unused": ConstantVariable(True)}
    if given.get("gradient") is not None:
        grad_kwargs["grad_outputs"] = given["gradient"]
    if given.get("retain_graph") is not None:
        grad_kwargs["retain_graph"] = given["retain_graph"]
    got = TorchVariable(torch.autograd.grad).call_function(
        tx, [loss, TupleVariable(list(wrt))], grad_kwargs
    )
    for leaf, g in zip(wrt, got.unpack_var_sequence(tx)):
        if not tensor_attrs.is_tensor_var(g):
            continue  # (a leaf loss does not reach)
        if is_frame_leaf(tx, leaf):
            old = grads.get(id(leaf))
        else:
            old = tensor_attrs.load_attr(tx, leaf, "grad") or optim.read_grad(tx, leaf)
        if tensor_attrs.is_tensor_var(old):
            if old.example.requires_grad:
                unimplemented("Tensor.backward() accumulating into a .grad that requires grad")
            old.call_method(tx, "add_", [g], {})  # AccumulateGrad: in place into the old grad
        elif is_frame_leaf(tx, leaf):
            grads[id(leaf)] = g
            tx.output.side_effects.data_undo.append(functools.partial(grads.pop, id(leaf), None))
        else:
            tensor_attrs.store_attr(tx, leaf, "grad", g)
    return ConstantVariable(None)
