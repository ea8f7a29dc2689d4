"""`bool()` of values read from tensor data under config.capture_scalar_outputs (Note [Shapes: a
bool read from tensor data])."""

import torch

from kiln.bytecode import emit
from kiln.exc import DataDependentError, Unsupported
from kiln.frontend.variables import torch as torch_vars
from kiln.frontend.variables.base import VariableTracker
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.exceptions import raise_observed
from kiln.symbolic import shape_env

# Note [Shapes: a bool read from tensor data]
# With `config.capture_scalar_outputs`, `bool(t)` of a one-element tensor, `bool(t.item())` of an
# int or float item, and `t.item()` of a bool tensor are values the graph computes, as
# torch.compile's SymBool: a DataBoolVariable holding a one-element bool tensor `t != 0` made where the
# bool() is (a later in-place write to t does not change it). Python's truth of a number is
# `!= 0` (NaN is true, as `nan != 0` is), so the tensor holds exactly the bool eager computes.
# Returned or live at a break it leaves the graph as that tensor and Python reads it back with
# `.item()` (a Python bool). Anything that needs it while tracing (`if`, `and`, arithmetic) is
# the data-dependent graph break it was: torch.compile breaks there too. A bool of a tensor that
# does not hold one element raises eager's RuntimeError in the frame; complex tensors, symbolic
# element counts and the switch off keep the break ("reads tensor data").
_AMBIGUOUS = "Boolean value of Tensor with {} is ambiguous"


class DataBoolVariable(VariableTracker):
    """A bool computed by the graph from tensor data (Note [Shapes: a bool read from tensor data])."""

    def __init__(self, flag, **kw):
        super().__init__(**kw)
        self.flag = flag  # a bool TensorVariable of one element holding the value

    def python_type(self):
        return bool

    def is_python_constant(self):
        return False

    def as_python_constant(self):
        raise DataDependentError("data-dependent: a bool read from tensor data used in Python")

    def truthy(self, tx):
        self.as_python_constant()

    def bool_in_graph(self, tx):
        return self

    def reconstruct(self, cg):
        cg.load_object(torch.Tensor.item, push_null=True)
        cg.reconstruct_tensor(self.flag)
        cg.extend(emit.call(1))

    def __repr__(self):
        return f"DataBoolVariable({self.flag.proxy.name})"


def _numel(example):
    numel = 1
    for n in example.shape:
        n = shape_env.from_torch(n)
        if isinstance(n, shape_env.SymNode):
            return None
        numel *= n
    return numel


def _nonzero(tx, tensor):
    return torch_vars.call_tensor_op(
        tx, "call_function", torch.ne, [tensor, ConstantVariable(0)], {}
    )


def tensor_bool(tx, tensor):
    """`bool(t)`: a DataBoolVariable, eager's RuntimeError, or None (the usual break)."""
    if not tx.output.captures_scalars or tensor.example.dtype.is_complex:
        return None
    numel = _numel(tensor.example)
    if numel is None:
        return None
    if numel != 1:
        raise_observed(
            tx,
            RuntimeError,
            _AMBIGUOUS.format("no values" if numel == 0 else "more than one value"),
        )
    return DataBoolVariable(_nonzero(tx, tensor))


def bool_item(tx, tensor):
    """`t.item()` of a one-element bool tensor."""
    return DataBoolVariable(_nonzero(tx, tensor))


def scalar_bool(tx, scalar, leaf):
    """`bool(n)` of an int or float read by `.item()` (`leaf`: it as a 0-d tensor in the graph);
    a constant where the facts known decide it."""
    if not tx.output.captures_scalars:
        return None
    if isinstance(scalar.value, shape_env.SymNode) and scalar.value.kind == "int":
        try:
            return ConstantVariable(scalar.truthy(tx))
        except Unsupported:
            pass  # (not decided by what is known: computed by the graph)
    return DataBoolVariable(_nonzero(tx, leaf()))
