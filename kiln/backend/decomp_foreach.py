"""`torch._foreach_*` ops decomposed into one op per tensor, for the code generator to fuse.

Note [Foreach: one op per tensor]
The optimizers (`foreach=True`, the default) update all parameters of a group with one
`_foreach_*` call per formula step: `_foreach_lerp_(exp_avgs, grads, 1 - beta1)`,
`_foreach_mul_(exp_avg_sqs, beta2)`, ... Run as ATen calls, each makes new tensors for the whole
list and each step reads and writes every parameter's state once more: an Adam step over N
parameters is ~10 passes over memory plus a copy back per mutated input. Decomposed here into the
per-tensor ops they compute (`exp_avg.lerp_(grad, w)` for each element), the chain of steps of
one parameter becomes one fused loop that reads the parameter, its gradient and its state once
and writes the new values in place (Note [Backend: mutated inputs written in place]); the
scheduler then puts the loops of the whole list into few kernels
(Note [Scheduler: horizontal fusion of independent loops]).

The rule per op is a row of the table below: how one element of the list is computed from the
elements of its list arguments (`Tensor[]`, `Scalar[]` and a `scalars` tensor are indexed,
other arguments passed as they are). An in-place op returns nothing, as the ATen op does.

    _foreach_add_.List([a, b], [x, y], alpha=2)  →  a.add_(x, alpha=2); b.add_(y, alpha=2)
"""

import torch

aten = torch.ops.aten

_UNARY = (
    "abs acos asin atan ceil cos cosh erf erfc exp expm1 floor frac lgamma log log10 log1p log2 "
    "neg reciprocal round rsqrt sigmoid sign sin sinh sqrt tan tanh trunc"
).split()


def _method(name, inplace):
    """The Tensor method computing one element (`maximum_` has none: `t.copy_(t.maximum(x))`)."""
    fn = getattr(torch.Tensor, name)
    if not inplace:
        return fn
    return getattr(torch.Tensor, name + "_", None) or (lambda t, *a, **k: t.copy_(fn(t, *a, **k)))


def _unary(name):
    return lambda inplace, t: _method(name, inplace)(t)


def _binary(name):
    def element(inplace, t, other, alpha=None):
        if alpha is None:
            return _method(name, inplace)(t, other)
        return _method(name, inplace)(t, other, alpha=alpha)

    return element


def _addc(name):
    """addcmul / addcdiv: `self + value * t1 (* or /) t2` in the CPU kernel's order (value times
    t1 first); a 0-d tensor value (the `.Tensor` overload's per-element scalars) as well."""
    op = torch.mul if name == "addcmul" else torch.div

    def element(inplace, t, t1, t2, value=1):
        term = op(torch.mul(t1, value) if value is not None else t1, t2)
        return t.add_(term) if inplace else torch.add(t, term)

    return element


def _lerp(inplace, t, end, weight):
    """A Python float weight picks the CPU kernel's branch now (`|w| < 0.5`: `t + w * (end -
    t)`, else `end - (end - t) * (1 - w)`): four ops instead of the general rule's selects."""
    if isinstance(weight, torch.Tensor):
        return _method("lerp", inplace)(t, end, weight)
    diff = torch.sub(end, t)
    if abs(weight) < 0.5:
        out = torch.add(t, torch.mul(diff, weight))
    else:
        out = torch.sub(end, torch.mul(diff, 1 - weight))
    return t.copy_(out) if inplace else out


def _pow(inplace, t, exponent):
    if not isinstance(t, torch.Tensor):  # .ScalarAndTensor: scalar ** tensor
        return torch.pow(t, exponent)
    return _method("pow", inplace)(t, exponent)


def _copy(inplace, t, src, non_blocking=False):
    if inplace:
        return t.copy_(src, non_blocking=non_blocking)
    return torch.empty_like(t).copy_(src, non_blocking=non_blocking)


def _zero(inplace, t):
    return t.zero_() if inplace else torch.zeros_like(t)


def _clone(inplace, t, memory_format=None):
    return t.clone() if memory_format is None else t.clone(memory_format=memory_format)


def _norm(inplace, t, ord=2, dtype=None):
    return torch.linalg.vector_norm(t, ord, dtype=dtype)


# foreach name -> element(inplace, *element args): one row per op
ELEMENT_RULES = {
    **{name: _unary(name) for name in _UNARY},
    **{
        name: _binary(name)
        for name in ("add", "sub", "mul", "div", "maximum", "minimum", "clamp_min", "clamp_max")
    },
    "addcmul": _addc("addcmul"),
    "addcdiv": _addc("addcdiv"),
    "lerp": _lerp,
    "pow": _pow,
    "copy": _copy,
    "zero": _zero,
    "clone": _clone,
    "norm": _norm,
}


def _decomposition(overload, rule, inplace):
    """One overload's decomposition: bind its arguments, apply `rule` per list element."""
    arguments = overload._schema.arguments
    # lists are indexed, and so is `scalars` of the addc*.Tensor overloads (a 1-d tensor of one
    # value per element)
    indexed = [isinstance(a.type, torch.ListType) or a.name == "scalars" for a in arguments]

    def decompose(*args, **kwargs):
        values = list(args)
        for a in arguments[len(args) :]:
            if a.name in kwargs:
                values.append(kwargs[a.name])
            elif a.has_default_value():
                values.append(a.default_value)
            else:
                raise TypeError(f"{overload}: missing argument {a.name}")
        kw = {a.name: v for a, v in zip(arguments, values) if a.kwarg_only and a.name != "out"}
        pos = [v for a, v in zip(arguments, values) if not a.kwarg_only]
        pos_indexed = [i for a, i in zip(arguments, indexed) if not a.kwarg_only]
        n = next(len(v) for v, i in zip(pos, pos_indexed) if i)
        outs = []
        for k in range(n):
            elem = [v[k] if i else v for v, i in zip(pos, pos_indexed)]
            outs.append(rule(inplace, *elem, **kw))
        return None if inplace else outs

    return decompose


def foreach_decompositions():
    """{OpOverload: decomposition} for every `_foreach_*` op in ELEMENT_RULES (but `.out`)."""
    table = {}
    for name, rule in ELEMENT_RULES.items():
        for inplace in (False, True):
            packet = getattr(aten, f"_foreach_{name}{'_' if inplace else ''}", None)
            if packet is None:
                continue
            for ov in packet.overloads():
                if ov.endswith("out"):
                    continue
                overload = getattr(packet, ov)
                table[overload] = _decomposition(overload, rule, inplace)
    return table
