"""The AOT layer's plan keys: what selects a compiled plan per call (grad mode, autocast, input
metadata or the frontend's guards, scalar values), and the symbolic examples and layout checks
of graphs with symbolic sizes (Note [AOT: symbolic sizes])."""

import contextlib

import torch

from kiln.symbolic.fake import fake_like, is_symbolic, sym_sizes, sym_strides
from kiln.symbolic.shape_env import SymNode, from_torch
from kiln.symbolic.shape_env import _render as render

_AUTOCAST_DEVICES = ("cpu", "cuda")


def _guard_fn(env):
    """A check of the env's shape guards on a call's args (sources `a[i].size()[d]`, `a[i]`)."""
    code = compile(env.guard_expr(), "<kiln aot shape guards>", "eval")
    return lambda args: bool(eval(code, {"a": args}))


def _autocast_state():
    """The autocast settings a trace bakes in (the casts are ops of the graph)."""
    if not torch._C._is_any_autocast_enabled():
        return ()
    return tuple(
        (d, torch.get_autocast_dtype(d)) for d in _AUTOCAST_DEVICES if torch.is_autocast_enabled(d)
    )


@contextlib.contextmanager
def _autocast_off():
    """Autocast disabled on every device where it is on (Note [Autocast: frames called under
    autocast])."""
    with contextlib.ExitStack() as stack:
        for device, _ in _autocast_state():
            stack.enter_context(torch.autocast(device, enabled=False))
        yield


def _key(args, dynamic=None):
    """The plan key of a call; `dynamic` ({input: dims or True}) leaves out the symbolic sizes."""
    parts = [torch.is_grad_enabled(), _autocast_state()]
    if dynamic is not None:
        parts.append("symbolic")
    for i, a in enumerate(args):
        dims = dynamic.get(i) if dynamic else None
        if dims is True:
            parts.append((type(a), "dynamic"))
        elif dims and isinstance(a, torch.Tensor):
            shape = tuple(None if d in dims else n for d, n in enumerate(a.shape))
            layout = a.is_contiguous()
            parts.append((shape, layout, a.dtype, a.device, a.requires_grad))
        elif isinstance(a, torch.Tensor):
            parts.append((a.shape, a.stride(), a.dtype, a.device, a.requires_grad))
        else:
            parts.append(_scalar_part(a))
    return tuple(parts)


def _scalar_part(a):
    try:
        hash(a)
        return (type(a), a)
    except TypeError:
        return (type(a), repr(a))


def guarded_key_positions(args, dynamic=None):
    """The inputs whose values are in a guarded plan key: those that are not tensors, less the
    dynamic scalars of a symbolic graph (`dynamic`)."""
    return tuple(
        i
        for i, a in enumerate(args)
        if not isinstance(a, torch.Tensor) and not (dynamic and dynamic.get(i) is True)
    )


# Note [AOT: the guarded key's positions]
# The frontend's guards check each input's type on every call (a tensor's exactly, a scalar's as
# a constant or by its type), so which inputs of a guarded graph are tensors never changes: the
# positions of the scalars are found once (`positions`, kept by AOTCompiled) and each call reads
# only those. Testing every input with isinstance(a, torch.Tensor) cost resnet's 78 inputs ~10 us
# a call.
def _guarded_key(args, dynamic=None, positions=None):
    """The plan key of a call whose tensors' metadata the frontend's guards already checked;
    `dynamic` (a symbolic graph's) leaves out its dynamic scalars; `positions`, if given, are
    guarded_key_positions(args, dynamic) (Note [AOT: the guarded key's positions])."""
    if positions is None:
        positions = guarded_key_positions(args, dynamic)
    scalars = tuple([_scalar_part(args[i]) for i in positions]) if positions else ()
    kind = "guarded" if dynamic is None else "guarded symbolic"
    amp = _autocast_state() if torch._C._is_any_autocast_enabled() else ()
    return (torch._C.is_grad_enabled(), amp, kind, scalars)


# Note [AOT: symbolic sizes]
# A torch-level graph whose placeholders carry symbolic example values (fakes with SymInt sizes,
# SymInts for dynamic ints) is traced on those instead of the real inputs: the ATen graphs compute
# every size from their inputs (Note [Tracer: size nodes]), every fact the trace relies on is
# recorded in the frame's ShapeEnv (`GraphMeta.shape_env`, set on every graph handed
# to a compiler), and one plan serves every call whose sizes satisfy the guards. The frontend
# renders the env's guards after the backend returns, so only the plans compiled during that call
# may add facts: a later symbolic compile that would add one is rolled back and compiled for the
# call's static sizes instead. aot_function(dynamic_dims=) makes its own env over sources
# `a[i].size()[d]` and checks the guards itself on each call.


def _symbolic_examples(gm):
    """Per placeholder: its symbolic example value (fake with SymInt sizes, SymInt), else None."""
    if not isinstance(gm, torch.fx.GraphModule):
        return None
    out = []
    for n in gm.graph.nodes:
        if n.op != "placeholder":
            continue
        v = n.meta.get("example_value", n.meta.get("val"))
        symbolic = isinstance(v, torch.SymInt) or (isinstance(v, torch.Tensor) and is_symbolic(v))
        out.append(v if symbolic else None)
    return out if any(v is not None for v in out) else None


def _env_of(examples):
    for v in examples:
        leaves = [v] if isinstance(v, torch.SymInt) else list(v.shape) if v is not None else []
        for s in leaves:
            node = from_torch(s) if isinstance(s, torch.SymInt) else s
            if isinstance(node, SymNode):
                return node.env
    return None


def _dynamic_dims(examples):
    """{input index: symbolic dims, or True for a SymInt input} of symbolic examples."""
    out = {}
    for i, v in enumerate(examples):
        if isinstance(v, torch.SymInt):
            out[i] = True
        elif v is not None:
            out[i] = {d for d, s in enumerate(sym_sizes(v)) if isinstance(s, SymNode)}
    return out


def make_symbolic_examples(args, dynamic_dims, env):
    """Symbolic examples for real args: dims in `dynamic_dims[i]` become symbols `a[i].size()[d]`."""
    examples = [None] * len(args)
    for i, dims in dynamic_dims.items():
        a = args[i]
        if isinstance(a, torch.Tensor):
            sizes = env.sizes_of(a, f"a[{i}]", {d % max(a.dim(), 1) for d in dims})
            examples[i] = fake_like(a, sizes=sizes)
        elif isinstance(a, int) and not isinstance(a, bool):
            size = env.create_size(a, f"a[{i}]")
            examples[i] = torch.SymInt(size) if isinstance(size, SymNode) else None
    return examples


def _layout_check(examples):
    """args -> whether each tensor's strides are the symbolic example's at the real sizes.

    A plan traced on dense fakes (views chosen for that layout) must not run on another layout:
    such a call gets a static plan. Each symbol is bound to a size of the first input that has it.
    """
    sources, checks = {}, []
    for i, v in enumerate(examples):
        if isinstance(v, torch.Tensor):
            for d, n in enumerate(sym_sizes(v)):
                if isinstance(n, SymNode) and n.expr.is_Symbol:
                    sources.setdefault(n.expr, f"a[{i}].shape[{d}]")
    for i, v in enumerate(examples):
        if not isinstance(v, torch.Tensor):
            continue
        for d, st in enumerate(sym_strides(v)):
            text = render(st.expr, sources) if isinstance(st, SymNode) else str(st)
            checks.append(f"(a[{i}].shape[{d}] == 1 or a[{i}].stride({d}) == {text})")
    if not checks:
        return lambda args: True
    code = compile(" and ".join(checks), "<kiln aot layout check>", "eval")
    return lambda args: bool(eval(code, {"a": args}))


def _env_state(env):
    return (len(env.guards), dict(env.replacements), set(env.divisible))


def _restore_env(env, state):
    n, replacements, divisible = state
    del env.guards[n:]
    env.replacements, env.divisible = replacements, divisible
    env._static = {}
