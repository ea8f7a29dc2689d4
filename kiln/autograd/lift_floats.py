"""Float graph inputs passed to the traced graph as 0-d float64 tensors, not specialised.

Note [AOT: floats lifted to tensors]
A Python float input of a torch-level graph (an unspecialised float, Note [Shapes: unspecialised
floats]) is a constant of the ATen trace: every new value is a new plan, up to the cache limit.
For the placeholders the frontend marks `lift_float` (an optimizer's learning rate, Note
[Optimizers: float hyper-parameters]), the AOT layer passes a 0-d float64 tensor holding the
value instead, at trace time and on every call: the graph's Python arithmetic on it
(`1 - lr * weight_decay`) is float64 arithmetic, as Python's, and a tensor op taking it as a
scalar (`exp_avg * (lr / bc)`) takes a 0-d tensor, which does not change the dtype of a
dimensioned operand; one plan serves every value. Two differences remain, checked or accepted:
  - an op between the lifted value and another 0-d tensor computes in float64 where eager's
    Python scalar gave the tensor's dtype (Adam's `lr / bias_correction`): the value is then
    rounded once, when it meets the parameter, instead of twice (within float32 rounding);
  - an op that takes only a Scalar (`alpha=`) fails to trace with a tensor: the graph is then
    compiled with its floats as constants (`specialised`), as before. So is a graph whose output
    dtypes would differ from the frontend's (float64 instead of float32).
"""

import torch
from torch.utils import _pytree as pytree

from kiln import logs


def lifted_positions(gm):
    """Input positions of placeholders marked `lift_float` by the frontend."""
    if not isinstance(gm, torch.fx.GraphModule):
        return ()
    nodes = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return tuple(i for i, n in enumerate(nodes) if n.meta.get("lift_float"))


def lift(args, positions):
    """args with the floats at `positions` as 0-d float64 tensors (a new list)."""
    args = list(args)
    for i in positions:
        if type(args[i]) is float:
            args[i] = torch.tensor(args[i], dtype=torch.float64)
    return args


def outputs_match(gm, plan):
    """Whether the lifted plan's graph outputs have the dtypes the frontend traced."""
    want = pytree.tree_leaves(gm.graph.output_node().args[0])
    if plan.fw_graph is None or len(want) != len(plan.outputs):
        return True
    got = list(plan.fw_graph.graph.output_node().args[0])
    nm = len(plan.mutated_inputs) + len(plan.mutated_constants)
    for (kind, k), w in zip(plan.outputs, want):
        if kind != "graph" or not isinstance(w, torch.fx.Node):
            continue
        w, g = w.meta.get("example_value"), getattr(got[nm + k], "meta", {}).get("val")
        if isinstance(w, torch.Tensor) and isinstance(g, torch.Tensor) and w.dtype != g.dtype:
            logs.log("recompiles", f"aot: a lifted float makes an output {g.dtype}: specialised")
            return False
    return True
