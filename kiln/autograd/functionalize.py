"""Remove mutation from a traced ATen graph: functional ops, scatter-back through views, epilogue.

    def forward(x):                              def forward(x):
        y = aten.mul.Tensor(x, 2)                    y = aten.mul.Tensor(x, 2)
        r = aten.select.int(y, 0, 0)                 r = aten.select.int(y, 0, 0)
        aten.add_.Tensor(r, 1)          ==>          add = aten.add.Tensor(r, 1)
        aten.mul_.Tensor(x, 3)                       y_1 = aten.select_scatter(y, add, 0, 0)
        return (y,)                                  mul_1 = aten.mul.Tensor(x, 3)
                                                     return (mul_1, y_1)     # mutated input first

The result lists the mutated inputs (the caller copies the new values into them: the epilogue) and,
for each output, whether it aliases an input or another output (regenerated as a view at run time).
"""

import dataclasses
import operator

import torch
import torch.fx
from torch.utils import _pytree as pytree

from kiln.autograd.aten_tracer import SizeNodes
from kiln.exc import Unsupported
from kiln.symbolic import assert_ops, graph_constants
from kiln.symbolic.fake import (
    _SYM_TYPES,
    METADATA_MUTATIONS,
    FakeMode,
    ProxyTensor,
    is_view_op,
    same_layout,
    same_sizes,
)
from kiln.symbolic.shape_env import SymNode, from_torch

aten = torch.ops.aten

__all__ = ["FunctionalizeResult", "OutputAlias", "functionalize", "functional_variant"]


@dataclasses.dataclass
class OutputAlias:
    """Output `index` of the original graph is a view of input/output `base` (kind)."""

    kind: str  # "input" (a graph input, maybe itself: chain == []) or "output"
    base: int
    chain: list  # [(view op, args after the first, kwargs)] applied to the base in order


@dataclasses.dataclass
class FunctionalizeResult:
    """The functional graph (outputs: new values of mutated inputs, then the original outputs)."""

    gm: torch.fx.GraphModule
    mutated_inputs: list  # indices of placeholders whose new value is returned (in this order)
    mutated_constants: list  # get_attr targets mutated by the graph (new values follow the inputs)
    output_aliases: list  # per original output: OutputAlias or None


# Note [Functionalize: metadata mutation]
# In-place ops that change a tensor's size or strides (t_, squeeze_, resize_, set_, ...): on a fresh
# value nothing else can see (not an input, not a view, no views taken of it) `x.squeeze_(0)` is
# just `x = squeeze(x)`, and the tracer already moved the tensor to the new node (Note [Tracer:
# metadata mutation]); anything else (inputs, resize_, set_) raises Unsupported, and the caller
# falls back to eager for that graph.

# metadata mutations with a view twin (allowed on fresh values, see metadata_mutation), by overload:
# the twin's overload name differs at times (transpose_.default is transpose.int: nn.GRU's output)
_METADATA_FUNCTIONAL = {
    aten.t_.default: aten.t.default,
    aten.transpose_.default: aten.transpose.int,
    aten.squeeze_.default: aten.squeeze.default,
    aten.squeeze_.dim: aten.squeeze.dim,
    aten.squeeze_.dims: aten.squeeze.dims,
    aten.unsqueeze_.default: aten.unsqueeze.default,
    aten.as_strided_.default: aten.as_strided.default,
    aten.swapaxes_.default: aten.swapaxes.default,
    aten.swapdims_.default: aten.swapdims.default,
    aten.detach_.default: aten.alias.default,
}

# in-place / out= ops whose functional twin is not found by name
_FUNCTIONAL_OVERRIDES = {
    aten.bernoulli_.float: aten.bernoulli.p,
    aten.normal_.default: aten.normal_functional.default,
    aten._native_batch_norm_legit.default: aten._native_batch_norm_legit_functional.default,
    aten._batch_norm_with_update.default: aten._batch_norm_with_update_functional.default,
    aten.rrelu_with_noise.default: aten.rrelu_with_noise_functional.default,
}


def _written_args(func):
    """Schema positions of the arguments an op writes to."""
    schema = func._schema
    return [
        i
        for i, a in enumerate(schema.arguments)
        if a.alias_info is not None and a.alias_info.is_write
    ]


def _type_text(arg):
    return str(arg.type)


def functional_variant(func):
    """The functional OpOverload computing what a mutating op writes (add_ -> add, add.out -> add)."""
    if func in _FUNCTIONAL_OVERRIDES:
        return _FUNCTIONAL_OVERRIDES[func]
    name = func._schema.name.split("::")[1]
    ns = getattr(torch.ops, func.namespace)
    written = {func._schema.arguments[i].name for i in _written_args(func)}
    inplace = name.endswith("_") and not func._overloadname.endswith("out")
    packet = getattr(ns, name[:-1] if inplace else name, None)
    if inplace:  # add_(self, other, alpha) -> add(self, other, alpha)
        want = [(a.name, _type_text(a)) for a in func._schema.arguments]
    else:  # add.out(self, other, alpha, out) -> add(self, other, alpha)
        want = [(a.name, _type_text(a)) for a in func._schema.arguments if a.name not in written]
    if packet is not None:
        preferred = [func._overloadname] if func._overloadname in packet.overloads() else []
        for cand_name in preferred + list(packet.overloads()):
            cand = getattr(packet, cand_name)
            if cand._schema.is_mutable:
                continue
            if [(a.name, _type_text(a)) for a in cand._schema.arguments] == want:
                return cand
    raise Unsupported(f"functionalize: no functional variant for mutating operator {func}")


def _same_meta(a, b):
    """Whether two nodes' vals have the same metadata (so an op on either gives the same val)."""
    va, vb = a.meta.get("val"), b.meta.get("val")
    if va is vb:
        return True
    if isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor):
        return (va.dtype, va.device) == (vb.dtype, vb.device) and same_layout(va, vb)
    return False


# Note [Functionalize: ops that may return self]
# `x.to(dtype)` and `x.contiguous()` return x itself when nothing changes (same dtype, device,
# strides; no copy=True), and a new tensor otherwise; their schemas mark the result as an alias
# either way. Decompositions use them so (batch norm's `out.to(x.dtype)`), and the result may
# then be mutated in place (`out += shortcut`). Which case happened is read from the traced
# values: the same metadata means the op returned its input, and the node is that input (a write
# to it is a write to the input, as for an in-place op returning self); otherwise it is a fresh
# value like any other op's.
_MAYBE_ALIAS = (aten.to, aten.contiguous)


def _returns_self(n, func):
    """Whether the traced `to`/`contiguous` node n returned its input itself (None: unknown,
    treated as a view)."""
    src = n.args[0] if n.args else None
    out, src = n.meta.get("val"), src.meta.get("val") if isinstance(src, torch.fx.Node) else None
    if not isinstance(out, torch.Tensor) or not isinstance(src, torch.Tensor):
        return None
    names = [a.name for a in func._schema.arguments]
    if "copy" in names:
        i = names.index("copy")
        if (n.args[i] if i < len(n.args) else n.kwargs.get("copy", False)) is True:
            return False
    if (out.dtype, out.device, out.layout) != (src.dtype, src.device, src.layout):
        return False
    sizes = [*out.shape, *out.stride(), *src.shape, *src.stride()]
    if not all(isinstance(x, int) for x in sizes):
        return None  # (symbolic sizes: left to the view path)
    return tuple(out.shape) == tuple(src.shape) and out.stride() == src.stride()


def _val(x):
    return x.meta["val"] if isinstance(x, torch.fx.Node) else x


class _Functionalizer:
    def __init__(self, gm):
        self.old = gm
        self.graph = torch.fx.Graph()
        self.env = {}  # old node -> new node, for nodes that do not alias (or not yet mutated)
        self.root = {}  # old node -> old node owning the storage
        self.parent = {}  # old view node -> (old parent node, op, args, kwargs) replay recipe
        self.alias_to = {}  # old mutating node -> old node it returns (self / out=)
        self.version = {}  # old root -> number of writes so far
        self.current = {}  # old node -> (version, new node) latest known value
        self.sizes = SizeNodes(self.graph)  # Note [Tracer: size nodes]

    # --- emitting ---
    def emit(self, op, args, kwargs=None, name=None):
        """A new node with its val computed on the fake values of its arguments."""
        kwargs = kwargs or {}
        if name is None and isinstance(op, torch._ops.OpOverload):
            name = op.__name__.split(".")[0]
        args, kwargs = pytree.tree_map_only(_SYM_TYPES, self.sizes.arg, (tuple(args), kwargs))
        node = self.graph.create_node("call_function", op, tuple(args), kwargs, name=name)
        vargs, vkwargs = pytree.tree_map_only(torch.fx.Node, _val, (tuple(args), kwargs))
        if any(isinstance(x, torch.Tensor) for x in pytree.tree_leaves((vargs, vkwargs))):
            node.meta["val"] = op(*vargs, **vkwargs)
        else:  # a factory (ones([2, s])): no fake argument routes it, so run it under FakeMode
            with FakeMode():
                node.meta["val"] = op(*vargs, **vkwargs)
        return node

    def copy(self, n):
        """n unchanged but for its inputs' current values (its val reused when they are the same)."""
        args, kwargs = self.map(n.args), self.map(n.kwargs)
        news = [self.get(a) for a in n.all_input_nodes]
        if all(_same_meta(new, old) for new, old in zip(news, n.all_input_nodes)):
            node = self.graph.create_node("call_function", n.target, args, kwargs, name=n.name)
            node.meta["val"] = val = n.meta.get("val")
            size = from_torch(val) if isinstance(val, torch.SymInt) else None
            if isinstance(size, SymNode):  # a size node: reuse it for this expression
                self.sizes.memo.setdefault(size.env.simplify(size.expr), node)
            return node
        return self.emit(n.target, args, kwargs, name=n.name)

    # --- reading the current value of an old node ---
    def get(self, old):
        if not isinstance(old, torch.fx.Node):
            return old
        if old in self.alias_to:
            return self.get(self.alias_to[old])
        root = self.root.get(old)
        if root is None:
            return self.env[old]
        ver = self.version[root]
        cached = self.current.get(old)
        if cached is not None and cached[0] == ver:
            return cached[1]
        if old is root:
            raise AssertionError("root value always current")
        p, op, args, kwargs = self.parent[old]
        _check_as_strided(op, p, root)
        if isinstance(op, _SplitItem):
            multi = self.emit(op.func, (self.get(p), *self.map(op.args)), self.map(op.kwargs))
            new = self.emit(operator.getitem, (multi, op.i), name=old.name)
        else:
            new = self.emit(op, (self.get(p), *self.map(args)), self.map(kwargs), name=old.name)
        self.current[old] = (ver, new)
        return new

    def map(self, x):
        return pytree.tree_map_only(torch.fx.Node, self.get, x)

    # --- writing a new value into an old node (through its views) ---
    def write(self, old, value):
        if old in self.alias_to:
            return self.write(self.alias_to[old], value)
        root = self.root[old]
        oval = _val(old)
        vval = value.meta["val"]
        if vval.dtype != oval.dtype:
            value = self.emit(aten._to_copy.default, (value,), {"dtype": oval.dtype})
        if not same_sizes(vval, oval):
            value = self.emit(aten.expand.default, (value, list(oval.shape)))
        if old is not root:
            p, op, args, kwargs = self.parent[old]
            _check_as_strided(op, p, root)
            self.write(p, self.scatter(self.get(p), value, op, self.map(args), self.map(kwargs), p))
        else:
            self.version[root] += 1
        self.current[old] = (self.version[root], value)

    def scatter(self, parent, value, op, args, kwargs, parent_old):
        """The parent's new value after `op(parent, *args)` was overwritten with value."""
        pval = _val(parent_old)
        pshape = list(pval.shape)
        if op in (aten.alias.default, aten.detach.default, aten.lift_fresh.default):
            return value
        if op is aten.select.int:
            return self.emit(aten.select_scatter.default, (parent, value, *args), kwargs)
        if op is aten.slice.Tensor:
            return self.emit(aten.slice_scatter.default, (parent, value, *args), kwargs)
        if op is aten.diagonal.default:
            return self.emit(aten.diagonal_scatter.default, (parent, value, *args), kwargs)
        if op is aten.as_strided.default:
            return self.emit(aten.as_strided_scatter.default, (parent, value, *args), kwargs)
        if op in (aten.t.default, aten.transpose.int, aten.permute.default):
            if op is aten.permute.default:
                dims = [d % len(pshape) for d in args[0]]
                inv = [dims.index(i) for i in range(len(dims))]
                return self.emit(aten.permute.default, (value, inv))
            return self.emit(op, (value, *args), kwargs)
        if op in (
            aten.view.default,
            aten._unsafe_view.default,
            aten._reshape_alias.default,
            aten.unsqueeze.default,
            aten.squeeze.dim,
            aten.squeeze.dims,
            aten.squeeze.default,
            aten.reshape.default,
        ):
            try:
                value.meta["val"].view(pshape)  # fake: a symbolic view checks its strides
            except RuntimeError:
                value = self.emit(
                    aten.clone.default, (value,), {"memory_format": torch.contiguous_format}
                )
            return self.emit(aten.view.default, (value, pshape))
        if isinstance(op, _SplitItem):
            return self.scatter_split_item(parent, value, op, pshape)
        raise Unsupported(f"functionalize: mutation through the view {op}")

    def scatter_split_item(self, parent, value, op, pshape):
        f, args, kwargs, i = op.func, list(op.args), dict(op.kwargs), op.i
        names = [a.name for a in f._schema.arguments[1:]]
        bound = dict(zip(names, args))
        bound.update(kwargs)
        dim = bound.get("dim", 0) % len(pshape)
        if f is aten.unbind.int:
            return self.emit(aten.select_scatter.default, (parent, value, dim, i))
        if f in (aten.split.Tensor, aten.unsafe_split.Tensor):
            size = bound["split_size"]
            start = i * size
            end = start + size  # slice_scatter clamps the end to the size
        elif f in (aten.split_with_sizes.default, aten.unsafe_split_with_sizes.default):
            sizes = bound["split_sizes"]
            start = sum(sizes[:i])
            end = start + sizes[i]
        else:
            raise Unsupported(f"functionalize: mutation through an item of {f}")
        return self.emit(aten.slice_scatter.default, (parent, value, dim, start, end, 1))

    # --- the pass ---
    def run(self):
        mutable_roots = []
        for n in self.old.graph.nodes:
            if n.op == "placeholder":
                new = self.graph.placeholder(n.name)
                new.meta.update(n.meta)
                self.env[n] = new
                self._make_root(n, new)
                mutable_roots.append(n)
            elif n.op == "get_attr":
                new = self.graph.get_attr(n.target)
                new.meta.update(n.meta)
                self.env[n] = new
                self._make_root(n, new)
            elif n.op == "call_function":
                self.call_function(n)
            elif n.op == "output":
                self.output(n, mutable_roots)
        _drop_identity_views(self.graph)
        gm = graph_constants.graph_module(self.old, self.graph)
        gm.graph.eliminate_dead_code(is_impure_node=_is_impure)
        gm.recompile()
        return gm

    def _make_root(self, old, new):
        self.root[old] = old
        self.version[old] = 0
        self.current[old] = (0, new)

    def call_function(self, n):
        func = n.target
        if func is operator.getitem:
            return self.getitem(n)
        if not isinstance(func, torch._ops.OpOverload):
            self.env[n] = self.emit(func, self.map(n.args), self.map(n.kwargs), name=n.name)
            return
        name = func._schema.name.split("::")[-1]
        if name in METADATA_MUTATIONS:
            return self.metadata_mutation(n, func)
        if func is aten.native_batch_norm.default and n.args[5] and n.args[3] is not None:
            return self.batch_norm(n)
        written = _written_args(func)
        if written:
            return self.mutation(n, func, written)
        same = _returns_self(n, func) if func.overloadpacket in _MAYBE_ALIAS else None
        if same is True:
            self.alias_to[n] = n.args[0]  # Note [Functionalize: ops that may return self]
            return
        if (
            same is None
            and is_view_op(func)
            and isinstance(n.args[0], torch.fx.Node)
            and n.args[0] in self.root
        ):
            return self.view(n, func)
        new = self.copy(n)
        self.env[n] = new
        if isinstance(n.meta.get("val"), ProxyTensor):
            self._make_root(n, new)

    def metadata_mutation(self, n, func):
        """x.squeeze_() on a fresh value without views: continue with squeeze(x) (a new root)."""
        a = n.args[0]
        while a in self.alias_to and isinstance(self.alias_to[a], torch.fx.Node):
            a = self.alias_to[a]
        fop = _METADATA_FUNCTIONAL.get(func)
        fresh = a in self.root and self.root[a] is a and a.op == "call_function"
        if fop is None or not fresh or any(p[0] is a for p in self.parent.values()):
            raise Unsupported(f"functionalize: metadata-mutating operator {func} on {a.name}")
        new = self.emit(fop, (self.get(a), *self.map(n.args[1:])), self.map(n.kwargs), name=n.name)
        self.env[n] = new
        self._make_root(n, new)

    def view(self, n, func):
        src = n.args[0]
        new = self.copy(n)
        if isinstance(n.meta.get("val"), (list, tuple)):
            self.env[n] = new  # split / unbind: the items are the aliases
            self.parent[n] = (src, func, n.args[1:], n.kwargs)
            return
        self.root[n] = self.root[src]
        self.parent[n] = (src, func, n.args[1:], n.kwargs)
        self.current[n] = (self.version[self.root[src]], new)

    def getitem(self, n):
        src, i = n.args
        if src in self.parent and isinstance(src.meta.get("val"), (list, tuple)):
            base, func, args, kwargs = self.parent[src]
            new = self.emit(operator.getitem, (self.env[src], i), name=n.name)
            if self.current.get(src, (None,))[0] != self.version[self.root[base]]:
                multi = self.emit(func, (self.get(base), *self.map(args)), self.map(kwargs))
                new = self.emit(operator.getitem, (multi, i), name=n.name)
            self.root[n] = self.root[base]
            self.parent[n] = (base, _SplitItem(func, args, kwargs, i), (), {})
            self.current[n] = (self.version[self.root[base]], new)
            return
        if src in self.alias_to:
            self.alias_to[n] = self.alias_to[src][i]
            return
        new = self.emit(operator.getitem, (self.env[src], i), name=n.name)
        self.env[n] = new
        if isinstance(n.meta.get("val"), ProxyTensor):
            self._make_root(n, new)

    def mutation(self, n, func, written):
        fvariant = functional_variant(func)
        given, defaults = {}, set()
        for i, a in enumerate(func._schema.arguments):
            if not a.kwarg_only and i < len(n.args):
                given[a.name] = n.args[i]
            elif a.name in n.kwargs:
                given[a.name] = n.kwargs[a.name]
            elif a.has_default_value():
                given[a.name] = a.default_value
                defaults.add(a.name)
        fargs, fkwargs, positional = [], {}, True
        for a in fvariant._schema.arguments:
            if a.name in defaults and a.has_default_value():
                given.pop(a.name, None)
            if a.name not in given:
                positional = False
                continue
            if positional and not a.kwarg_only:
                fargs.append(self.map(given[a.name]))
            else:
                fkwargs[a.name] = self.map(given[a.name])
        new = self.emit(fvariant, fargs, fkwargs, name=n.name)
        targets = [_arg(n, func, i) for i in written]
        if len(targets) == 1 and isinstance(targets[0], (list, tuple)):  # _foreach_add_ etc.
            self.env[n] = None
            for k, t in enumerate(targets[0]):
                self._check_writable(t, n)
                self.write(t, self.emit(operator.getitem, (new, k)))
            return
        nret = len(fvariant._schema.returns)
        if nret == 1:
            values = [new]
        else:
            values = [self.emit(operator.getitem, (new, k)) for k in range(nret)]
        if nret > len(func._schema.returns):  # e.g. batch norm: its outputs, then new buffers
            self.env[n] = new if len(func._schema.returns) > 1 else values[0]
            values = values[nret - len(targets) :]
        else:
            self.alias_to[n] = targets[0] if len(targets) == 1 else tuple(targets)
        for t, v in zip(targets, values):
            if t is None:
                continue
            self._check_writable(t, n)
            self.write(t, v)

    def batch_norm(self, n):
        f = aten._native_batch_norm_legit_functional.default
        new = self.emit(f, self.map(n.args), self.map(n.kwargs), name=n.name)
        self.env[n] = new
        for k, idx in ((3, 3), (4, 4)):
            if n.args[idx] is not None:
                v = self.emit(operator.getitem, (new, k))
                self.write(n.args[idx], v)

    def _check_writable(self, t, n):
        if not isinstance(t, torch.fx.Node):
            raise Unsupported(f"functionalize: {n.target} writes to a list of tensors")
        if t not in self.root and t not in self.alias_to:
            raise Unsupported(f"functionalize: {n.target} writes to an untracked value {t}")

    def output(self, n, placeholders):
        outs = list(n.args[0]) if isinstance(n.args[0], (tuple, list)) else [n.args[0]]
        new_outs = []
        self.mutated_inputs = []
        self.mutated_constants = []
        for i, p in enumerate(placeholders):
            if self.version[p] > 0:
                self.mutated_inputs.append(i)
                new_outs.append(self.get(p))
        for g in self.old.graph.nodes:
            if g.op == "get_attr" and self.version.get(g, 0) > 0:
                self.mutated_constants.append(g.target)
                new_outs.append(self.get(g))
        self.output_aliases = [self.alias_of(o, outs, placeholders) for o in outs]
        new_outs.extend(self.map(o) for o in outs)
        self.graph.output(tuple(new_outs))

    def alias_of(self, o, outs, placeholders):
        """Whether an output is (a view of) an input or of an earlier non-alias output."""
        if not isinstance(o, torch.fx.Node):
            return None
        while o in self.alias_to and isinstance(self.alias_to[o], torch.fx.Node):
            o = self.alias_to[o]
        if o not in self.root:
            return None
        chain = []
        cur = o
        while cur in self.parent:
            p, op, args, kwargs = self.parent[cur]
            chain.append((op, args, kwargs))
            cur = p
        chain.reverse()
        if any(
            isinstance(a, torch.fx.Node)
            for _, args, kw in chain
            for a in pytree.tree_leaves((args, kw))
        ):
            return None
        if cur in placeholders:
            return OutputAlias("input", placeholders.index(cur), chain)
        if not chain:
            return None
        for j, other in enumerate(outs):
            if other is cur:
                return OutputAlias("output", j, chain)
        return None


class _SplitItem:
    """A view recipe: item i of a multi-output view op (split, split_with_sizes, unbind)."""

    def __init__(self, func, args, kwargs, i):
        self.func, self.args, self.kwargs, self.i = func, args, kwargs, i

    def __call__(self, x, *args, **kwargs):
        return self.func(x, *self.args, **self.kwargs)[self.i]

    def __repr__(self):
        return f"{self.func}[{self.i}]"


def _arg(n, func, i):
    a = func._schema.arguments[i]
    if not a.kwarg_only and i < len(n.args):
        return n.args[i]
    return n.kwargs.get(a.name)


def _drop_identity_views(graph):
    """detach / alias nodes change nothing in a functional graph: read their input instead."""
    for n in list(graph.nodes):
        if n.op == "call_function" and n.target in (aten.detach.default, aten.alias.default):
            src = n.args[0]
            if isinstance(src, torch.fx.Node) and src.op != "placeholder":
                n.replace_all_uses_with(src)
                graph.erase_node(n)


def _is_impure(node):
    """Nodes dead-code elimination must keep: none after functionalization but random draws
    and run-time assertions (Note [Asserts: operators every backend runs])."""
    if node.op in ("placeholder", "output"):
        return True
    t = node.target
    if assert_ops.is_assert(t):
        return True
    return isinstance(t, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in t.tags


def functionalize(gm):
    """Rewrite a traced graph without mutation; see the module docstring."""
    f = _Functionalizer(gm)
    new = f.run()
    return FunctionalizeResult(new, f.mutated_inputs, f.mutated_constants, f.output_aliases)


# Note [Functionalize: as_strided of a view]
# `as_strided` reads its sizes and strides against the storage, not against the tensor it is
# called on: `a.diagonal().as_strided((2,), (1,), 0)` is a's first two elements. Replayed on the
# functional value of the diagonal (a tensor of its own) or written back with as_strided_scatter
# into it, it would address the diagonal's elements instead (the write landed on a[0, 0] and
# a[1, 1]). Only as_strided of a root (a graph input or a fresh tensor) is rewritten; through a
# view, a mutation or a read after one is refused (torch.compile refuses it as well).
def _check_as_strided(op, parent, root):
    if op is aten.as_strided.default and parent is not root:
        raise Unsupported(
            "functionalize: as_strided of a view meets a mutation (its strides address the "
            "storage, not the view)"
        )
