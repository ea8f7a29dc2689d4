"""The ATen tracer: records every ATen call on our fake tensors into an FX graph.

    def f(x):
        return torch.cos(torch.cos(x)) + 1

    gm = trace_aten(f, [torch.randn(5, 5)])
    print(gm.code)
    # def forward(self, arg0_1):
    #     cos = torch.ops.aten.cos.default(arg0_1)
    #     cos_1 = torch.ops.aten.cos.default(cos)
    #     add = torch.ops.aten.add.Tensor(cos_1, 1)
    #     return (add,)

Every node carries `node.meta["val"]`: a `ProxyTensor` (kiln.symbolic.fake: shape, stride, dtype
and the REAL device, no data), a tuple of them, or a Python scalar.
"""

import contextlib
import operator
import threading

import sympy
import torch
import torch.fx
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from kiln.contracts import GraphMeta
from kiln.exc import Unsupported
from kiln.symbolic import graph_constants
from kiln.symbolic.fake import (
    _METADATA_QUERIES,
    _SYM_TYPES,
    ProxyTensor,
    _FakeDispatch,
    _has_symbolic,
    _is_metadata_mutation,
    _resync,
    describe_val,
    fake_like,
    foreign_subclass,
    is_symbolic,
    is_view_op,
    sym_sizes,
)
from kiln.symbolic.shape_env import SymNode, exact_floats, from_torch

aten = torch.ops.aten

__all__ = ["Tracer", "TraceMode", "SizeNodes", "trace_aten", "format_graph"]

_INFIX = {
    operator.add: "+",
    operator.sub: "-",
    operator.mul: "*",
    operator.floordiv: "//",
    operator.mod: "%",
}


def format_graph(gm, name="forward"):
    """Readable code of an ATen graph with a shape comment per node."""
    lines = [f"def {name}({', '.join(n.name for n in gm.graph.nodes if n.op == 'placeholder')}):"]
    for n in gm.graph.nodes:
        val = n.meta.get("val")
        comment = f"  # {describe_val(val)}" if val is not None else ""
        if n.op == "placeholder":
            lines.append(f"    # {n.name}: {describe_val(val)}")
        elif n.op == "output":
            lines.append(f"    return {n.args[0]}")
        elif n.op == "get_attr":
            lines.append(f"    {n.name} = self.{n.target}{comment}")
        elif n.target in _INFIX:  # size arithmetic: `mul = sym_size_int * sym_size_int_1`
            a, b = (repr(x) if not isinstance(x, torch.fx.Node) else x.name for x in n.args)
            lines.append(f"    {n.name} = {a} {_INFIX[n.target]} {b}{comment}")
        else:
            target = n.target
            tname = (
                f"aten.{target.__name__}"
                if isinstance(target, torch._ops.OpOverload) and target.namespace == "aten"
                else (str(target) if isinstance(target, torch._ops.OpOverload) else target.__name__)
            )
            args = ", ".join(
                [repr(a) for a in n.args] + [f"{k}={v!r}" for k, v in n.kwargs.items()]
            )
            lines.append(f"    {n.name} = {tname}({args}){comment}")
    return "\n".join(lines)


# Note [Tracer: boolean mask assignment]
# `x[mask] = v` dispatches index_put_ with a bool index, whose kernel (and meta kernel) computes
# mask.nonzero(): a data-dependent size. With a mask of x's full shape and a single value it is
# masked_fill, which has static shapes; other boolean index_puts stay data-dependent (Unsupported).
def _is_mask_put(args, kwargs):
    if len(args) < 3 or kwargs.get("accumulate", args[3] if len(args) > 3 else False):
        return False
    x, indices, v = args[0], args[1], args[2]
    if len(indices) != 1 or not isinstance(indices[0], torch.Tensor):
        return False
    m = indices[0]
    return (
        m.dtype == torch.bool
        and tuple(m.shape) == tuple(x.shape)
        and isinstance(v, torch.Tensor)
        and v.numel() == 1
        and v.dim() <= 1
    )


_MASK_REWRITES = {
    aten.index_put_.default: lambda x, m, v: x.masked_fill_(m, v.reshape(())),
    aten.index_put.default: lambda x, m, v: x.masked_fill(m, v.reshape(())),
}


def _node_name(func):
    return getattr(func, "__name__", "op").split(".")[0] or "op"


# Note [Tracer: size nodes]
# In a symbolic graph a size is a value computed by the graph: symbol s_k is
# `aten.sym_size.int(x, d)` of the first graph input x whose size d IS s_k (or an int placeholder
# whose val is s_k), and a compound size is built from `operator.add/sub/mul/floordiv/mod` nodes
# (torch.sym_max/sym_min for Max/Min). Each expression gets one node per graph (memoised), emitted
# where first needed; its `meta["val"]` is the torch.SymInt. Op arguments refer to these nodes, so
# a graph never bakes a hint: run on real tensors it computes the sizes from its inputs.


class SizeNodes:
    """The FX nodes computing size expressions in one graph (see the note above)."""

    def __init__(self, graph):
        self.graph = graph
        self.memo = {}  # simplified sympy expr -> node

    def arg(self, v):
        """A graph argument for a SymInt/SymNode/int (ints and constant sizes stay values)."""
        node = from_torch(v) if isinstance(v, _SYM_TYPES) else v
        if not isinstance(node, SymNode):
            return node
        if node.kind == "float":
            return self.float_node(node)
        if node.kind != "int":
            return node.guard_bool("", 0)  # a bool size fact: specialised (never a graph value)
        expr = node.env.simplify(node.expr)
        if expr.is_Integer:
            return int(expr)
        return self.node(expr, node.env)

    def float_node(self, node):
        """A float computed from sizes (`n / (n - 1)`): a node `operator.truediv(num, den)`.

        Note [Tracer: float sizes]: decompositions compute Python floats from sizes (batch norm's
        `1.0 / n` and unbiased factor `n / (n - 1)`). The float's exact value is a rational
        function of the sizes; the graph computes it as one true division of two int size nodes,
        so it is the correctly rounded value of that rational, as Python's own division of exact
        ints gives (a float coefficient that is not a small dyadic keeps the old specialisation).
        """
        env = node.env
        expr = exact_floats(env.simplify(node.expr))
        if not expr.free_symbols:
            return float(expr)
        key = ("float", expr)
        found = self.memo.get(key)
        if found is not None and found.graph is self.graph:
            return found
        num, den = sympy.fraction(sympy.together(expr))
        if not (num.is_integer and den.is_integer):
            return node.guard_float("", 0)  # not exactly computable from sizes: specialise
        out = self.graph.call_function(
            operator.truediv, (self._value(num, env), self._value(den, env))
        )
        out.meta["val"] = torch.SymFloat(SymNode(expr, env, "float"))
        self.memo[key] = out
        return out

    def node(self, expr, env):
        found = self.memo.get(expr)
        if found is not None and found.graph is self.graph:
            return found
        if expr.is_Symbol:
            node = self._symbol(expr, env)
        else:
            node = self._compound(expr, env)
        node.meta["val"] = torch.SymInt(SymNode(expr, env))
        self.memo[expr] = node
        return node

    def _value(self, e, env):
        e = sympy.sympify(e)
        return int(e) if e.is_Integer else self.node(e, env)

    def _symbol(self, sym, env):
        """sym_size of the first input with that size; else solved from a size `a*sym + b`."""
        solvable = None
        for ph, size, d in self._input_sizes(env):
            if size == sym:
                return ph if d is None else self.graph.call_function(aten.sym_size.int, (ph, d))
            if solvable is None and sym in size.free_symbols:
                a, b = sympy.expand(size).as_independent(sym, as_Add=True)[::-1]
                a = sympy.expand(a / sym)
                if a.is_Integer and a != 0 and b.is_Integer:
                    solvable = (ph, d, int(a), int(b))
        if solvable is not None:  # s = (size - b) // a
            ph, d, a, b = solvable
            node = ph if d is None else self.graph.call_function(aten.sym_size.int, (ph, d))
            if b:
                node = self.graph.call_function(operator.sub, (node, b))
            if a != 1:
                node = self.graph.call_function(operator.floordiv, (node, a))
            return node
        raise Unsupported(f"the size {sym} is not a size of any graph input")

    def _input_sizes(self, env):
        """(placeholder, simplified size expr, dim or None for an int input) in graph order."""
        for ph in self.graph.nodes:
            if ph.op != "placeholder":
                continue
            val = ph.meta.get("val")
            if isinstance(val, torch.SymInt):
                node = from_torch(val)
                if isinstance(node, SymNode):
                    yield ph, env.simplify(node.expr), None
            elif isinstance(val, torch.Tensor) and is_symbolic(val):
                for d, size in enumerate(sym_sizes(val)):
                    if isinstance(size, SymNode):
                        yield ph, env.simplify(size.expr), d

    def _compound(self, e, env):
        call = self.graph.call_function
        if isinstance(e, sympy.Add):
            pos = [a for a in e.args if not a.could_extract_minus_sign()]
            neg = [-a for a in e.args if a.could_extract_minus_sign()]
            pos.sort(key=lambda a: a.is_Number)  # symbols first: `s0 - 1`, not `-1 + s0`
            acc = self._value(pos[0], env) if pos else 0
            for a in pos[1:]:
                acc = call(operator.add, (acc, self._value(a, env)))
            for a in neg:
                acc = call(operator.sub, (acc, self._value(a, env)))
            return acc
        if isinstance(e, sympy.Mul):
            num, den = sympy.fraction(e)
            if den != 1:  # exact division (a recorded divisibility made it so)
                return call(operator.floordiv, (self._value(num, env), self._value(den, env)))
            factors = sorted(e.args, key=lambda a: not a.is_Number)
            acc = self._value(factors[0], env)
            for a in factors[1:]:
                acc = call(operator.mul, (acc, self._value(a, env)))
            return acc
        if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp > 1:
            base = self._value(e.base, env)
            acc = base
            for _ in range(int(e.exp) - 1):
                acc = call(operator.mul, (acc, base))
            return acc
        if isinstance(e, sympy.floor):
            num, den = sympy.fraction(sympy.together(e.args[0]))
            return call(operator.floordiv, (self._value(num, env), self._value(den, env)))
        if isinstance(e, sympy.Mod):
            return call(operator.mod, (self._value(e.args[0], env), self._value(e.args[1], env)))
        if isinstance(e, sympy.Max | sympy.Min):
            fn = torch.sym_max if isinstance(e, sympy.Max) else torch.sym_min
            acc = self._value(e.args[0], env)
            for a in e.args[1:]:
                acc = call(fn, (acc, self._value(a, env)))
            return acc
        raise Unsupported(f"a size expression kiln cannot compute in a graph: {e}")


class TraceMode(TorchDispatchMode):
    """Records every ATen call on proxy tensors (and factory calls) into the tracer's graph."""

    def __init__(self, tracer):
        super().__init__()
        self.tracer = tracer

    @classmethod
    def is_infra_mode(cls):
        """kiln's own (Note [Frames: under a user's dispatch mode])."""
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if foreign_subclass(types):  # Note [Tracer: wrapper subclasses over fakes]
            return NotImplemented
        return self.tracer.dispatch(func, args, kwargs or {})


class Tracer(_FakeDispatch):
    """Builds an FX graph of torch.ops.aten overloads from calls on its ProxyTensors."""

    recording = True

    def __init__(self, decompositions=None):
        self.graph = torch.fx.Graph()
        self.root = torch.nn.Module()
        self.decompositions = dict(decompositions or {})
        self.mode = TraceMode(self)
        self._constants = {}  # id(real tensor) -> get_attr node
        self._decomposing = set()
        self._last_constant = None
        self.grad_constants = []  # real tensors requiring grad met as constants
        self.sizes = SizeNodes(self.graph)

    # --- inputs and outputs ---
    def placeholder(self, name, example, requires_grad=False):
        """A graph input and the value the traced code sees for it (a ProxyTensor or a scalar)."""
        last = self._last_placeholder()
        if last is None:
            with self.graph.inserting_before(None):
                node = self.graph.placeholder(name)
        else:
            with self.graph.inserting_after(last):
                node = self.graph.placeholder(name)
        if isinstance(example, torch.Tensor):
            proxy = fake_like(example, node, requires_grad=requires_grad)
            node.meta["val"] = proxy
            return proxy
        node.meta["val"] = example
        return example

    def to_arg(self, x):
        """The graph argument for a traced value (node for tensors, constants as they are)."""
        if isinstance(x, ProxyTensor):
            if x._node is None:
                raise Unsupported("a fake tensor from outside this trace reached the graph")
            return x._node
        if isinstance(x, torch.Tensor):
            return self.constant(x)
        if isinstance(x, _SYM_TYPES):
            return self.sizes.arg(x)
        return x

    def output(self, value):
        """Set the graph output from fn's return value (flattened with pytree)."""
        leaves, spec = pytree.tree_flatten(value)
        self.graph.output(tuple(self.to_arg(x) for x in leaves))
        return spec

    def constant(self, t):
        """A real tensor met while tracing (closure, module attribute) becomes a get_attr node."""
        key = id(t)
        if key in self._constants:
            return self._constants[key][0]
        if t.requires_grad:
            self.grad_constants.append(t)
        name = f"_tensor_constant{len(self._constants)}"
        setattr(self.root, name, t.detach() if t.requires_grad else t)
        anchor = self._last_constant or self._last_placeholder()
        if anchor is None:
            with self.graph.inserting_before(None):
                node = self.graph.get_attr(name)
        else:
            with self.graph.inserting_after(anchor):
                node = self.graph.get_attr(name)
        self._last_constant = node
        node.meta["val"] = fake_like(t, node)
        self._constants[key] = (node, t)
        return node

    def _last_placeholder(self):
        last = None
        for n in self.graph.nodes:
            if n.op != "placeholder":
                break
            last = n
        return last

    def graph_module(self):
        return graph_constants.graph_module(self.root, self.graph)  # Note [Graphs: complex ...]

    # --- the dispatch ---
    def dispatch(self, func, args, kwargs):
        if func in self.decompositions and func not in self._decomposing:
            self._decomposing.add(func)
            try:
                with self.mode:
                    return self.decompositions[func](*args, **kwargs)
            finally:
                self._decomposing.discard(func)
        if func is aten.lift_fresh.default:  # torch.tensor(data): a fresh tensor per call
            return self.dispatch(aten.clone.default, (self.constant_proxy(args[0]),), {})
        if func in _MASK_REWRITES and _is_mask_put(args, kwargs):
            with self.mode:  # x[mask] = v: no data-dependent shape needed
                return _MASK_REWRITES[func](args[0], args[1][0], args[2])
        if func in _METADATA_QUERIES and _has_symbolic(args, kwargs):
            return _METADATA_QUERIES[func](*args, **kwargs)  # sizes: values, not graph nodes
        target = args[0] if args and _is_metadata_mutation(func) else None
        if isinstance(target, ProxyTensor) and target._node is not None:
            target._node.meta["val"] = fake_like(target, target._node)  # snapshot, see the note
        out = super().dispatch(func, args, kwargs)
        nargs, nkwargs = pytree.tree_map_only(
            (torch.Tensor, *_SYM_TYPES), self.to_arg, (tuple(args), dict(kwargs))
        )
        node = self.graph.create_node("call_function", func, nargs, nkwargs, name=_node_name(func))
        self.bind(node, func, args, out)
        if isinstance(target, ProxyTensor):
            _resync(target)
            target._node = node
            node.meta["val"] = target
        return out

    def constant_proxy(self, t):
        node = self.constant(t)
        return node.meta["val"] if t.device.type != "meta" else t

    def bind(self, node, func, args, out):
        """Attach the outputs to the node (getitem nodes for tuple outputs) and record views."""
        view_parent = (
            args[0]._node if is_view_op(func) and isinstance(args[0], ProxyTensor) else None
        )
        if isinstance(out, ProxyTensor):
            if out._node is None:
                out._node = node
            node.meta["val"] = out
            if view_parent is not None:
                node.meta["view_of"] = view_parent
        elif isinstance(out, (tuple, list)):
            node.meta["val"] = type(out)(out)
            for i, o in enumerate(out):
                if isinstance(o, ProxyTensor) and o._node is None:
                    g = self.graph.call_function(operator.getitem, (node, i))
                    g.meta["val"] = o
                    o._node = g
                    if view_parent is not None:
                        g.meta["view_of"] = view_parent
        else:
            node.meta["val"] = out

    @contextlib.contextmanager
    def tracing(self):
        """Activate the trace mode (every ATen call inside is recorded); see Note [Tracer: is_compiling]."""
        _compiling_flag.enter()
        try:
            with self.mode:
                yield
        finally:
            _compiling_flag.exit()


_SET_HOOKS_TRACING = getattr(torch._C._autograd, "_saved_tensors_hooks_set_tracing", None)


class _CompilingFlag:
    """`torch.compiler._is_compiling_flag` and autograd's saved-tensor-hooks tracing switch (both
    process-wide) held on while any thread traces: a count, not a saved value (two threads tracing
    at once each saved the other's True, and one restored it for good: is_compiling() True in
    eager, the user's saved-tensor hooks never called again)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.depth = 0
        self.before = self.hooks_before = False

    def enter(self):
        with self.lock:
            if self.depth == 0:
                self.before = getattr(torch.compiler, "_is_compiling_flag", None)
                if _SET_HOOKS_TRACING is not None:
                    self.hooks_before = _SET_HOOKS_TRACING(True)
            self.depth += 1
            if self.before is not None:
                torch.compiler._is_compiling_flag = True

    def exit(self):
        with self.lock:
            self.depth -= 1
            if self.depth == 0:
                if self.before is not None:
                    torch.compiler._is_compiling_flag = self.before
                if _SET_HOOKS_TRACING is not None:
                    _SET_HOOKS_TRACING(self.hooks_before)


_compiling_flag = _CompilingFlag()


# Note [Tracer: is_compiling]
# Libraries ask `torch.compiler.is_compiling()` to skip code that reads tensor values (Hugging Face's
# mask construction checks for padding with `.all()`). Our trace has no values to read, so while it
# runs we answer True, as torch.compile's own tracing does; the flag is restored when the last
# trace of any thread ends (`_CompilingFlag`: a count, so overlapping traces cannot leave it set). The
# user's saved-tensor hooks (checkpointing, offloading) are likewise not applied to the proxies
# autograd saves while we trace: they apply at run time to what CompiledFunction saves.
# Known limit (Note [Tracer: imports during a trace] in tests/conftest.py): a module imported for
# the first time inside the trace also sees True at import time (transformers then leaves its
# ModelOutput classes unregistered as pytree nodes).


def graph_call(fn):
    """What tracing calls for `fn`: a graph's own forward, not Module.__call__, so module hooks
    registered globally (the user's) do not run on kiln's graphs, nor get traced into them."""
    return fn.forward if isinstance(fn, torch.fx.GraphModule) else fn


def trace_aten(fn, example_inputs, *, decompositions=None, input_names=None):
    """Trace fn(*example_inputs) into an FX graph of ATen ops (inference: no autograd)."""
    tracer = Tracer(decompositions)
    names = input_names or [f"arg{i}_1" for i in range(len(example_inputs))]
    proxies = [tracer.placeholder(n, x) for n, x in zip(names, example_inputs)]
    with torch.no_grad(), tracer.tracing():
        out = graph_call(fn)(*proxies)
    spec = tracer.output(out)
    gm = tracer.graph_module()
    GraphMeta.update(gm, out_spec=spec)
    return gm
