"""The opaque op of `kiln.leaf_function`: `kiln::leaf_call` and its backward `kiln::leaf_backward`.

Note [leaf_function: an opaque op run at run time]
A call of a leaf function in traced code becomes ONE node

    outs = torch.ops.kiln.leaf_call(site, [t0, t1, ...])   # outputs, new mutated inputs, token

over the call's tensors (flattened; the constants and the structure around them are kept by the
`LeafSite` numbered `site`). It is an ordinary operator, so nothing traces into it: the frontend
and the ATen tracer run its Meta kernel, which runs the user's `register_fake` function (the
output shapes come from it), and every backend calls it (the kiln backend as an extern), which
runs the REAL body once per call. The op is functional: an input named in `mutates_args` is
cloned, the body changes the clone, and the clone is an output that the frontend copies back
(`t.copy_(new)`, which functionalization and the backends already know).

Gradients: the run-time kernel runs the body under grad mode on detached inputs that require
grad as the traced ones did (the site's `grad_mask`), so the body builds its own small autograd
graph; it is kept in the box behind the last output, an int64 token (the trick of Note [Hooks:
given at run time]). The op's Autograd kernel saves the token, and its backward is
`kiln::leaf_backward(site, token, inputs, grads)`, another opaque op that calls
`torch.autograd.grad` on that small graph. So the body runs once per call (side effects once),
the joint graph holds two opaque nodes, and the partitioner saves the token between them.
"""

import contextlib
import itertools
import weakref
from dataclasses import dataclass, field

import torch
import torch.utils._pytree as pytree

from kiln import config
from kiln.exc import LeafFunctionError, LeafStructureError
from kiln.symbolic import (
    control_ops,  # noqa: F401 (defines the kiln namespace first)
    leaf_scalars,
)

_LIB = torch.library.Library("kiln", "FRAGMENT")
_LIB.define("leaf_call(int site, Tensor[] inputs) -> Tensor[]")
_LIB.define("leaf_backward(int site, Tensor token, Tensor[] inputs, Tensor[] grads) -> Tensor[]")

TENSOR = object()  # a slot of a plan filled by the next tensor
_SITES = {}  # number -> LeafSite
_numbers = itertools.count(1)
_boxes = itertools.count(1)
_BOXES = {}  # box number -> weakref to its _Box


@dataclass(eq=False)
class LeafSite:
    """One call of a leaf function in traced code: what the op needs to run it."""

    name: str
    fn: object
    fake_fn: object
    arg_plans: list
    kwarg_plans: dict
    grad_mask: tuple  # per flat input: whether it is differentiated
    mutated: tuple  # flat input indices the body changes in place
    out_plan: object = None
    out_meta: list = field(default_factory=list)  # (shape, dtype) per output tensor
    number: int = 0


def register_site(site):
    """Number `site` for the op's `site` argument."""
    site.number = next(_numbers)
    _SITES[site.number] = site
    return site.number


MODULE = "module"  # a plan's kind: an nn.Module argument, its parameters and buffers as slots
TREE = "tree"  # a plan's kind: a registered pytree node, its TreeSpec and its leaves' plans


def rebuild(plan, tensors, swaps=None):
    """The value of `plan`, its tensor slots filled from the iterator `tensors`; a module's
    slots are its parameters and buffers, to be swapped in (`swaps`) around the call."""
    if plan is TENSOR:
        return next(tensors)
    kind, body = plan
    if kind == "const":
        return body
    if kind == MODULE:
        ref, names = body
        module = ref()
        if module is None:
            raise RuntimeError("kiln: the nn.Module given to a leaf_function call is gone")
        values = [next(tensors) for _ in names]
        if swaps is not None:
            swaps.append((module, dict(zip(names, values))))
        return module
    if kind == TREE:
        spec, plans = body
        return spec.unflatten([rebuild(p, tensors, swaps) for p in plans])
    if kind is dict:
        return {k: rebuild(p, tensors, swaps) for k, p in body.items()}
    return kind(rebuild(p, tensors, swaps) for p in body)


@contextlib.contextmanager
def module_tensors(swaps):
    """Each module's parameters and buffers replaced by the given tensors, then put back (the
    body computes with the op's inputs: meta ones for the fake, detached ones for gradients)."""
    saved = []
    try:
        for module, values in swaps:
            for name, value in values.items():
                owner_path, _, leaf = name.rpartition(".")
                owner = module.get_submodule(owner_path) if owner_path else module
                table = owner._parameters if leaf in owner._parameters else owner._buffers
                saved.append((table, leaf, table[leaf]))
                table[leaf] = value
        yield
    finally:
        for table, leaf, old in reversed(saved):
            table[leaf] = old


def call_site(site, fn, inputs):
    """fn called on the site's arguments rebuilt around `inputs` (modules' tensors swapped in)."""
    values, swaps = iter(inputs), []
    args = [rebuild(p, values, swaps) for p in site.arg_plans]
    kwargs = {k: rebuild(p, values, swaps) for k, p in site.kwarg_plans.items()}
    with module_tensors(swaps):
        return fn(*args, **kwargs)


def flatten_value(value, tensors, name):
    """The plan of a Python value (a leaf function's result), its tensors appended."""
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return TENSOR
    if isinstance(value, leaf_scalars.DATA_SCALARS):  # Note [leaf_function: numbers read ...]
        tensors.append(leaf_scalars.stand_in(value))
        return (leaf_scalars.SCALAR, value.dtype)
    if value is None or isinstance(value, (bool, int, float, str)):
        return ("const", value)
    if type(value) in (list, tuple):
        return (type(value), [flatten_value(v, tensors, name) for v in value])
    if type(value) is dict:
        return (dict, {k: flatten_value(v, tensors, name) for k, v in value.items()})
    if type(value) in pytree.SUPPORTED_NODES:  # a registered pytree node (a dataclass, a Point)
        leaves, spec = pytree.tree_flatten(value)
        return (TREE, (spec, [flatten_value(v, tensors, name) for v in leaves]))
    raise TypeError(
        f"leaf_function {name} returned a {type(value).__name__} (kiln supports tensors, "
        "constants, and lists, tuples and dicts of them)"
    )


def _call_args(site, inputs):
    values = iter(inputs)
    args = [rebuild(p, values) for p in site.arg_plans]
    kwargs = {k: rebuild(p, values) for k, p in site.kwarg_plans.items()}
    return args, kwargs


def _flat_result(site, result):
    tensors = []
    plan = flatten_value(result, tensors, site.name)
    if plan != site.out_plan and _shape_of(plan) != _shape_of(site.out_plan):
        raise LeafStructureError(
            f"leaf_function {site.name}: output structure mismatch: the real function returned "
            f"{_shape_of(plan)}, its fake implementation {_shape_of(site.out_plan)}"
        )
    if len(tensors) != len(site.out_meta):  # (numbers read from tensor data: outputs too)
        tensors = []
        _flat_by_plan(site.out_plan, result, tensors, site.name)
    if not config.leaf_function_validate_outputs:
        return tensors  # (trusted: the graph after the call was made for the fake's sizes)
    for i, (t, (shape, dtype)) in enumerate(zip(tensors, site.out_meta)):
        if t.dtype != dtype:
            raise LeafFunctionError(
                f"leaf_function {site.name}: Dtype mismatch in output {i}: the real function "
                f"gave {t.dtype}, its fake implementation {dtype}"
            )
        if tuple(t.shape) != shape:
            raise LeafFunctionError(
                f"leaf_function {site.name}: Shape mismatch in output {i}: the real function "
                f"gave {list(t.shape)}, its fake implementation {list(shape)}"
            )
    return tensors


# Note [leaf_function: escaped gradients]
# The body runs on detached copies of its inputs, so its outputs' gradients reach the frame's
# tensors only through them. A tensor the body reads from elsewhere (a closure, a global) that
# requires grad would get no gradient, where the body called eagerly gives it one: a silent loss.
# So, when the call is differentiated, the body's autograd graph is walked from its outputs down
# to the inputs; a leaf that is not an input, or a node made before the body started (a
# closed-over tensor computed earlier, `w = base * 2`), is such a tensor and the call raises,
# naming each (`kiln.config.leaf_function_check_escaped_gradients = False` allows it, as torch's
# default does). Nodes made by the body have higher sequence numbers than a probe node made first.
_PROBE = torch.zeros((), requires_grad=True)


def _check_escaped(site, local, outputs, start):
    """Raise if the body's outputs depend on tensors that require grad and are not its inputs."""
    inputs = {id(t) for t in local}
    seen, stack, escaped = set(), [o.grad_fn for o in outputs if o.grad_fn is not None], []
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)
        if variable is not None:  # an AccumulateGrad: a leaf
            if id(variable) not in inputs:
                escaped.append((list(variable.shape), variable.dtype))
            continue
        if node._sequence_nr() < start:
            meta = node._input_metadata[0]
            escaped.append((list(meta.shape), meta.dtype))
            continue
        stack.extend(n for n, _ in node.next_functions)
    if escaped:
        listed = "; ".join(f"shape={s}, dtype={d}" for s, d in escaped)
        raise LeafFunctionError(
            f"leaf_function {site.name}: its outputs depend on {len(escaped)} tensor(s) that "
            f"require grad and are not its arguments ({listed}); their gradients would be lost. "
            "Pass them as arguments, or set kiln.config.leaf_function_check_escaped_gradients = "
            "False (Note [leaf_function: escaped gradients])"
        )


def _flat_by_plan(plan, value, out, name):
    """The real result's outputs by the fake's plan: tensors, and its numbers read from tensor
    data as 0-d tensors (Note [leaf_function: numbers read from tensor data])."""
    if plan is TENSOR:
        out.append(value)
        return
    kind, body = plan
    if kind == leaf_scalars.SCALAR:
        out.append(leaf_scalars.as_output(value, body, name))
    elif kind == TREE:
        for p, v in zip(body[1], pytree.tree_flatten(value)[0]):
            _flat_by_plan(p, v, out, name)
    elif kind is dict:
        for k, p in body.items():
            _flat_by_plan(p, value[k], out, name)
    elif kind != "const":
        for p, v in zip(body, value):
            _flat_by_plan(p, v, out, name)


def _shape_of(plan):
    """The structure of a plan, constants' values left out (the fake's constants win)."""
    if plan is TENSOR:
        return "Tensor"
    kind, body = plan
    if kind in ("const", leaf_scalars.SCALAR):
        return "const"
    if kind is dict:
        return {k: _shape_of(p) for k, p in body.items()}
    return (kind.__name__, [_shape_of(p) for p in body])


class _Box(bytearray):
    """The token's memory (its number) and the body's autograd graph of one call."""

    __slots__ = ("state", "__weakref__")


def _new_token(state):
    number = next(_boxes)
    box = _Box(number.to_bytes(8, "little", signed=True))
    box.state = state
    _BOXES[number] = weakref.ref(box, lambda _, n=number: _BOXES.pop(n, None))
    return torch.frombuffer(box, dtype=torch.int64)


def _state(token):
    ref = _BOXES.get(int(token.reshape(-1)[0])) if token.numel() == 1 else None
    box = ref() if ref is not None else None
    if box is None or box.state is None:
        raise RuntimeError("kiln: the autograd graph of a leaf_function call is gone")
    return box.state


def _with_autograd():
    """Autograd back on for the body: an op's kernel runs below the Autograd keys, and the body
    builds its own autograd graph (Note [leaf_function: an opaque op run at run time])."""
    keys = torch._C.DispatchKey
    exclude = torch._C._dispatch_tls_local_exclude_set()
    for key in (keys.AutogradFunctionality, keys.AutogradOther, keys.AutogradNestedTensor):
        exclude = exclude.remove(key)
    exclude = exclude.remove(keys.ADInplaceOrView)
    include = torch._C._dispatch_tls_local_include_set()
    return torch._C._ForceDispatchKeyGuard(include, exclude)


def _leaf_call_impl(site_number, inputs):
    site = _SITES[site_number]
    inputs = list(inputs)
    for i in site.mutated:
        inputs[i] = inputs[i].clone()
    differentiated = any(site.grad_mask)
    local = [
        t.detach().requires_grad_(True) if wants else t for t, wants in zip(inputs, site.grad_mask)
    ]
    with _with_autograd(), torch.enable_grad() if differentiated else contextlib.nullcontext():
        check = differentiated and config.leaf_function_check_escaped_gradients
        start = _PROBE.view(()).grad_fn._sequence_nr() if check else 0
        outputs = _flat_result(site, call_site(site, site.fn, local))
        if check:
            _check_escaped(site, local, outputs, start)
    token = _new_token((local, outputs) if differentiated else None)
    storages = {t.untyped_storage().data_ptr() for t in inputs}
    returned = [
        o.detach().clone() if o.untyped_storage().data_ptr() in storages else o.detach()
        for o in outputs
    ]
    return [*returned, *(inputs[i] for i in site.mutated), token]


def _leaf_call_meta(site_number, inputs):
    site = _SITES[site_number]
    outputs = run_fake(site, inputs)
    meta = [torch.empty_strided(o.shape, o.stride(), dtype=o.dtype, device="meta") for o in outputs]
    mutated = [torch.empty_like(inputs[i]) for i in site.mutated]
    return [*meta, *mutated, torch.empty(1, dtype=torch.int64, device="meta")]


def run_fake(site, inputs):
    """The output tensors of the site's fake implementation on `inputs`."""
    tensors = []
    with leaf_scalars.scalar_reads():  # Note [leaf_function: numbers read from tensor data]
        result = call_site(site, site.fake_fn, list(inputs))
    flatten_value(result, tensors, site.name)
    return tensors


def _leaf_backward_impl(site_number, token, inputs, grads):
    site = _SITES[site_number]
    local, outputs = _state(token)
    wrt = [local[i] for i, wants in enumerate(site.grad_mask) if wants]
    pairs = [(o, g) for o, g in zip(outputs, grads) if o.requires_grad]
    got = [None] * len(wrt)
    if pairs:
        with _with_autograd():
            got = torch.autograd.grad(
                [o for o, _ in pairs], wrt, [g for _, g in pairs], allow_unused=True
            )
    return [g if g is not None else torch.zeros_like(w) for g, w in zip(got, wrt)]


def _leaf_backward_meta(site_number, token, inputs, grads):
    return [torch.empty_like(t) for t in inputs]  # (the differentiated inputs only)


class LeafCall(torch.autograd.Function):
    """Autograd of `kiln::leaf_call`: its backward is `kiln::leaf_backward` on the token."""

    @staticmethod
    def forward(ctx, site_number, *inputs):
        with torch._C._AutoDispatchBelowAutograd():
            outs = torch.ops.kiln.leaf_call(site_number, list(inputs))
        site = _SITES[site_number]
        token = outs[-1]
        ctx.site_number = site_number
        # the differentiated inputs only: a mutated one (never differentiated) is written back
        # after the op, which a saved tensor's version check would take for a misuse
        ctx.save_for_backward(token, *(t for t, wants in zip(inputs, site.grad_mask) if wants))
        fixed = [o for o in outs[: len(site.out_meta)] if not o.is_floating_point()]
        ctx.mark_non_differentiable(token, *outs[len(site.out_meta) : -1], *fixed)
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        token, *inputs = ctx.saved_tensors
        site = _SITES[ctx.site_number]
        n_out = len(site.out_meta)
        got = iter(
            torch.ops.kiln.leaf_backward(ctx.site_number, token, inputs, list(grads[:n_out]))
        )
        return (None, *(next(got) if wants else None for wants in site.grad_mask))


def _leaf_call_autograd(site_number, inputs):
    return list(LeafCall.apply(site_number, *inputs))


_LIB.impl("leaf_call", _leaf_call_impl, "CompositeExplicitAutograd")
_LIB.impl("leaf_call", _leaf_call_meta, "Meta")
_LIB.impl("leaf_call", _leaf_call_autograd, "Autograd")
_LIB.impl("leaf_backward", _leaf_backward_impl, "CompositeExplicitAutograd")
_LIB.impl("leaf_backward", _leaf_backward_meta, "Meta")

LEAF_CALL = torch.ops.kiln.leaf_call.default
LEAF_BACKWARD = torch.ops.kiln.leaf_backward.default
