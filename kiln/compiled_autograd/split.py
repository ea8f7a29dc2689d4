"""Split a compiled-autograd graph into its tensor work and the Python calls that only consume it.

    forward(inputs, sizes, scalars, hooks):          prefix(inputs, sizes, scalars, hooks):
        mm = aten.mm(getitem, getitem_1)                 mm = aten.mm(getitem, getitem_1)
        call_hook = call_hook(hooks[0], mm)   ==>        return (mm,)
        accumulate_grad_(getitem_2, call_hook, False)  suffix(inputs, sizes, scalars, hooks, outs):
        return []                                        call_hook = call_hook(hooks[0], outs[0])
                                                         accumulate_grad_(inputs[2], call_hook, False)

Note [Compiled autograd: sinks]
Hooks on leaves, accumulation, retained grads and post-accumulate hooks consume tensor values
but feed nothing back into the tensor work. When every Python call in the graph is such a sink,
they can all run after the tensor work, in their own order (only their timing relative to pure
tensor ops changes, which nothing can observe), and the tensor work compiles as ONE graph even
under fullgraph=True. Where a Python call feeds tensor work (a hook on a non-leaf tensor, an
opaque custom Function), the graph is handed to the compiler whole.
"""

import operator

import torch.fx

from kiln.compiled_autograd import hooks as H

__all__ = ["split_sinks", "SplitRunner", "count_calls"]

_CALLS = (H.call_hook, H.accumulate_grad_, H.retain_grad_)


def _is_python_call(n):
    return n.op == "call_function" and (n.target in _CALLS or type(n.target).__name__ == "_Opaque")


def _is_free(n):
    """A read of a graph input list (inputs[i], sizes[i], hooks[i]): cheap to repeat anywhere."""
    return (
        n.op == "call_function" and n.target is operator.getitem and n.args[0].op == "placeholder"
    )


def split_sinks(gm):
    """(prefix GraphModule, suffix GraphModule) or None (no Python calls, or one feeds tensor work)."""
    nodes = list(gm.graph.nodes)
    calls = {n for n in nodes if _is_python_call(n)}
    if not calls:
        return None
    for n in nodes:  # getitems of an opaque call's tuple belong with it
        if n.op == "call_function" and n.target is operator.getitem and n.args[0] in calls:
            calls.add(n)
    for n in calls:
        for u in n.users:
            if u not in calls:
                return None  # a Python call feeds tensor work (or the output)
    out_node = gm.graph.output_node()
    prefix = torch.fx.Graph()
    env = {}
    needed = []
    for n in nodes:
        if n.op == "placeholder":
            env[n] = prefix.placeholder(n.name)
            env[n].meta = dict(n.meta)
        elif n.op == "output" or n in calls:
            continue
        else:
            env[n] = prefix.node_copy(n, lambda a: env[a])
            if not _is_free(n) and any(u in calls or u is out_node for u in n.users):
                needed.append(n)
    prefix.output(tuple(env[n] for n in needed))
    prefix.eliminate_dead_code()

    suffix = torch.fx.Graph()
    env2 = {}
    phs = [n for n in nodes if n.op == "placeholder"]
    for n in phs:
        env2[n] = suffix.placeholder(n.name)
    outs = suffix.placeholder("prefix_outputs")
    for k, n in enumerate(needed):
        env2[n] = suffix.call_function(operator.getitem, (outs, k))
        env2[n].meta = dict(n.meta)
    for n in nodes:
        if n in calls or (_is_free(n) and any(u in calls for u in n.users)):
            env2[n] = suffix.node_copy(n, lambda a: env2[a])
    suffix.output(torch.fx.node.map_arg(out_node.args[0], lambda a: env2[a]))
    return (
        torch.fx.GraphModule(gm, prefix, class_name="CompiledAutograd"),
        torch.fx.GraphModule(gm, suffix, class_name="CompiledAutogradCalls"),
    )


def count_calls(gm):
    """How many Python calls (hooks, accumulation, opaque backwards) a graph makes."""
    return sum(1 for n in gm.graph.nodes if _is_python_call(n))


class SplitRunner:
    """Runs the compiled tensor work, then the Python calls on its results."""

    __slots__ = ("prefix", "suffix")

    def __init__(self, prefix, suffix):
        self.prefix = prefix
        self.suffix = suffix

    def __call__(self, inputs, sizes, scalars, hooks):
        outs = self.prefix(inputs, sizes, scalars, hooks)
        return self.suffix(inputs, sizes, scalars, hooks, outs)
