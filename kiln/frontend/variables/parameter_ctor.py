"""`torch.nn.Parameter(x)` inside a compiled frame, for a tensor x the frame was given.

Note [Modules: parameters made in the frame]
A Parameter is a new autograd leaf sharing x's storage; with requires_grad=True (the default) the
gradients of what the frame computes from it must reach that leaf, which a graph's own values
never are. As torch.compile does, kiln makes it before the graph: the transformed code calls
`torch.nn.Parameter(<x from its source>, requires_grad)` first (with the random draws, Note
[Random: draws before the graph]) into a temporary, and the graph takes it as one more input.
It is guarded through x (the temporary is new on every call); its variable is a Parameter, so
storing it on a module in place of a parameter (`self.conv.weight = nn.Parameter(w)`) is a store
replayed after the graph (Module.__setattr__ registers it) and read back in the frame; what lists
that module's parameters (`parameters()`, `_parameters`, `state_dict()`) is a break afterwards
(nn_module.replaces_parameter).
Not traced (graph breaks): x made in the frame (torch breaks too), x written in the frame
before the call (the Parameter would be made from x's value before the graph), a tensor
subclass, a non-constant requires_grad.
"""

import torch

from kiln.exc import unimplemented
from kiln.frontend.variables import torch as torch_vars
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.tensor import TensorVariable, tensor_variable
from kiln.frontend.variables.unspec_float import DrawSource
from kiln.symbolic.fake import fake_like


def _written(node):
    """Whether an op recorded so far writes into the value of node."""
    for user in node.users:
        name = user.target if isinstance(user.target, str) else getattr(user.target, "__name__", "")
        if torch_vars._mutates(user.target, user.kwargs) or name in ("copy_", "set_"):
            if user.args and user.args[0] is node or "out" in user.kwargs:
                return True
    return False


def make_parameter(tx, fn, args, kwargs):
    """`torch.nn.Parameter(data, requires_grad)`: made before the graph, a graph input."""
    names = ("data", "requires_grad")
    if len(args) > 2 or any(k not in names for k in kwargs):
        unimplemented("torch.nn.Parameter() with arguments kiln does not know")
    given = dict(zip(names, args), **kwargs)
    data = given.get("data")
    flag = given.get("requires_grad", ConstantVariable(True))
    if not flag.is_python_constant() or type(flag.as_python_constant()) is not bool:
        unimplemented("torch.nn.Parameter() with a requires_grad that is not a constant bool")
    if type(data) is not TensorVariable or getattr(data, "data_assigned", False):
        unimplemented("torch.nn.Parameter() of something other than a plain tensor")
    output = tx.output
    real = next((v for _, v, n in output.graph_inputs if n is data.proxy), None)
    if data.source is None or real is None:
        unimplemented(
            "torch.nn.Parameter() of a tensor made in the compiled frame: make the parameter "
            "outside the compiled function"
        )
    if type(real) not in (torch.Tensor, torch.nn.Parameter) or _written(data.proxy):
        unimplemented("torch.nn.Parameter() of a tensor subclass, or of one written in the frame")
    if data.is_symbolic():
        unimplemented("torch.nn.Parameter() of a tensor with symbolic sizes")
    requires_grad = flag.as_python_constant()
    value = torch.nn.Parameter(real, requires_grad=requires_grad)  # (x's storage: a view)
    draws = output.side_effects.draws
    source = DrawSource(f"___kiln_draw_{len(draws)}")
    draws.append((source, torch.nn.Parameter, (data.source, requires_grad), {}))
    node = output._placeholder(source)
    if output.fake_inputs:
        example = fake_like(value, requires_grad=requires_grad)
    else:
        example = torch.empty_strided(real.shape, real.stride(), dtype=real.dtype, device="meta")
        example.requires_grad_(requires_grad)
    node.meta["example_value"] = example
    node.meta["source"] = source.name()
    node.meta["is_parameter"] = True
    output.graph_inputs.append((source, value, node))
    return tensor_variable(node, example, real.device, source=source)


torch_vars.register_function(torch.nn.Parameter, make_parameter)
