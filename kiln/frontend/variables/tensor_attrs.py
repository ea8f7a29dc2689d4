"""Attributes a frame stores on tensors: `x.foo = v`, `x.grad = g`, `x.data = y`.

Note [Tensors: attributes stored in the frame]
A tensor is a Python object with an instance `__dict__`: `x.foo = v` in eager keeps `foo` on
the tensor after the frame. kiln records the store as a side effect keyed by the tensor's
variable (side_effects.store_tensor_attr), answers later reads in the frame from it, and replays
`tensor.foo = v` after the graph: the tensor is reloaded from its source, or is a graph output
(a tensor the frame made). `.grad` (and its alias `._grad`) is stored the same way, after the
checks eager makes (a tensor of the same size, dtype and device, or None).

`x.data = y` gives x y's storage and metadata while x keeps its autograd identity (its
requires_grad, grad_fn, hooks); afterwards x and y share their storage. kiln replays it after the
graph as `x.data = y` in program order (so a later `y.data = z` leaves x with y's old storage, as
in eager), and inside the frame the variable x reads as y's value: ops on x become ops on y's
node, and in-place ops on x write y's storage, which is what eager's shared storage does. This is
only right while no gradient flows through x or y: an op on x would otherwise record its
autograd edge to y's node instead of to x. So a tensor whose `.data` was replaced while x or y
requires grad may still be returned, stored and compared with `is`, but any op on it in the
frame is a graph break (TensorVariable.data_replaced).
"""

import inspect

import torch

from kiln.exc import unimplemented
from kiln.frontend.variables.constant import ConstantVariable

_NOT_FOUND = object()

# Tensor class attributes a frame may store (others are properties/methods of torch.Tensor)
_GRAD_NAMES = {"grad": "grad", "_grad": "grad"}

# What `x.data = y` changes on x's variable (undone with the side effects it recorded)
_DATA_STATE = (
    "proxy",
    "example",
    "data_assigned",
    "data_replaced",
    "requires_grad_override",
    "parameter_type",
)


def is_tensor_var(var):
    """Whether var is a traced tensor (its class is TensorVariable or a subclass)."""
    return hasattr(var, "proxy") and hasattr(var, "example")


def store_attr(tx, tensor, name, value):
    """`tensor.name = value` inside the traced frame."""
    if getattr(tensor, "wrapper_subclass", False):
        unimplemented(f"attribute assignment .{name} on a tensor subclass")
    if name == "data":
        return _store_data(tx, tensor, value)
    if name in _GRAD_NAMES:
        return _store_grad(tx, tensor, _GRAD_NAMES[name], value)
    if inspect.getattr_static(tensor.python_type(), name, _NOT_FOUND) is not _NOT_FOUND:
        unimplemented(f"attribute assignment .{name} on a tensor (a torch.Tensor attribute)")
    if name.startswith("__") and name.endswith("__"):
        unimplemented(f"attribute assignment .{name} on a tensor (a dunder name)")
    tx.output.side_effects.store_tensor_attr(tensor, name, value)


def load_attr(tx, tensor, name):
    """The value the frame stored as `tensor.name`, or None."""
    return tx.output.side_effects.load_tensor_attr(tensor, _GRAD_NAMES.get(name, name))


def _store_grad(tx, tensor, name, value):
    """`t.grad = g`: eager accepts None or a tensor like t (size, dtype, device)."""
    if not (value.is_python_constant() and value.as_python_constant() is None):
        if not is_tensor_var(value):
            unimplemented("Tensor.grad assigned a value that is not a tensor (eager raises)")
        a, b = tensor.example, value.example
        if a.shape != b.shape or a.dtype != b.dtype or tensor.device != value.device:
            unimplemented(
                "Tensor.grad assigned a tensor of another size/dtype/device (eager raises)"
            )
        if getattr(value, "data_replaced", False):
            unimplemented("Tensor.grad assigned a tensor whose .data was replaced")
    tx.output.side_effects.store_tensor_attr(tensor, name, value)


def _store_data(tx, tensor, value):
    """`x.data = y` (Note [Tensors: attributes stored in the frame])."""
    if not is_tensor_var(value):
        unimplemented("Tensor.data assigned a value that is not a tensor (eager raises)")
    if getattr(value, "wrapper_subclass", False) or getattr(tensor, "wrapper_subclass", False):
        unimplemented("Tensor.data assignment with a tensor subclass")
    if tensor.device != value.device:
        unimplemented("Tensor.data assigned a tensor on another device")
    if tensor.source is None:
        # a tensor the frame made: its autograd identity is not an object kiln can keep
        unimplemented("Tensor.data assigned on a tensor made inside the compiled frame")
    if getattr(value, "data_replaced", False):
        unimplemented("Tensor.data assigned a tensor whose own .data was replaced")
    requires_grad = tensor_requires_grad(tensor)
    grads = requires_grad or value.example.requires_grad
    side_effects = tx.output.side_effects
    side_effects.store_tensor_attr(tensor, "data", value)
    side_effects.data_undo.append(_undo(tensor))
    tensor.parameter_type = tensor.python_type() is torch.nn.Parameter  # (x stays what it is)
    tensor.proxy = value.proxy
    tensor.example = value.example
    tensor.data_assigned = True
    tensor.data_replaced = grads or getattr(tensor, "data_replaced", False)
    tensor.requires_grad_override = requires_grad
    return ConstantVariable(None)


def _undo(tensor):
    """A call that puts back what `x.data = y` changes on x's variable."""
    state = {k: tensor.__dict__[k] for k in _DATA_STATE if k in tensor.__dict__}

    def undo():
        for k in _DATA_STATE:
            tensor.__dict__.pop(k, None)
        tensor.__dict__.update(state)

    return undo


def tensor_requires_grad(tensor):
    """requires_grad of the tensor: kept across `.data =` (its autograd identity)."""
    return getattr(tensor, "requires_grad_override", tensor.example.requires_grad)
