"""The compiled-graph cache: a trie of node keys, sizes marked dynamic on change, generic graphs.

    Cache miss due to new autograd node: SubBackward0 (NodeCall 2) with key size 9, previous ...
    Cache miss due to changed shapes: marking size idx 0 of torch::autograd::GraphRoot ... dynamic

Note [Compiled autograd: size-generic graphs]
A capture bakes the sizes of built-in nodes in as ints (an inlined symbolic ahead-of-time
backward keeps computing its own from its inputs: capture.py). When a size changes,
it is marked dynamic (in the trie, for good) and the new capture is *anti-unified* with the last
capture of the same structure: both graphs must have the same nodes in the same order, and every
int argument that differs must be, in both captures, the value of one dynamic size (or the
product of two); it is then replaced by `sizes[j]` (a graph input) and the graph serves every later
call whose static sizes match. Where one int is explained by several dynamic sizes, the graph
records that they must stay equal, checked on each hit. Where no such graph exists, captures are
cached per exact sizes instead.
"""

import operator

import torch
import torch.fx
from torch.utils import _pytree as pytree

from kiln import logs
from kiln.compiled_autograd.collect import node_sizes

__all__ = ["CacheNode", "Entry", "lookup", "anti_unify"]

_CH = "compiled_autograd_verbose"


class Entry:
    """A compiled graph with the dynamic size positions it reads and the equalities it assumes."""

    __slots__ = ("fn", "gm", "dyn", "equal")

    def __init__(self, fn, gm, dyn, equal=()):
        self.fn = fn
        self.gm = gm
        self.dyn = dyn
        self.equal = equal  # (expr, expr | int): dynamic sizes the graph assumes equal / fixed

    def valid(self, flat):
        for p in self.dyn:  # Note [Compiled autograd: 0/1 specialization]
            if flat[p] < 2:
                return False
        for a, b in self.equal:
            if _value(a, flat) != (b if isinstance(b, int) else _value(b, flat)):
                return False
        return True


def _value(expr, flat):
    v = 1
    for p in expr:
        v *= flat[p]
    return v


# (equalities only ever compare expressions built from dynamic positions and fixed values: a
# static factor of a product is in the trie's expected sizes, so it is the same on every hit)


class CacheNode:
    """One trie level: children by node key, expected sizes (None = dynamic), entries at leaves."""

    __slots__ = ("children", "expected", "entry", "static", "last", "failed", "fast", "generation")

    def __init__(self, expected=()):
        self.fast = {}  # (root only) tuple of a call's keys -> _Fast (Note [... the hot path])
        self.generation = 0  # (root only) bumped when the trie changes: older _Fast are stale
        self.failed = None  # why this structure could not be captured (it then runs eagerly)
        self.children = {}
        self.expected = list(expected)
        self.entry = None  # Entry: serves every call whose dynamic positions are entry.dyn
        self.static = {}  # exact flat sizes -> Entry (when no generic graph exists)
        self.last = None  # (gm, flat sizes) of the last capture here


# Note [Compiled autograd: the hot path]
# A training loop calls .backward() on graphs of one structure, so after the first walk of the
# trie for a structure, the whole walk is remembered against the tuple of the call's keys: a hit
# is then one dict lookup (hashing the keys in C) and one C-level comparison of the sizes that
# are not dynamic, instead of a Python loop over every node and every size. Any change of the
# trie (a new node, a size marked dynamic) bumps the root's generation, which voids every
# remembered walk; the next call walks the trie again (and logs what changed) as before.


class _Fast:
    """A remembered trie walk: its leaf, dynamic positions and the static sizes it expects."""

    __slots__ = ("generation", "leaf", "dyn", "sizes", "static_pos", "static_vals")

    def __init__(self, generation, leaf, dyn, path, g):
        self.generation = generation
        self.leaf = leaf
        self.dyn = dyn
        if not dyn:
            self.sizes = list(g.sizes)  # every size static: compared as groups, not flattened
            self.static_pos = self.static_vals = None
        else:
            self.sizes = None
            expected = [e for node in path for e in node.expected]
            self.static_pos = [p for p, e in enumerate(expected) if e is not None]
            self.static_vals = [expected[p] for p in self.static_pos]

    def matches(self, g):
        if self.sizes is not None:
            return g.sizes == self.sizes
        flat = g.flat_sizes
        return len(flat) == len(self.static_vals) + len(self.dyn) and (
            list(map(flat.__getitem__, self.static_pos)) == self.static_vals
        )


def lookup(root, g):
    """Walk the trie with g's keys; returns (leaf, dynamic positions, hit Entry or None)."""
    keys = tuple(g.keys)
    fast = root.fast.get(keys)
    if fast is not None and fast.generation == root.generation and fast.matches(g):
        return fast.leaf, fast.dyn, _entry(fast.leaf, fast.dyn, g)
    cur = root
    path = []
    changed = new = False
    dyn = []
    pos = 0
    for k, (key, groups) in enumerate(zip(g.keys, g.sizes)):
        sizes = node_sizes(groups)
        child = cur.children.get(key)
        if child is None:
            if not new and logs.enabled(_CH):  # the first new node of this call is the reason
                prev = [len(c) for c in cur.children]
                name = g.names[k] if k < len(g.names) else "inputs"
                logs.log(
                    _CH,
                    "Cache miss due to new autograd node: %s (NodeCall %d) with key size %d, "
                    "previous key sizes=%s",
                    name,
                    k,
                    len(key) + len(sizes),
                    prev,
                )
            child = cur.children[key] = CacheNode(sizes)
            changed = new = True
        else:
            exp = child.expected
            for i, (e, a) in enumerate(zip(exp, sizes)):
                if e is None:
                    dyn.append(pos + i)
                elif e != a:
                    exp[i] = None
                    dyn.append(pos + i)
                    changed = True
                    logs.log(
                        _CH,
                        "Cache miss due to changed shapes: marking size idx %d of %s (NodeCall %d)"
                        " as dynamic",
                        i,
                        g.names[k] if k < len(g.names) else "inputs",
                        k,
                    )
        pos += len(sizes)
        cur = child
        path.append(cur)
    dyn = tuple(dyn)
    if changed:
        root.generation += 1
        return cur, dyn, None
    if len(root.fast) > 64:  # structures alternate rarely: keep the table small
        root.fast.clear()
    root.fast[keys] = _Fast(root.generation, cur, dyn, path, g)
    return cur, dyn, _entry(cur, dyn, g)


def _entry(cur, dyn, g):
    """The Entry at a trie leaf that serves g's sizes, or None."""
    flat = None
    e = cur.entry
    if e is not None and e.dyn == dyn:
        if not dyn:
            return e
        flat = g.flat_sizes
        if e.valid(flat):
            return e
    if cur.static:
        e = cur.static.get(tuple(flat or g.flat_sizes))
        if e is not None:
            return e
    return None


# --- anti-unification ----------------------------------------------------------------------------

# Note [Compiled autograd: 0/1 specialization]
# Backward formulas branch on sizes 0 and 1 (broadcast reductions, empty tensors): two captures
# with sizes >= 2 say nothing about what a size of 0 or 1 would trace. So a size-generic graph is
# only built from, and only serves, calls whose dynamic sizes are all >= 2 (as torch's symbolic
# shapes specialize 0 and 1); any other call is captured for its exact sizes.


def anti_unify(gm_a, flat_a, gm_b, flat_b, dyn):
    """gm_b with its size ints that vary between the captures read from `sizes` (None if none).

    Returns (gm, equalities) where gm reads sizes[j] for dynamic position dyn[j].
    """
    nodes_a = list(gm_a.graph.nodes)
    nodes_b = list(gm_b.graph.nodes)
    if len(nodes_a) != len(nodes_b):
        return None
    pairs = {}
    varying = [p for p in dyn if flat_a[p] != flat_b[p]]
    if not varying or any(flat_a[p] < 2 or flat_b[p] < 2 for p in dyn):
        return None
    rewrites = {}  # node_b -> (args, kwargs) with ("size", expr) markers
    equal = set()
    for na, nb in zip(nodes_a, nodes_b):
        if na.op != nb.op or na.target != nb.target:
            return None
        pairs[na] = nb
        la, sa = pytree.tree_flatten((na.args, na.kwargs))
        lb, sb = pytree.tree_flatten((nb.args, nb.kwargs))
        if sa != sb or len(la) != len(lb):
            return None
        new, touched = [], False
        for xa, xb in zip(la, lb):
            if isinstance(xa, torch.fx.Node) or isinstance(xb, torch.fx.Node):
                if not (isinstance(xa, torch.fx.Node) and isinstance(xb, torch.fx.Node)):
                    return None
                if pairs.get(xa) is not xb:
                    return None
                new.append(xb)
            elif type(xa) is int and type(xb) is int and xa != xb:
                cands = _explain(xa, xb, flat_a, flat_b, varying)
                if not cands:
                    return None
                for other in cands[1:]:
                    equal.add((cands[0], other))
                new.append(("__kiln_size__", cands[0]))
                touched = True
            elif type(xa) is not type(xb) or xa != xb:
                if not (isinstance(xa, float) and xa != xa and xb != xb):
                    return None
                new.append(xb)
            else:
                new.append(xb)
        if touched:
            rewrites[nb] = (new, sb)
    # (no rewrite: the graph computes every size that varied from its inputs, e.g. an inlined
    # symbolic ahead-of-time backward; it serves the other sizes as it is)
    for p in dyn:
        if p not in varying:  # dynamic, but equal in both captures: baked in, so checked on hits
            equal.add(((p,), flat_b[p]))
    groups = {}
    for p in varying:  # sizes that moved together may have been used for each other: keep them so
        groups.setdefault((flat_a[p], flat_b[p]), []).append(p)
    for ps in groups.values():
        equal.update(((ps[0],), (q,)) for q in ps[1:])
    graph = torch.fx.Graph()  # a copy: gm_b stays the raw capture that later ones compare with
    val_map = {}
    graph.output(graph.graph_copy(gm_b.graph, val_map))
    rewrites = {
        val_map[n]: ([val_map[x] if isinstance(x, torch.fx.Node) else x for x in flat], spec)
        for n, (flat, spec) in rewrites.items()
    }
    sizes_ph = next(n for n in graph.nodes if n.op == "placeholder" and n.name == "sizes")
    anchor = sizes_ph
    for n in graph.nodes:
        if n.op == "placeholder":
            anchor = n
    getters = {}

    def size_node(expr):
        if expr in getters:
            return getters[expr]
        nonlocal anchor
        with graph.inserting_after(anchor):
            if len(expr) == 1:
                node = graph.call_function(operator.getitem, (sizes_ph, dyn.index(expr[0])))
            else:
                a, b = (size_node((p,)) if p in dyn else flat_b[p] for p in expr)
                with graph.inserting_after(anchor):
                    node = graph.call_function(operator.mul, (a, b))
        anchor = node
        getters[expr] = node
        return node

    for nb, (flat_args, spec) in rewrites.items():
        flat_args = [
            size_node(x[1]) if isinstance(x, tuple) and x[:1] == ("__kiln_size__",) else x
            for x in flat_args
        ]
        args, kwargs = pytree.tree_unflatten(flat_args, spec)
        nb.args = tuple(args)
        nb.kwargs = dict(kwargs)
    graph.lint()
    return torch.fx.GraphModule(gm_b, graph, class_name="CompiledAutograd"), tuple(equal)


def _explain(xa, xb, flat_a, flat_b, varying):
    """Size expressions (a position, or the product of a varying position and any other) equal to
    xa in the first capture and xb in the second. A static factor is a constant on every hit (the
    trie checks it); a dynamic one that did not vary is pinned by an equality (anti_unify)."""
    found = [(p,) for p in varying if flat_a[p] == xa and flat_b[p] == xb]
    if found:
        return found
    for p in varying:
        if flat_a[p] == 0 or xa % flat_a[p] or flat_b[p] == 0 or xb % flat_b[p]:
            continue
        for q in range(len(flat_b)):
            if flat_a[p] * flat_a[q] == xa and flat_b[p] * flat_b[q] == xb:
                found.append((p, q) if p <= q or q not in varying else (q, p))
    return list(dict.fromkeys(found))
