"""Symbolic layouts of ATen op results: sizes from the rules (shape_rules.py), strides, specialisation.

`propagate(op, args, kwargs, out, sizes_of, strides_of)` is what the tracer asks for each op on
symbolic tensors: the rule's sizes checked against the meta result, strides from the view rules
or rebuilt for dense outputs, and where anything cannot be expressed the inputs are specialised
(guards) and the meta result's concrete layout is used.
"""

import sympy
import torch
from torch.utils import _pytree as pytree

from kiln import logs
from kiln.symbolic.shape_env import SymNode, contiguous_strides, hint_of
from kiln.symbolic.shape_rules import Sizes, _dims, _norm_dim, numel, rule_for, transpose

aten = torch.ops.aten


def hint_args(args, kwargs=None):
    """`args`/`kwargs` with every SymNode replaced by its hint (for running the op on meta)."""
    return pytree.tree_map(hint_of, (args, kwargs or {}))


def _specialise(tree):
    """int() every SymNode in a tree of Sizes (a guard each)."""
    if isinstance(tree, SymNode):
        int(tree)
    elif isinstance(tree, list | tuple):  # Sizes included (pytree sees it as a leaf)
        for x in tree:
            _specialise(x)
    elif isinstance(tree, dict):
        for x in tree.values():
            _specialise(x)


def _has_symnode(tree):
    if isinstance(tree, SymNode):
        return True
    if isinstance(tree, list | tuple):
        return any(_has_symnode(x) for x in tree)
    if isinstance(tree, dict):
        return any(_has_symnode(x) for x in tree.values())
    return False


def _concrete(out):
    """Sizes of a meta result as nested Sizes (None for non-tensors)."""
    if isinstance(out, torch.Tensor):
        return Sizes(int(s) for s in out.shape)
    if isinstance(out, list | tuple):
        return tuple(_concrete(o) for o in out)
    return None


def _matches(sym, out):
    """Whether rule result `sym` has the hints of meta result `out`."""
    if isinstance(out, torch.Tensor):
        return isinstance(sym, tuple) and tuple(hint_of(s) for s in sym) == tuple(out.shape)
    if isinstance(out, list | tuple):
        if not isinstance(sym, list | tuple) or len(sym) != len(out):
            return False
        return all(_matches(s, o) for s, o in zip(sym, out))
    return sym is None


# -- strides ------------------------------------------------------------------------------------
# Note [Shapes: symbolic strides]
# A view's strides come from its input's strides (a rule per view op below); any other op's
# output is dense, and `dense_strides` rebuilds its strides from the symbolic sizes in the order of
# the meta output's concrete strides (covers contiguous, permuted and channels-last outputs, and
# stride 0 for expanded dims). A layout that is neither gets None and the caller specialises.


def dense_strides(sizes, concrete):
    """Symbolic strides for a non-overlapping dense layout ordered like `concrete`, else None."""
    order = sorted(range(len(sizes)), key=lambda d: (concrete[d], hint_of(sizes[d])))
    out = [None] * len(sizes)
    expected = 1
    for d in order:
        if concrete[d] == 0 or hint_of(sizes[d]) == 1:
            out[d] = concrete[d] if hint_of(sizes[d]) == 1 else 0
            continue
        if hint_of(expected) != concrete[d]:
            return None
        out[d] = expected
        expected = expected * sizes[d]
    return tuple(out)


def _is_one(n):
    """Size-oblivious `n == 1`: a symbolic size counts as 1 only when that is static (no guard).

    Sound for view strides: a stride assignment valid for a size other than 1 stays valid when
    the size is 1 (a size-1 dim constrains nothing).
    """
    if isinstance(n, SymNode):
        return n.env.static_value(sympy.Eq(n.expr, 1)) is True
    return n == 1


def _less(a, b):
    """`a < b` for view_numel/tensor_numel without a guard: static, else "not the same expr".

    A wrong "less" consumes one more output dim, which the chunk's final equality check (a guard)
    then rejects or confirms, so no unguarded assumption reaches the result.
    """
    if not isinstance(a, SymNode) and not isinstance(b, SymNode):
        return a < b
    env = (a if isinstance(a, SymNode) else b).env
    ea = a.expr if isinstance(a, SymNode) else sympy.Integer(a)
    eb = b.expr if isinstance(b, SymNode) else sympy.Integer(b)
    static = env.static_value(sympy.Lt(ea, eb))
    if static is not None:
        return static
    return sympy.expand(env.simplify(ea - eb)) != 0


def _view_strides(x, xt, out, size):
    """Strides of a view of sizes `x`/strides `xt` as `out` (torch's computeStride), or None.

    Each chunk of input dims that is contiguous in memory maps onto a run of output dims; the
    comparisons are size facts (guards where they are not static).
    """
    if len(x) == 0 or numel(x) == 0:
        return contiguous_strides(out)
    new = [None] * len(out)
    view_d = len(out) - 1
    chunk_stride = xt[-1]
    tensor_numel, view_numel = 1, 1
    for d in range(len(x) - 1, -1, -1):
        tensor_numel = tensor_numel * x[d]
        if d == 0 or (not _is_one(x[d - 1]) and not xt[d - 1] == tensor_numel * chunk_stride):
            while view_d >= 0 and (_less(view_numel, tensor_numel) or _is_one(out[view_d])):
                new[view_d] = view_numel * chunk_stride
                view_numel = view_numel * out[view_d]
                view_d -= 1
            if not view_numel == tensor_numel:
                return None
            if d > 0:
                chunk_stride = xt[d - 1]
                tensor_numel, view_numel = 1, 1
    if view_d != -1:
        return None
    return tuple(new)


def _expand_strides(x, xt, out, size, implicit=False):
    lead = len(out) - len(x)
    return tuple(
        0 if i < lead or (isinstance(x[i - lead], int) and x[i - lead] == 1) else xt[i - lead]
        for i in range(len(out))
    )


def _unsqueeze_strides(x, xt, out, dim):
    d = _norm_dim(dim, len(x) + 1)
    new = xt[d] * x[d] if d < len(x) else 1
    return (*xt[:d], new, *xt[d:])


def _squeeze_strides(x, xt, out, dim=None):
    dims = _dims(dim, len(x))
    return tuple(st for i, (s, st) in enumerate(zip(x, xt)) if not (i in dims and s == 1))


def _slice_strides(x, xt, out, dim=0, start=None, end=None, step=1):
    d = _norm_dim(dim, len(x))
    return tuple(st * step if i == d else st for i, st in enumerate(xt))


def _drop_dim_strides(x, xt, out, dim=0, *args):
    d = _norm_dim(dim, len(x))
    parts = tuple(st for i, st in enumerate(xt) if i != d)
    return parts if isinstance(out, Sizes) else tuple(parts for _ in out)


def _diagonal_strides(x, xt, out, offset=0, dim1=0, dim2=1):
    d1, d2 = _norm_dim(dim1, len(x)), _norm_dim(dim2, len(x))
    return (*(st for i, st in enumerate(xt) if i not in (d1, d2)), xt[d1] + xt[d2])


VIEW_STRIDE_RULES = {
    aten.permute.default: lambda x, xt, out, dims: tuple(xt[_norm_dim(d, len(x))] for d in dims),
    aten.transpose.int: lambda x, xt, out, a, b: transpose(xt, a, b),
    aten.t.default: lambda x, xt, out: tuple(reversed(xt)),
    aten.alias.default: lambda x, xt, out: tuple(xt),
    aten.as_strided.default: lambda x, xt, out, size, stride, offset=None: tuple(stride),
    aten.unfold.default: lambda x, xt, out, dim, size, step: (
        *(st * step if i == _norm_dim(dim, len(x)) else st for i, st in enumerate(xt)),
        xt[_norm_dim(dim, len(x))] if x else 1,
    ),
    aten.copy.default: lambda x, xt, out, *a, **k: tuple(xt),  # keeps self's strides (eager too)
    aten.view.default: _view_strides,
    aten._unsafe_view.default: _view_strides,
    aten.reshape.default: _view_strides,
    aten.expand.default: _expand_strides,
    aten.unsqueeze.default: _unsqueeze_strides,
    aten.squeeze.default: _squeeze_strides,
    aten.squeeze.dim: _squeeze_strides,
    aten.squeeze.dims: _squeeze_strides,
    aten.slice.Tensor: _slice_strides,
    aten.select.int: _drop_dim_strides,
    aten.unbind.int: _drop_dim_strides,
    aten.diagonal.default: _diagonal_strides,
    aten.split.Tensor: lambda x, xt, out, *a: tuple(tuple(xt) for _ in out),
    aten.split_with_sizes.default: lambda x, xt, out, *a: tuple(tuple(xt) for _ in out),
}


def _strides_match(sizes, strides, out):
    """Whether symbolic strides have the meta output's strides (ignoring size-1 dims)."""
    if isinstance(out, torch.Tensor):
        return strides is not None and all(
            hint_of(n) == 1 or hint_of(a) == b for n, a, b in zip(sizes, strides, out.stride())
        )
    if isinstance(out, list | tuple):
        return isinstance(strides, tuple) and all(
            _strides_match(s, st, o) for s, st, o in zip(sizes, strides, out)
        )
    return True


def _output_strides(op, sargs, skwargs, xt, sizes, out):
    """Symbolic strides of `out` in its structure, or None where they cannot be expressed."""
    rule = VIEW_STRIDE_RULES.get(op)
    if rule is not None and xt is not None:
        try:
            return rule(sargs[0], xt, sizes, *sargs[1:], **skwargs)
        except (RuntimeError, IndexError, TypeError, ValueError):
            return None
    if isinstance(out, torch.Tensor):
        return dense_strides(sizes, out.stride())
    if isinstance(out, list | tuple):
        return tuple(_output_strides(None, (), {}, None, s, o) for s, o in zip(sizes, out))
    return None


def propagate(op, args, kwargs, out, sizes_of, strides_of=None):
    """Symbolic sizes of `op`'s result `out` (run on meta with hint sizes), in out's structure.

    `sizes_of(t)` gives an input tensor's Sizes. With a rule, the rule's sizes (checked against
    `out`'s hints); without one, or if the rule fails or disagrees, the inputs' symbolic sizes are
    specialised (guards) and `out`'s concrete sizes are returned. Never a wrong size. With
    `strides_of(t)` (an input's symbolic strides) returns `(sizes, strides)`; strides that cannot be
    expressed specialise the inputs too.
    """

    def conv(a):
        return Sizes(sizes_of(a)) if isinstance(a, torch.Tensor) else a

    sargs, skwargs = pytree.tree_map(conv, (tuple(args), dict(kwargs or {})))
    res = _rule_sizes(op, sargs, skwargs, out)
    if res is not None and strides_of is None:
        return res
    if res is not None:
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        xt = tuple(strides_of(first)) if first is not None else None
        strides = _output_strides(op, sargs, skwargs, xt, res, out)
        if _strides_match(res, strides, out):
            return res, strides
        logs.log("perf_hints", f"strides of {op} not expressible symbolically; specialising")
    if _has_symnode((sargs, skwargs)):
        why = "no shape rule" if rule_for(op) is None else "its rule or strides did not apply"
        logs.log("recompiles", f"specialising the sizes of {op}'s inputs ({why})")
        logs.counters["shapes"]["specialisations"] += 1
    _specialise((sargs, skwargs))
    if strides_of is None:
        return _concrete(out)
    return _concrete(out), _concrete_strides(out)


def _rule_sizes(op, sargs, skwargs, out):
    """The rule's sizes if there is a rule, it succeeds and it agrees with meta, else None."""
    rule = rule_for(op)
    if rule is None:
        return None
    try:
        res = rule(*sargs, **skwargs)
    except (RuntimeError, IndexError, TypeError, ValueError) as e:
        logs.log("perf_hints", f"shape rule for {op} failed ({e}); specialising")
        return None
    if _matches(res, out):
        return res
    logs.log("perf_hints", f"shape rule for {op} disagrees with meta; specialising")
    return None


def _concrete_strides(out):
    """Strides of a meta result in its structure."""
    if isinstance(out, torch.Tensor):
        return tuple(int(s) for s in out.stride())
    if isinstance(out, list | tuple):
        return tuple(_concrete_strides(o) for o in out)
    return None
