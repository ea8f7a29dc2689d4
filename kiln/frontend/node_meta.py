"""What torch.compile writes on the nodes it makes: the user's line (`stack_trace`) and a tensor's
local-variable name (Note [Graph: node names and lines])."""

import linecache

# Note [Graph: node names and lines]
# torch.compile's graphs read like the user's code: a node whose tensor is stored into a local
# (`x = torch.ones(1)`) is renamed after that local the first time (`x`, or `x_1` if taken;
# never a placeholder), and each node carries the user line that made it (`stack_trace`, the
# innermost frame), which the graph's printed code shows as a comment wherever the line changes.
# Neither changes what the graph computes.


def mark_new_nodes(graph, last, code, inst):
    """Give the nodes made after `last` (None: all) that have no line yet the line of `inst`;
    returns how many calls it marked (the calls `inst` made itself, not its inlined callees)
    and how many calls were made after `last` in all."""
    root = graph._root
    node = root.next if last is None or last._erased else last.next
    trace = None
    calls = made = 0
    while node is not root:
        is_call = node.op in ("call_function", "call_method", "call_module")
        made += is_call
        if node.op not in ("placeholder", "output") and "stack_trace" not in node.meta:
            calls += is_call
            if trace is None:
                lineno = inst.lineno or code.co_firstlineno
                text = linecache.getline(code.co_filename, lineno).strip()
                trace = (
                    f'  File "{code.co_filename}", line {lineno}, in {code.co_name}\n    {text}\n'
                )
            node.meta["stack_trace"] = trace
        node = node.next
    return calls, made


def name_after_local(var, name, graph):
    """Rename the node of a tensor stored into local `name`, once (torch.compile's name hint)."""
    node = getattr(var, "proxy", None)
    if node is None or getattr(node, "graph", None) is not graph or node.meta.get("named_by_local"):
        return
    if node.op in ("placeholder", "output", "get_attr") or not name.isidentifier():
        return
    if name == "self" or any(p.target == name for p in graph.find_nodes(op="placeholder")):
        return  # the generated forward's own names: its module and its arguments
    node.meta["named_by_local"] = True
    node._rename(name)
