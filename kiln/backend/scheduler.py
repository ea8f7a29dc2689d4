"""Scheduler: dependencies, dead code elimination, vertical/horizontal fusion, stores and frees.

A kernel Group iterates `outer` ranges (the parallel loops); inside one outer iteration it runs
segments in order: loops over `inner` ranges (pointwise stores and reductions that share the pass)
and scalar statements. Each node has a role in its group:

    flat   a pointwise node of a group with no inner ranges (out[o] = f(o))
    inner  a pointwise node over outer + inner ranges, in a loop segment
    outer  a pointwise node over the outer ranges only (after the reductions it reads)
    red    a reduction over inner ranges, producing one value per outer iteration

    softmax over rows: amax(x) | exp(x - m) summed | exp(x - m) / s  →  one group (N | D), three
    loop segments, the row max and sum kept in registers, only the output written.
"""

import heapq

from kiln.backend.ir import (
    Buffer,
    ComputedBuffer,
    ExternBuffer,
    ExternKernel,
    InputBuffer,
    Ix,
    ReadsHandler,
    Reduction,
    prod,
    set_handler,
    set_range,
)
from kiln.contracts import GraphMeta
from kiln.symbolic.assert_ops import is_assert


class SchedNode:
    """A ComputedBuffer with its loop shape and the buffers it reads."""

    def __init__(self, buf):
        self.buf = buf
        self.name = buf.name
        data = buf.data
        self.is_reduction = isinstance(data, Reduction)
        # size-1 dimensions are dropped for fusion decisions: a (256, 1) row statistic shares
        # the loops of a (256,) reduction; they index as 0 (see index_vars)
        self.full_ranges = tuple(data.ranges)
        self.ranges = tuple(r for r in data.ranges if r != 1)
        self.rranges = tuple(data.reduction_ranges) if self.is_reduction else ()
        self.reduction_type = data.reduction_type if self.is_reduction else None
        self.split = None  # per outer range: the ranges it splits into (_split_outer), or None
        self.reads = {n for n, _ in self.all_loads()}

    def all_loads(self):
        if self.is_reduction:
            return self.loads("red", self.ranges, self.rranges)
        return self.loads("flat", self.ranges, ())

    def vars_for(self, role, outer, inner):
        """Index variables of this node under a role in a group (outer, inner)."""
        ov = [f"o{k}" for k in range(len(outer))]
        iv = [f"r{k}" for k in range(len(inner))]
        for n, s in zip(ov, outer):
            set_range(n, 0, s - 1)
        for n, s in zip(iv, inner):
            set_range(n, 0, s - 1)
        ov, iv = [Ix.var(n) for n in ov], [Ix.var(n) for n in iv]
        if role == "outer" and self.split is not None:  # o0 over [B*T] read as [B, T]
            ov = [
                v // prod(parts[j + 1 :]) % p
                for v, parts in zip(ov, self.split)
                for j, p in enumerate(parts)
            ]
        if role in ("flat", "outer"):
            return ov, []
        if role == "inner":
            return ov + iv, []
        return ov, iv  # red

    def index_vars(self, role, outer, inner):
        """vars_for spread over the node's own dimensions (0 at its size-1 dimensions)."""
        idx, ridx = self.vars_for(role, outer, inner)
        it = iter(idx)
        full = [Ix() if r == 1 else next(it) for r in self.full_ranges]
        return full, ridx

    def loads(self, role, outer, inner):
        idx, ridx = self.index_vars(role, outer, inner)
        h = ReadsHandler()
        with set_handler(h):
            if self.is_reduction:
                self.buf.data.inner_fn(idx, ridx)
            else:
                self.buf.data.inner_fn(idx)
        return h.loads

    def store_index(self, role, outer, inner):
        idx, _ = self.index_vars(role, outer, inner)
        return self.buf.layout.index(idx)


class Group:
    """A fused kernel: outer ranges, inner ranges, member nodes with roles, segments in order."""

    def __init__(self, outer, inner):
        self.outer = tuple(outer)
        self.inner = tuple(inner)
        self.nodes = []
        self.roles = {}
        self.segments = []  # [kind, [SchedNode]] with kind "flat" | "loop" | "outer"
        self.name = None
        self.template = False  # a Triton matmul template and its epilogue (_template)

    def names(self):
        return {n.name for n in self.nodes}

    def __repr__(self):
        segs = "; ".join(f"{k}[{', '.join(n.name for n in ns)}]" for k, ns in self.segments)
        return f"Group({list(self.outer)} | {list(self.inner)}: {segs})"


class ExternGroup:
    """One extern kernel (an ATen call) in the schedule."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.nodes = []

    def names(self):
        return {o.name for o in self.kernel.outputs if isinstance(o, Buffer)}

    def __repr__(self):
        return f"Extern({self.kernel.op})"


def extern_reads(kernel):
    names = set()

    def visit(a):
        if isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], Buffer):
            names.add(a[0].name)
        elif isinstance(a, (list, tuple)):
            for x in a:
                visit(x)

    visit(list(kernel.args))
    visit(list(kernel.kwargs.values()))
    return names


# Note [Scheduler: horizontal fusion needs shared reads]
# A node joins a group that produces something it reads (vertical fusion) or that reads the same
# buffer (one pass over it), never a group it shares no data with: a backward's recomputed layer
# norms, which read only graph inputs, would otherwise all join the first kernel, computed long
# before their use (cold in cache by then) and alive for the whole graph. Tiny groups (a few
# elements, e.g. BatchNorm's step counters) still share one call.
def _related(g, n):
    if _tiny(n.ranges + n.rranges) and _tiny(g.outer + g.inner):
        return True  # scalar work (a step counter): one call for all of it
    for m in g.nodes:
        if m.name in n.reads or (m.reads & n.reads):
            return True
    return False


def _tiny(ranges, limit=64):
    n = 1
    for r in ranges:
        if type(r) is not int:
            return False
        n *= r
    return n <= limit


def _plan_role(g, n):
    """(role, new_outer, new_inner, retag) when n fits g's loop shape, else None."""
    if n.is_reduction:
        if not g.inner:
            if g.outer == n.ranges + n.rranges and n.rranges:
                return "red", n.ranges, n.rranges, "inner"
            if g.outer == n.ranges and n.rranges:
                return "red", n.ranges, n.rranges, "outer"
            return None
        if g.outer == n.ranges and g.inner == n.rranges:
            return "red", g.outer, g.inner, None
        return None
    if not g.inner:
        return ("flat", g.outer, g.inner, None) if n.ranges == g.outer else None
    if n.ranges == g.outer + g.inner:
        return "inner", g.outer, g.inner, None
    if n.ranges == g.outer:
        return "outer", g.outer, g.inner, None
    return None


def _legal(g, n, role, outer, inner, retag, nodes_by_name):
    """Every read of a buffer produced in g reads exactly the element stored in this iteration."""
    members = g.names()
    if not (n.reads & members):
        return True
    for name, ix in n.loads(role, outer, inner):
        if name not in members:
            continue
        p = nodes_by_name[name]
        prole = retag if (retag and g.roles[name] == "flat") else g.roles[name]
        if ix != p.store_index(prole, outer, inner):
            return False
    return True


def _add(g, n, role, outer, inner, retag):
    if retag:
        g.outer, g.inner = tuple(outer), tuple(inner)
        for m in g.nodes:
            g.roles[m.name] = retag
        g.segments = (
            [["loop", list(g.nodes)]] if retag == "inner" else [["outer", [m]] for m in g.nodes]
        )
    g.nodes.append(n)
    g.roles[n.name] = role
    if role == "flat":
        if not g.segments:
            g.segments.append(["flat", []])
        g.segments[-1][1].append(n)
    elif role == "outer":
        g.segments.append(["outer", [n]])
    else:
        last = g.segments[-1] if g.segments else None
        if last and last[0] == "loop":
            reds = {m.name for m in last[1] if g.roles[m.name] == "red"}
            if not (n.reads & reds):
                last[1].append(n)
                return
        g.segments.append(["loop", [n]])


def _template(n):
    """Whether a node is a Triton matmul template (Note [Triton: the matmul template]): it starts
    its own group, which takes only pointwise nodes over its outputs (its epilogue)."""
    return getattr(n.buf.data, "matmul", None) is not None


# Note [Scheduler: a template's epilogue over a reshaped result]
# A linear layer on [B, T, C] is a matmul over [B*T, C] viewed as [B, T, N]: the bias and the
# activation run over [B, T, N]. A matmul template's group takes such a pointwise node as its
# epilogue when the node's ranges split the group's ranges in order ([B, T, N] splits [B*T, N]):
# its index variables are the group's, divided back (b = o0 // T, t = o0 % T), which the index
# folding turns back into o0 where a read or store is the flat element (Note [Backend: index
# expressions]); the usual check (`_legal`) then sees it reading the matmul at the same element.
def _split_outer(ranges, outer):
    """Per range of `outer`, the consecutive `ranges` whose product it is; None if none."""
    if not all(type(r) is int for r in (*ranges, *outer)):
        return None
    out, i = [], 0
    for size in outer:
        parts, p = [], 1
        while i < len(ranges) and p < size:
            p *= ranges[i]
            parts.append(ranges[i])
            i += 1
        if p != size:
            return None
        out.append(tuple(parts))
    return out if i == len(ranges) else None


def _topological(graph):
    """The operations in dependency order, otherwise in creation order (late-bound loaders can
    make an earlier-created loop read a buffer realized after it)."""
    ops_ = list(graph.operations)
    producer = {}
    for i, op in enumerate(ops_):
        if isinstance(op, ExternKernel):
            for o in op.outputs:
                if isinstance(o, Buffer):
                    producer[o.name] = i
        else:
            producer[op.name] = i
    deps = []
    for i, op in enumerate(ops_):
        reads = extern_reads(op) if isinstance(op, ExternKernel) else SchedNode(op).reads
        d = {producer[r] for r in reads if r in producer and producer[r] != i}
        if isinstance(op, ExternKernel):  # externs keep their relative order (RNG, side effects)
            prev = [j for j in range(i) if isinstance(ops_[j], ExternKernel)]
            if prev:
                d.add(prev[-1])
        deps.append(d)
    _after_checks(ops_, deps)
    users = [[] for _ in ops_]
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    indeg = [len(d) for d in deps]
    ready = [i for i, n in enumerate(indeg) if n == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(ops_[i])
        for u in users[i]:
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(ready, u)
    assert len(order) == len(ops_), "cycle in the lowered program"
    return order


# Note [Scheduler: run-time checks are barriers]
# A run-time assertion (`aten._assert_async`, `kiln::assert_true`: Note [Asserts: operators
# every backend runs]) is an extern call with no output, so nothing orders the work after it: a
# kernel writing a mutated input in place could run (or fuse into a group) before the check and
# leave its write behind when the check raises. Every operation after a check in the program that
# the check does not itself need runs after it, and never joins a group before it.
def _is_check(op):
    return isinstance(op, ExternKernel) and is_assert(op.op)


def _after_checks(ops_, deps):
    """Make every operation after a check (and not needed by it) depend on it."""
    for b, op in enumerate(ops_):
        if not _is_check(op):
            continue
        needed, stack = set(), list(deps[b])
        while stack:
            j = stack.pop()
            if j not in needed:
                needed.add(j)
                stack.extend(deps[j])
        for i in range(b + 1, len(ops_)):
            if i not in needed:
                deps[i].add(b)


def schedule(graph):
    """Group the graph's operations into fused kernels and extern calls, in a legal order."""
    graph.operations = _topological(graph)
    live = _live_names(graph)
    groups, where = [], {}
    nodes_by_name = {}
    barrier = -1  # the group of the last run-time check (Note [Scheduler: run-time checks ...])
    for op in graph.operations:
        if isinstance(op, ExternKernel):
            eg = ExternGroup(op)
            groups.append(eg)
            if _is_check(op):
                barrier = len(groups) - 1
            for o in op.outputs:
                if isinstance(o, Buffer):
                    where[o.name] = len(groups) - 1
            continue
        if op.name not in live:
            continue
        n = SchedNode(op)
        nodes_by_name[n.name] = n
        first = max([where[r] for r in n.reads if r in where], default=barrier)
        first = max(first, barrier)
        placed = False
        template = _template(n)
        for gi in range(max(first, 0), len(groups)):
            g = groups[gi]
            if template or not isinstance(g, Group):
                continue
            if not _related(g, n):
                continue
            plan = _plan_role(g, n)
            if g.template and plan is None and not n.is_reduction:
                n.split = _split_outer(n.ranges, g.outer)  # Note [Scheduler: a template's ...]
                plan = None if n.split is None else ("outer", g.outer, g.inner, None)
            if plan is None or (g.template and plan[0] != "outer"):
                continue
            if g.nodes and _legal(g, n, *plan, nodes_by_name):
                _add(g, n, *plan)
                where[n.name] = gi
                placed = True
                break
            n.split = None
        if not placed:
            if n.is_reduction:
                g = Group(n.ranges, n.rranges)
                g.template = template
                _add(g, n, "red", n.ranges, n.rranges, None)
            else:
                g = Group(n.ranges, ())
                _add(g, n, "flat", n.ranges, (), None)
            groups.append(g)
            where[n.name] = len(groups) - 1
    k = 0
    for g in groups:
        if isinstance(g, Group):
            g.name = f"kernel{k}"
            k += 1
    return groups


def _live_names(graph):
    live = set()
    for o in graph.outputs:
        if o[0] in ("buf", "view"):
            live.add(o[1])
    for op in reversed(graph.operations):
        if isinstance(op, ExternKernel):
            live |= extern_reads(op)
        elif isinstance(op, ComputedBuffer) and op.name in live:
            live |= SchedNode(op).reads
    return live


def plan_memory(graph, groups):
    """Which buffers each group must store, and after which group each buffer can be freed."""
    outputs = {o[1] for o in graph.outputs if o[0] in ("buf", "view")}
    consumers = {}  # buffer -> set of group indices reading it
    seg_of = {}
    for gi, g in enumerate(groups):
        if isinstance(g, ExternGroup):
            for r in extern_reads(g.kernel):
                consumers.setdefault(r, set()).add(gi)
            continue
        for si, (_, ns) in enumerate(g.segments):
            for n in ns:
                seg_of[n.name] = (gi, si)
        for n in g.nodes:
            for r in n.reads:
                consumers.setdefault(r, set()).add(gi)
    stores = set()
    for gi, g in enumerate(groups):
        if not isinstance(g, Group):
            continue
        for n in g.nodes:
            cons = consumers.get(n.name, set())
            if n.name in outputs or any(c != gi for c in cons):
                stores.add(n.name)
                continue
            if g.roles[n.name] in ("inner", "flat"):
                _, si = seg_of[n.name]
                for m in g.nodes:
                    if n.name in m.reads and seg_of[m.name][1] != si:
                        stores.add(n.name)
    inplace = _plan_inplace(groups, stores, outputs, consumers)
    _plan_inplace_over_inputs(graph, groups, stores, outputs, consumers, inplace)
    _plan_input_mutations(graph, groups, stores, consumers, inplace)
    free_after = {}
    for name, cons in consumers.items():
        if name in outputs:
            continue
        free_after.setdefault(max(cons), []).append(name)
    return stores, free_after, inplace


def _plan_inplace(groups, stores, outputs, consumers):
    """{B: A}: B is written over A (same layout, same element) when A's last reader is B.

    Note [Backend: in-place stores]: in softmax, exp(x - max) is stored by the sum pass and read
    once more by the division; the division then writes its result over it, so the kernel needs
    no second row-sized buffer.
    """
    inplace = {}
    for gi, g in enumerate(groups):
        if not isinstance(g, Group):
            continue
        order = [n for _, ns in g.segments for n in ns]
        pos = {n.name: i for i, n in enumerate(order)}
        taken = set()
        for b in order:
            rb = g.roles[b.name]
            if b.name not in stores or rb not in ("inner", "flat"):
                continue
            for a in order[: pos[b.name]]:
                ra = g.roles[a.name]
                if (
                    a.name not in b.reads
                    or ra not in ("inner", "flat")
                    or a.name not in stores
                    or a.name in outputs
                    or a.name in taken
                    or a.name in inplace
                    or consumers.get(a.name, set()) != {gi}
                ):
                    continue
                if any(a.name in m.reads and pos[m.name] > pos[b.name] for m in order):
                    continue
                la, lb = a.buf.layout, b.buf.layout
                if (la.size, la.stride, la.dtype, la.offset) != (
                    lb.size,
                    lb.stride,
                    lb.dtype,
                    lb.offset,
                ):
                    continue
                if a.store_index(ra, g.outer, g.inner) != b.store_index(rb, g.outer, g.inner):
                    continue
                inplace[b.name] = a.name
                taken.add(a.name)
                break
    return inplace


def _fresh_result(kernel):
    """Whether an extern's outputs are new tensors nothing else refers to: an .out call into our
    buffer, or an ATen op whose schema returns no alias of its inputs (a convolution's output may
    then be overwritten by the batch norm reading it; as_strided's may not)."""
    if kernel.out_variant:
        return True
    schema = getattr(kernel.op, "_schema", None)
    if schema is None or schema.is_mutable:
        return False
    return all(r.alias_info is None for r in schema.returns)


def _elementwise_over(g, a, b):
    """Whether b can be stored over buffer a in group g: every read of a in g is by a node at or
    before b, of the element b stores in the same iteration."""
    order = [n for _, ns in g.segments for n in ns]
    pos = {n.name: i for i, n in enumerate(order)}
    rb = g.roles[b.name]
    if rb not in ("inner", "flat", "outer"):
        return False
    readers = [m for m in order if a in m.reads]
    if any(pos[m.name] > pos[b.name] for m in readers):
        return False
    ix = b.store_index(rb, g.outer, g.inner)
    return all(
        i == ix
        for m in readers
        for name, i in m.loads(g.roles[m.name], g.outer, g.inner)
        if name == a
    )


# Note [Backend: mutated inputs written in place]
# A graph input that the program mutates (BatchNorm's running statistics) comes back as a graph
# output that the AOT runtime copies into the input. When the compiler is told which outputs are
# new values of which inputs (`GraphMeta.input_mutations`, {output: input}, set by the AOT layer
# for inputs that need no grad), the kernel computing the new value writes it into the input's
# memory directly, if the input is read nowhere after that kernel, by no ATen call, is no output
# itself, and has the same layout; the runtime's copy is then skipped (same memory).
def _plan_input_mutations(graph, groups, stores, consumers, inplace):
    mutations = GraphMeta.of(graph.gm).input_mutations or {}
    if not mutations:
        return
    taken = set(inplace.values()) | set(inplace)
    out_names = [o[1] if o[0] in ("buf", "view") else None for o in graph.outputs]
    where = {n.name: gi for gi, g in enumerate(groups) if isinstance(g, Group) for n in g.nodes}
    for k, i in mutations.items():
        if k >= len(out_names) or i >= len(graph.inputs) or graph.outputs[k][0] != "buf":
            continue
        b_name, arg = out_names[k], graph.inputs[i]
        if not isinstance(arg, InputBuffer) or b_name not in where or b_name not in stores:
            continue
        if out_names.count(b_name) != 1 or arg.name in out_names or b_name in taken:
            continue
        gi = where[b_name]
        g = groups[gi]
        cons = consumers.get(arg.name, set())
        if any(c > gi or not isinstance(groups[c], Group) for c in cons):
            continue
        b = next(n for n in g.nodes if n.name == b_name)
        la, lb = arg.layout, b.buf.layout
        if (la.size, la.stride, la.dtype, la.offset) != (lb.size, lb.stride, lb.dtype, lb.offset):
            continue
        if la.device != lb.device:  # Note [Backend: graphs on two devices]
            continue
        if gi in cons and not _elementwise_over(g, arg.name, b):
            continue
        inplace[b_name] = arg.name
        taken |= {b_name, arg.name}


def _plan_inplace_over_inputs(graph, groups, stores, outputs, consumers, inplace):
    """Add {B: A} where a kernel's stored B is written over a buffer A that an earlier group or
    an .out call made and whose last reader is this kernel (Note [Backend: in-place stores]).

    Every read of A in the kernel must be of the element B stores in the same iteration, by a
    node at or before B: a pointwise `y = x * 2 + 1` over a dying `x` needs no new buffer.
    """
    taken = set(inplace.values()) | set(inplace)
    for gi, g in enumerate(groups):
        if not isinstance(g, Group):
            continue
        order = [n for _, ns in g.segments for n in ns]
        members = g.names()
        for a in sorted(set().union(*(n.reads for n in g.nodes)) - members):
            buf = graph.buffers.get(a)
            ours = (isinstance(buf, ComputedBuffer) and a in stores) or (
                isinstance(buf, ExternBuffer) and _fresh_result(buf.kernel)
            )
            if not ours or a in outputs or a in taken or consumers.get(a) != {gi}:
                continue
            for b in order:
                if b.name not in stores or b.name in taken:
                    continue
                if (
                    b.buf.layout.dtype != buf.layout.dtype
                    or b.buf.layout.device != buf.layout.device
                ):
                    continue
                if _elementwise_over(g, a, b):
                    inplace[b.name] = a
                    taken |= {a, b.name}
                    break
