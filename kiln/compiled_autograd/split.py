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

__all__ = ["split_sinks", "SplitRunner", "count_calls", "split_chunks", "ChunkRunner"]

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


# Note [Compiled autograd: chunks]
# When Python calls feed tensor work (a hook on a non-leaf tensor, an opaque custom Function),
# the graph is cut into runs of tensor work between those calls: sink calls first move to the end
# (Note [Compiled autograd: sinks]); each run becomes its own GraphModule (inputs: the values it
# reads that were made before it; outputs: the values read after it) handed to the compiler; the
# calls run in between, in graph order. The compiler sees several graphs instead of one, but
# each is whole (fullgraph compilers accept them) and nothing runs out of order.


def _sinks(nodes, calls):
    """Python calls from which no tensor work is reachable (closed under users)."""
    sinks = set()
    for n in reversed(nodes):
        if n in calls and all(u in sinks or u.op == "output" for u in n.users):
            if not any(u.op == "output" for u in n.users):
                sinks.add(n)
    return sinks


def split_chunks(gm):
    """[("graph", GraphModule, in_nodes, out_nodes) | ("call", node)], in run order; or None."""
    nodes = list(gm.graph.nodes)
    calls = {n for n in nodes if _is_python_call(n)}
    if not calls:
        return None
    for n in nodes:
        if n.op == "call_function" and n.target is operator.getitem and n.args[0] in calls:
            calls.add(n)
    sinks = _sinks(nodes, calls)
    # reads of the hooks list run first, in Python: a compiled graph would guard on the objects
    hook_reads = [
        n
        for n in nodes
        if _is_free(n) and n.args[0].name == "hooks" and all(u in calls for u in n.users)
    ]
    calls.update(hook_reads)
    first = set(hook_reads)
    body = [
        n
        for n in nodes
        if n.op not in ("placeholder", "output") and n not in sinks and n not in first
    ]
    order = hook_reads + body + [n for n in nodes if n in sinks]
    runs, cur = [], []
    for n in order:
        if n in calls:
            if cur:
                runs.append(cur)
                cur = []
            runs.append(n)
        else:
            cur.append(n)
    if cur:
        runs.append(cur)
    pos = {n: i for i, n in enumerate(order)}
    out_node = gm.graph.output_node()
    steps = []
    for run in runs:
        if isinstance(run, torch.fx.Node):
            steps.append(("call", run))
            continue
        members = set(run)
        last = max(pos[n] for n in run)
        ins, outs = [], []
        for n in run:
            for a in n.all_input_nodes:
                if a not in members and a not in ins:
                    ins.append(a)
            if any(u is out_node or (u not in members and pos.get(u, -1) > last) for u in n.users):
                outs.append(n)
        graph = torch.fx.Graph()
        env = {}
        for a in ins:
            env[a] = graph.placeholder(a.name)
            env[a].meta = dict(a.meta)
        for n in run:
            env[n] = graph.node_copy(n, env.__getitem__)
        graph.output(tuple(env[n] for n in outs))
        sub = torch.fx.GraphModule(gm, graph, class_name="CompiledAutograd")
        steps.append(("graph", sub, ins, outs))
    return steps


class ChunkRunner:
    """Runs the chunks (compiled) and the Python calls between them on an environment of values."""

    def __init__(self, gm, steps):
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.output = gm.graph.output_node().args[0]
        self.steps = steps

    def __call__(self, *args):
        env = dict(zip(self.placeholders, args))
        for step in self.steps:
            if step[0] == "call":
                n = step[1]
                a, kw = torch.fx.node.map_arg((n.args, n.kwargs), env.__getitem__)
                env[n] = n.target(*a, **kw)
            else:
                _, fn, ins, outs = step
                vals = fn(*[env[a] for a in ins])
                for n, v in zip(outs, vals):
                    env[n] = v
        return torch.fx.node.map_arg(self.output, env.__getitem__)
