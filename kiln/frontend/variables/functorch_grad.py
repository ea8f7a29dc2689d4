"""torch.func.grad, grad_and_value, jacrev, jacfwd, hessian and jvp in traced code: the function
traced once, one call that differentiates it.

Note [Grad: the body traced, torch.func.grad applied at run time]
`torch.func.grad(f, argnums=0, has_aux=False)(*args)` returns the gradient of `f`'s scalar result
with respect to the arguments argnums names (each a tree of tensors: Note [Vmap: arguments and
results as trees]); grad_and_value returns (gradients, value). As for torch.vmap (Note [Vmap: the
body traced, vmap applied at run time]), kiln traces `f` into a graph of its own (the body) on
the arguments' tensors, taken flat, with the tensors of the frame it reads lifted into extra
arguments; the frame's graph gets one node whose target is a `GradCall`, which calls
`torch.func.grad(body, argnums=<the flat positions of the differentiated tensors>)` (or
grad_and_value) and returns every result tensor flat: the gradients, the value, the aux tensors.
The frame rebuilds the gradients as trees shaped like the arguments they belong to, a tuple of
them for a tuple argnums, and the aux result as the tree f returned. So eager runs functorch's
own grad, a backend that traces at the ATen level (kiln's AOT tracer) traces through it, and
`vmap(grad(loss))(...)` (per-sample gradients) is one graph: the vmap body's trace holds the
GradCall node. Example results come from running the call on the meta examples; what torch.func
refuses there (a result that is not a scalar, an integer input differentiated) is a graph break,
so the call runs in Python and raises torch's error.

torch.func.jacrev, jacfwd and hessian go the same way (`JacobianCall`, with the flat positions
of the differentiated tensors as argnums): the result comes back as the meta run's tree, taken
flat and rebuilt in the frame from its TreeSpec, and each result tensor's Jacobian (a tuple over
the flat positions, nested twice for a hessian) regrouped into trees shaped like the arguments
(a parameter dict's Jacobian is a dict: vmap(jacrev(f)) over a model's parameters, the empirical
NTK recipe, is one graph), a tuple of them for a tuple argnums. So does `torch.func.jvp(f, primals,
tangents)` for tuples of tensors (`JvpCall`: the outputs and the tangents out, each shaped like
f's result). has_aux is taken by jacrev, jacfwd and jvp (f returns (output, aux): aux comes back
as f returned it, after the Jacobian, or after jvp's outputs and tangents).

Inside the body, tensors are functorch's wrappers, whose `requires_grad`, `is_leaf` and strides
are not the traced examples' (as under vmap: Note [Vmap: metadata]): reading them is a break.
Side effects in the body and argnums that are not constants are breaks as well.
"""

import torch
import torch.utils._pytree as pytree

from kiln.exc import unimplemented
from kiln.frontend.variables import control_flow as cf
from kiln.frontend.variables import functorch_trees as trees
from kiln.frontend.variables.functorch_vmap import (
    TransformedVariable,
    TransformFunctionVariable,
    _KwargsCall,
    _on_meta,
    torch_func_name,
)
from kiln.frontend.variables.lists import TupleVariable
from kiln.frontend.variables.tensor import TensorVariable
from kiln.frontend.variables.torch import _as_fakes, wrap_tensor_result

# the transforms traced here, by name (functorch_vmap.torch_func_name), with the keyword settings
# a traced call may give each (constants) besides argnums
_SETTINGS = {
    "grad": ("has_aux",),
    "grad_and_value": ("has_aux",),
    "jacrev": ("has_aux", "chunk_size"),
    "jacfwd": ("has_aux", "randomness"),
    "hessian": (),
}
TRANSFORMS = tuple(_SETTINGS)  # (the names builder.py routes to GradFunctionVariable)


def transform_kind(value):
    """ "grad", "grad_and_value", "jacrev", "jacfwd" or "hessian" for torch.func's own function of
    that name, else None."""
    name = torch_func_name(value)
    return name if name in _SETTINGS else None


class GradCall:
    """The target of a traced grad call: `torch.func.grad(body, ...)(*operands)`, flat."""

    __name__ = "grad"  # (fx names the node after its target)
    __qualname__ = "grad"

    def __init__(self, transform, body, argnums, has_aux):
        self.transform = transform  # torch.func.grad or grad_and_value
        self.body = body
        self.argnums = argnums
        self.has_aux = has_aux
        self.with_value = transform.__name__ == "grad_and_value"

    def __call__(self, *operands):
        out = self.transform(self.body, argnums=self.argnums, has_aux=self.has_aux)(*operands)
        grads, rest = (out[0], out[1]) if self.with_value or self.has_aux else (out, None)
        if self.with_value and self.has_aux:
            value, aux = rest
            return (*grads, value, *aux)
        if self.with_value:
            return (*grads, rest)
        if self.has_aux:
            return (*grads, *rest)
        return tuple(grads)

    def __repr__(self):
        return (
            f"GradCall({self.transform.__name__}, argnums={self.argnums}, has_aux={self.has_aux})"
        )


class _LeavesCall:
    """A node target whose result is the leaves of `tree(*operands)` (its TreeSpec is read from
    the meta run at trace time): `transform` (the user's torch.func function) over `body`."""

    def __init__(self, transform, body, settings):
        self.transform = transform
        self.body = body
        self.settings = settings

    def __call__(self, *operands):
        return tuple(pytree.tree_leaves(self.tree(*operands)))


class JacobianCall(_LeavesCall):
    """The target of a traced jacrev/jacfwd/hessian call: the leaves of its result tree."""

    __name__ = "jacobian"
    __qualname__ = "jacobian"

    def __init__(self, transform, body, argnums, settings):
        super().__init__(transform, body, settings)
        self.argnums = argnums

    def tree(self, *operands):
        """The transform's result, as a tree."""
        return self.transform(self.body, argnums=self.argnums, **self.settings)(*operands)

    def __repr__(self):
        return f"JacobianCall({self.transform.__name__}, argnums={self.argnums})"


class GradFunctionVariable(TransformFunctionVariable):
    """torch.func.grad (or grad_and_value, jacrev, jacfwd, hessian) itself, before it is called."""

    def call_function(self, tx, args, kwargs):
        names = ("func", "argnums", *_SETTINGS[transform_kind(self.value)])
        fn, settings = self.bind(names, args, kwargs)
        return GradTransformedVariable(fn, settings, self.value)


class GradTransformedVariable(TransformedVariable):
    """`torch.func.grad(f, ...)` (or another transform above): its calls are traced."""

    def __init__(self, fn, settings, transform, **kw):
        super().__init__(fn, settings, transform, **kw)
        self.with_value = transform.__name__ == "grad_and_value"
        self.jacobian = transform.__name__ in ("jacrev", "jacfwd", "hessian")

    def call_function(self, tx, args, kwargs):
        if self.jacobian:
            return trace_jacobian(tx, self, args, kwargs)
        return trace_grad(tx, self, args, kwargs)


def _argnums(argnums, n):
    """The positions differentiated, and whether argnums was a tuple (the gradients are one)."""
    many = isinstance(argnums, tuple)
    nums = argnums if many else (argnums,)
    if not nums or not all(type(a) is int and -n <= a < n for a in nums):
        unimplemented(f"torch.func.grad: argnums {argnums!r} for {n} arguments (torch raises)")
    nums = tuple(a % n for a in nums)
    if len(set(nums)) != len(nums):
        unimplemented(f"torch.func.grad: argnums {argnums!r} repeats a position (torch raises)")
    return nums, many


def _levels(tx):
    """The functorch transforms being traced in this frame, innermost last ("grad"/"vmap")."""
    return tx.output.__dict__.setdefault("functorch_levels", [])


def trace_grad(tx, transformed, args, kwargs):
    """A call of `torch.func.grad(f, ...)` (Note [Grad: the body traced, torch.func.grad
    applied at run time])."""
    argnums = transformed.setting("argnums", 0)
    has_aux = transformed.setting("has_aux", False)
    if type(has_aux) is not bool:
        unimplemented(f"torch.func.grad: has_aux {has_aux!r} (torch raises)")
    nums, many = _argnums(argnums, len(args))
    graph, out, tensors, owners, rebuilds = _trace_body(
        tx, transformed.fn, args, kwargs, "torch.func.grad"
    )
    # the flat positions of each differentiated argument's tensors
    positions = {i: [k for k, o in enumerate(owners) if o == i] for i in nums}
    if not all(positions[i] for i in nums):
        unimplemented(
            "torch.func.grad with respect to an argument holding no tensor (torch raises)"
        )
    for i in nums:
        trees.flatten_result(args[i], what="torch.func.grad with respect to an argument holding")
        for k in positions[i]:
            if not tensors[k].example.is_floating_point() and not tensors[k].example.is_complex():
                unimplemented("torch.func.grad with respect to an integer tensor (torch raises)")
    flat_argnums = tuple(k for i in nums for k in positions[i])
    aux = None
    if has_aux:
        pair = out.unpack_var_sequence(tx) if isinstance(out, TupleVariable) else None
        if not pair or len(pair) != 2:
            unimplemented("torch.func.grad(has_aux=True): f returns no (output, aux) pair")
        out, aux = pair
    if not isinstance(out, TensorVariable):
        unimplemented(f"torch.func.grad: f returns {out}, not a tensor (torch raises)")
    aux_items, rebuild_aux = trees.flatten_result(aux) if has_aux else ([], None)
    lifted = cf._lift([graph], [[out, *aux_items]], op="torch.func.grad")
    (out_node,) = [n for n in graph.nodes if n.op == "output"]
    values = out_node.args[0]
    out_node.args = ((values[0], tuple(values[1:])) if has_aux else values[0],)
    body = torch.fx.GraphModule(torch.nn.Module(), graph, class_name="GradBody")
    call = GradCall(transformed.transform, body, flat_argnums, has_aux)
    examples = [t.example for t in tensors] + [n.meta["example_value"] for n in lifted]
    probe = GradCall(transformed.transform, _on_meta(body), flat_argnums, has_aux)
    try:
        with torch.device("meta"):
            result = probe(*examples)
    except Exception as e:
        unimplemented(f"torch.func.grad on meta tensors raised {type(e).__name__}: {e}")
    devices = {t.device for t in tensors}
    if tx.output.fake_inputs:
        result = _as_fakes(result, next(iter(devices)))
    node = tx.output.create_node(
        "call_function", call, tuple(t.proxy for t in tensors) + tuple(lifted), {}
    )
    flat = wrap_tensor_result(tx, node, result, next(iter(devices))).items
    grads_flat, rest = flat[: len(flat_argnums)], flat[len(flat_argnums) :]
    grads, at = [], 0
    for i in nums:  # each differentiated argument's tree, rebuilt from its gradients
        mine = grads_flat[at : at + len(positions[i])]
        at += len(positions[i])
        it = iter(mine)
        grads.append(rebuilds[i](lambda it=it: next(it)))
    grads = TupleVariable(grads) if many else grads[0]
    value = rest[0] if transformed.with_value else None
    aux = rebuild_aux(rest[1:] if transformed.with_value else rest) if has_aux else None
    if transformed.with_value:
        return TupleVariable([grads, TupleVariable([value, aux]) if has_aux else value])
    return TupleVariable([grads, aux]) if has_aux else grads


def _trace_body(tx, fn, args, kwargs, op):
    """The traced body of a differentiating transform over args: (graph, result, the flat
    tensors, each tensor's argument position, the rebuild of each argument)."""
    tensors, owners, rebuilds = [], [], []
    for i, v in enumerate(args):

        def add(t, _dim, i=i):
            tensors.append(t)
            owners.append(i)

        rebuilds.append(trees.flatten_arg(v, None, add, what="argument"))

    def pack(placeholders):
        it = iter(placeholders)
        return [rebuild(lambda: next(it)) for rebuild in rebuilds]

    levels = _levels(tx)
    levels.append("grad")
    try:
        graph, out = cf._trace_branch(
            tx,
            _KwargsCall(fn, kwargs),
            tensors,
            "the differentiated function",
            pack=pack,
            op=op,
            local_writes=True,
        )
    finally:
        levels.pop()
    return graph, out, tensors, owners, rebuilds


def trace_jacobian(tx, transformed, args, kwargs):
    """A call of `torch.func.jacrev/jacfwd/hessian(f, ...)(*args)` (the Note above)."""
    op = f"torch.func.{transformed.transform.__name__}"
    settings = {k: v.as_python_constant() for k, v in transformed.settings.items() if v is not None}
    argnums = settings.pop("argnums", 0)
    has_aux = settings.get("has_aux", False)
    if type(has_aux) is not bool:
        unimplemented(f"{op}: has_aux {has_aux!r} (torch raises)")
    nums, many = _argnums(argnums, len(args))
    for i in nums:  # (trees of tensors: a model's parameter dict)
        trees.flatten_result(args[i], what=f"{op} with respect to an argument holding")
    graph, out, tensors, owners, rebuilds = _trace_body(tx, transformed.fn, args, kwargs, op)
    aux = None
    if has_aux:  # f returns (output, aux): the Jacobian of the output, aux as f returned it
        pair = out.unpack_var_sequence(tx) if isinstance(out, TupleVariable) else None
        if not pair or len(pair) != 2:
            unimplemented(f"{op}(has_aux=True): f returns no (output, aux) pair (torch raises)")
        out, aux = pair
    positions = {i: [k for k, o in enumerate(owners) if o == i] for i in nums}
    flat_argnums = tuple(k for i in nums for k in positions[i])
    depth = 2 if transformed.transform.__name__ == "hessian" else 1

    def regroup(v, level=depth):
        """One result tensor's Jacobian, a tuple over the flat differentiated tensors (nested
        once more for a hessian), as trees shaped like the arguments (a tuple of them for a
        tuple argnums)."""
        if level == 0:
            return v
        items = iter([regroup(i, level - 1) for i in v.unpack_var_sequence(tx)])
        made = [rebuilds[i](lambda: next(items)) for i in nums]
        return TupleVariable(made) if many else made[0]

    def call(body):
        return JacobianCall(transformed.transform, body, flat_argnums, settings)

    return _call_on_flat_results(tx, op, graph, out, tensors, [], call, 1, post=regroup, aux=aux)


def _call_on_flat_results(
    tx, op, graph, out, tensors, extra, make_call, per_result, post=None, aux=None
):
    """The node of a transform over a traced body whose results the body returns flat (a tensor,
    or a tuple of them): `make_call(body)` is the node's target (with `.tree(*operands)`), called
    with the body's tensors, `extra` tensors, then the lifted ones. Its result tree comes back from
    the meta run's TreeSpec; `per_result` trees of it follow the body's results (one Jacobian per
    result; jvp's outputs and tangents), each rebuilt in the shape of the body's result. With
    `aux` (has_aux), the body returns (its results, aux's tensors flat) and the transform
    (result, aux): aux comes back rebuilt as f returned it."""
    out_items, rebuild_out = trees.flatten_result(out)
    aux_items, rebuild_aux = trees.flatten_result(aux) if aux is not None else ([], None)
    single = isinstance(out, TensorVariable)
    lifted = cf._lift([graph], [[*out_items, *aux_items]], op=op)
    (out_node,) = [n for n in graph.nodes if n.op == "output"]
    values = out_node.args[0]
    main = values[0] if single else tuple(values[: len(out_items)])
    out_node.args = ((main, tuple(values[len(out_items) :])) if aux is not None else main,)
    body = torch.fx.GraphModule(torch.nn.Module(), graph, class_name="TransformBody")
    examples = [t.example for t in [*tensors, *extra]] + [n.meta["example_value"] for n in lifted]
    try:
        with torch.device("meta"):
            leaves, spec = pytree.tree_flatten(make_call(_on_meta(body)).tree(*examples))
    except Exception as e:
        unimplemented(f"{op} on meta tensors raised {type(e).__name__}: {e}")
    if not all(isinstance(leaf, torch.Tensor) for leaf in leaves):
        unimplemented(f"{op}: a result that is not a tree of tensors")
    device = next(iter({t.device for t in tensors}))
    if tx.output.fake_inputs:
        leaves = _as_fakes(tuple(leaves), device)
    proxies = tuple(t.proxy for t in [*tensors, *extra]) + tuple(lifted)
    node = tx.output.create_node("call_function", make_call(body), proxies, {})
    flat = wrap_tensor_result(tx, node, tuple(leaves), device).items
    made = trees.from_spec(spec, flat)
    if aux is not None:  # (result, aux), or jvp's (outputs, tangents out, aux)
        *main_parts, aux_made = made.unpack_var_sequence(tx)
        made = main_parts[0] if per_result == 1 else TupleVariable(main_parts)
        aux = rebuild_aux(aux_made.unpack_var_sequence(tx))
    parts = [made] if per_result == 1 else made.unpack_var_sequence(tx)

    def shaped(part):  # (one tree per body result, `post` applied, rebuilt as the body returned)
        items = [part] if single else part.unpack_var_sequence(tx)
        items = [post(i) for i in items] if post is not None else items
        return items[0] if single else rebuild_out(items)

    parts = [shaped(p) for p in parts]
    if per_result == 1:
        return parts[0] if aux is None else TupleVariable([parts[0], aux])
    return TupleVariable(parts if aux is None else [*parts, aux])


class JvpCall(_LeavesCall):
    """The target of a traced torch.func.jvp call: the leaves of (outputs, tangents out)."""

    __name__ = "jvp"
    __qualname__ = "jvp"

    def __init__(self, transform, body, n, settings):
        super().__init__(transform, body, settings)
        self.n = n  # primals (then as many tangents, then the lifted tensors)

    def tree(self, *operands):
        n, body = self.n, self.body
        primals, tangents, lifted = operands[:n], operands[n : 2 * n], operands[2 * n :]
        return self.transform(
            lambda *p: body(*p, *lifted), tuple(primals), tuple(tangents), **self.settings
        )

    def __repr__(self):
        return f"JvpCall(primals={self.n})"


class JvpFunctionVariable(TransformFunctionVariable):
    """torch.func.jvp: `jvp(f, primals, tangents)` traced (Note [Grad: the body traced, ...])."""

    def call_function(self, tx, args, kwargs):
        names = ("func", "primals", "tangents", "strict", "has_aux")
        bound = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names or k in bound:
                unimplemented(f"torch.func.jvp argument {k!r} (torch raises)")
            bound[k] = v
        if len(args) > 3 or not {"func", "primals", "tangents"} <= set(bound):
            unimplemented("torch.func.jvp called with the wrong arguments (torch raises)")
        settings = {}
        for k in ("strict", "has_aux"):
            if k in bound:
                if not bound[k].is_python_constant():
                    unimplemented(f"torch.func.jvp's {k} is not a constant")
                settings[k] = bound[k].as_python_constant()
        has_aux = settings.get("has_aux", False)
        if type(has_aux) is not bool:
            unimplemented(f"torch.func.jvp: has_aux {has_aux!r} (torch raises)")
        primals, tangents = bound["primals"], bound["tangents"]
        for what, v in (("primals", primals), ("tangents", tangents)):
            if type(v) is not TupleVariable or not all(
                isinstance(i, TensorVariable) for i in v.items
            ):
                unimplemented(f"torch.func.jvp: {what} other than a tuple of tensors")
        primals, tangents = primals.unpack_var_sequence(tx), tangents.unpack_var_sequence(tx)
        if len(primals) != len(tangents) or not primals:
            unimplemented("torch.func.jvp: primals and tangents differ in length (torch raises)")
        op = "torch.func.jvp"
        graph, out, tensors, _, _ = _trace_body(tx, bound["func"], primals, {}, op)
        aux = None
        if has_aux:  # f returns (output, aux): jvp returns (output, tangent out, aux)
            pair = out.unpack_var_sequence(tx) if isinstance(out, TupleVariable) else None
            if not pair or len(pair) != 2:
                unimplemented(f"{op}(has_aux=True): f returns no (output, aux) pair (torch raises)")
            out, aux = pair

        def call(body):
            return JvpCall(self.value, body, len(tensors), settings)

        return _call_on_flat_results(
            tx, op, graph, out, tensors, tangents, call, per_result=2, aux=aux
        )
