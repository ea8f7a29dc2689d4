"""Lowerings of reductions: sum/mean/prod/amax/amin/argmax/any/all, var/std, softmax."""

import sympy
import torch

from kiln.backend.codegen.common import PERSISTENT_MAX
from kiln.backend.devices import triton_kernels
from kiln.backend.ir import Pointwise, Reduction, current_device, known_nonneg, ops, prod
from kiln.backend.lowering import (
    NotLowered,
    V,
    _convert,
    _full,
    aten,
    box,
    loader_for,
    make_pointwise,
    opmath,
    prims,
    register_lowering,
    scalar,
)
from kiln.backend.lowering_views import _norm_dim, _squeeze, _view

# --- reductions -----------------------------------------------------------------------------------


def _reduce_dims(x, dims):
    n = len(x.get_size())
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(n))
    if isinstance(dims, int):
        dims = [dims]
    return sorted({_norm_dim(d, max(n, 1)) for d in dims if n > 0})


def make_reduction(x, dims, keepdim, rtype, out_dtype, compute_dtype=None, map_fn=None):
    """Reduce x over dims; returns the (keepdim-viewed) realized result."""
    xs = x.get_size()
    dims = _reduce_dims(x, dims)
    kept = [k for k in range(len(xs)) if k not in dims]
    ranges = tuple(xs[k] for k in kept)
    rranges = tuple(xs[k] for k in dims)
    src = x.get_dtype()
    ct = compute_dtype or opmath(src)
    ld = lambda full: x.make_loader()(full)  # late-bound

    def inner_fn(idx, ridx):
        full = [None] * len(xs)
        for k, i in zip(kept, idx):
            full[k] = i
        for k, r in zip(dims, ridx):
            full[k] = r
        v = ld(full)
        if src != ct:
            v = ops.to_dtype(v, ct, src)
        return map_fn(v) if map_fn else v

    if not dims:  # a reduction over no dimension is a pointwise map
        if rtype in ("argmax", "argmin"):
            return _full(ranges, 0, torch.int64)

        def pw(idx):
            v = inner_fn(idx, [])
            if rtype in ("any", "all"):
                return ops.ne(v, ops.constant(0, ct))
            return v

        return box(Pointwise(out_dtype, ranges, pw), val=None)
    red = Reduction(out_dtype, ranges, rranges, rtype, inner_fn, ct)
    out = V.graph.new_box(red, None)
    out.realize()
    if keepdim:
        size = tuple(1 if k in dims else xs[k] for k in range(len(xs)))
        return _view(out, size)
    return out


def _sum_dtype(x, dtype):
    if dtype is not None:
        return dtype
    dt = x.get_dtype()
    return torch.int64 if (dt == torch.bool or not dt.is_floating_point) else dt


@register_lowering(aten.sum.dim_IntList, aten.sum.default)
def _sum(x, dim=None, keepdim=False, *, dtype=None):
    od = _sum_dtype(x, dtype)
    return make_reduction(x, dim, keepdim, "sum", od, compute_dtype=opmath(od))


@register_lowering(prims.sum.default, prims.prod.default, prims.amax.default, prims.amin.default)
def _prims_reduce(x, dims, output_dtype=None):
    kind = {"sum": "sum", "prod": "prod", "amax": "max", "amin": "min"}[
        V.current_target.__name__.split(".")[0]
    ]
    od = output_dtype or V.val.dtype
    if not list(dims):
        return _convert(x, od)
    return make_reduction(x, list(dims), False, kind, od, compute_dtype=opmath(od))


@register_lowering(aten.prod.default, aten.prod.dim_int)
def _prod(x, dim=None, keepdim=False, *, dtype=None):
    od = _sum_dtype(x, dtype)
    return make_reduction(x, dim, keepdim, "prod", od, compute_dtype=opmath(od))


@register_lowering(aten.mean.dim, aten.mean.default)
def _mean(x, dim=None, keepdim=False, *, dtype=None):
    od = dtype or x.get_dtype()
    if not od.is_floating_point:
        raise NotLowered("mean of ints")
    n = prod(x.get_size()[d] for d in _reduce_dims(x, dim))
    s = make_reduction(x, dim, keepdim, "sum", od, compute_dtype=opmath(od))
    return make_pointwise(
        lambda v: ops.truediv(v, scalar(n, opmath(od))),
        s,
        out_dtype=od,
        compute_dtype=opmath(od),
    )


@register_lowering(aten.amax, aten.amin)
def _amax(x, dim=(), keepdim=False):
    rtype = "max" if V.current_target == aten.amax.default else "min"
    return make_reduction(x, dim, keepdim, rtype, x.get_dtype())


@register_lowering(aten.max.default, aten.min.default)
def _max_all(x):
    rtype = "max" if V.current_target == aten.max.default else "min"
    if x.get_numel() == 0:
        raise NotLowered("empty")
    return make_reduction(x, None, False, rtype, x.get_dtype())


@register_lowering(aten.max.dim, aten.min.dim)
def _max_dim(x, dim, keepdim=False):
    kind = "max" if V.current_target == aten.max.dim else "min"
    if not x.get_size():
        raise NotLowered("0-d")
    vals = make_reduction(x, dim, keepdim, kind, x.get_dtype())
    idx = make_reduction(x, dim, keepdim, "arg" + kind, torch.int64)
    return vals, idx


@register_lowering(aten.argmax.default, aten.argmin.default)
def _argmax(x, dim=None, keepdim=False):
    kind = "argmax" if V.current_target == aten.argmax.default else "argmin"
    if dim is None:
        if keepdim:
            raise NotLowered("argmax keepdim without dim")
        return make_reduction(x, None, False, kind, torch.int64)
    if not x.get_size():
        raise NotLowered("0-d")
    return make_reduction(x, dim, keepdim, kind, torch.int64)


@register_lowering(
    aten.any.default, aten.any.dim, aten.any.dims, aten.all.default, aten.all.dim, aten.all.dims
)
def _any(x, dim=None, keepdim=False):
    kind = "any" if "any" in str(V.current_target) else "all"
    od = V.val.dtype
    return make_reduction(x, dim, keepdim, kind, od, compute_dtype=torch.bool)


def _one_pass(n):
    """Whether a variance over n elements is one Welford pass: Triton kernels, a looped reduction."""
    return triton_kernels(current_device()) and not (type(n) is int and n <= PERSISTENT_MAX)


def _var_mean(x, dims, correction, keepdim):
    od = x.get_dtype()
    if not od.is_floating_point:
        raise NotLowered("var of ints")
    ct = opmath(od)
    rdims = _reduce_dims(x, dims)
    n = prod(x.get_size()[d] for d in rdims)
    correction = 1 if correction is None else correction
    s = make_reduction(x, rdims, True, "sum", ct, compute_dtype=ct)
    mean = make_pointwise(
        lambda v: ops.truediv(v, scalar(n, ct)), s, out_dtype=ct, compute_dtype=ct
    )
    mload = loader_for(mean, x.get_size(), ct)
    xload = loader_for(x, x.get_size(), ct)

    def sq(i):
        d = ops.sub(xload(i), mload(i))
        return ops.mul(d, d)

    if _one_pass(n):  # Note [Triton: variance in one pass]
        ss = make_reduction(x, rdims, keepdim, "welford_m2", ct, compute_dtype=ct)
    else:
        diff2 = box(Pointwise(ct, x.get_size(), sq), val=None)
        ss = make_reduction(diff2, rdims, keepdim, "sum", ct, compute_dtype=ct)
    if type(n) is int or known_nonneg(n - correction):
        denom = max(n - correction, 0) if type(n) is int else n - correction
    else:
        denom = sympy.Max(n - correction, 0)
    var = make_pointwise(
        lambda v: ops.truediv(v, scalar(denom, ct)), ss, out_dtype=od, compute_dtype=ct
    )
    if not keepdim:
        mean = _squeeze(mean, rdims) if rdims else mean
    if od != ct:
        mean = _convert(mean, od)
    return var, mean


def _softmax_impl(x, dim, out_dtype, log):
    if not out_dtype.is_floating_point:
        raise NotLowered("softmax of ints")
    ct = opmath(out_dtype)
    if not x.get_size():
        x = _view(x, (1,))
        out = _softmax_impl(x, 0, out_dtype, log)
        return _view(out, ())
    dim = _norm_dim(dim, len(x.get_size()))
    size = x.get_size()
    m = make_reduction(x, [dim], True, "max", ct, compute_dtype=ct)
    xl, ml = loader_for(x, size, ct), loader_for(m, size, ct)

    def shifted(i):
        d = ops.sub(xl(i), ml(i))
        # rows of -inf: eager gives NaN (inf - inf); keep that
        return d

    e = box(Pointwise(ct, size, lambda i: ops.exp(shifted(i))), val=None)
    s = make_reduction(e, [dim], True, "sum", ct, compute_dtype=ct)
    sl = loader_for(s, size, ct)
    if log:
        fn = lambda i: ops.sub(shifted(i), ops.log(sl(i)))
    else:
        el = e.make_loader()
        fn = lambda i: ops.truediv(el(i), sl(i))
    return box(Pointwise(out_dtype, size, fn))


@register_lowering(aten.softmax.int, aten.log_softmax.int)
def _softmax_int(x, dim, dtype=None):
    log = V.current_target == aten.log_softmax.int
    return _softmax_impl(x, dim, dtype or x.get_dtype(), log)


@register_lowering(aten.var_mean.correction)
def _var_mean_l(x, dim=None, *, correction=None, keepdim=False):
    return _var_mean(x, dim, correction, keepdim)


@register_lowering(aten.var_mean.dim)
def _var_mean_dim(x, dim=None, unbiased=True, keepdim=False):
    return _var_mean(x, dim, 1 if unbiased else 0, keepdim)


@register_lowering(aten.var.dim)
def _var_dim(x, dim=None, unbiased=True, keepdim=False):
    return _var_mean(x, dim, 1 if unbiased else 0, keepdim)[0]


@register_lowering(aten.var.correction)
def _var(x, dim=None, *, correction=None, keepdim=False):
    return _var_mean(x, dim, correction, keepdim)[0]


@register_lowering(aten.std.correction)
def _std(x, dim=None, *, correction=None, keepdim=False):
    v = _var_mean(x, dim, correction, keepdim)[0]
    return make_pointwise(ops.sqrt, v, out_dtype=v.get_dtype(), compute_dtype=opmath(v.get_dtype()))
