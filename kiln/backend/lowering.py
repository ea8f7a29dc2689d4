"""`@register_lowering(aten.x)`: ATen ops → loop IR (Pointwise, Reduction, views, externs).

A lowering receives IR values (StorageBox / View / Buffer / Constant) and Python scalars in the
positions of the op's arguments and returns an IR value (or a tuple of them). A lowering may raise
`NotLowered` for a case it does not handle; the op then runs as an ATen extern call (never a
failure). Every lowered result is checked against the FX node's meta value (size and dtype).
"""

import functools
import math

import torch

from kiln.backend.ir import (
    Ix,
    Pointwise,
    Reduction,
    View,
    contiguous_strides,
    ops,
    prod,
)

aten = torch.ops.aten
prims = torch.ops.prims

LOWERINGS = {}  # OpOverload -> lowering function


class NotLowered(Exception):
    """This lowering does not handle these arguments: run the op as an extern instead."""


class V:
    """The lowering context: the current GraphLowering and the meta value of the node lowered."""

    graph = None
    val = None


def register_lowering(*packets):
    """Register a lowering for every overload of the given ops (packets or overloads)."""

    def deco(fn):
        for p in packets:
            if isinstance(p, torch._ops.OpOverloadPacket):
                for o in p.overloads():
                    LOWERINGS[getattr(p, o)] = fn
            else:
                LOWERINGS[p] = fn
        return fn

    return deco


# --- helpers -------------------------------------------------------------------------------------

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def is_ir(x):
    return hasattr(x, "make_loader")


def dtype_of(x):
    if is_ir(x):
        return x.get_dtype()
    if isinstance(x, bool):
        return torch.bool
    if isinstance(x, int):
        return torch.int64
    if isinstance(x, float):
        return torch.float64
    raise NotLowered(f"unsupported scalar {type(x).__name__}")


def _category(dt):
    return 2 if dt.is_floating_point else 0 if dt == torch.bool else 1


def result_type(*args):
    """Eager's type promotion: dimensioned tensors > zero-dim tensors > Python scalars."""
    dims = zeros = None
    scal = -1
    for a in args:
        if a is None:
            continue
        if is_ir(a):
            dt = a.get_dtype()
            if dt.is_complex:
                raise NotLowered("complex")
            if len(a.get_size()) > 0:
                dims = dt if dims is None else torch.promote_types(dims, dt)
            else:
                zeros = dt if zeros is None else torch.promote_types(zeros, dt)
        elif isinstance(a, (bool, int, float)):
            scal = max(scal, _category(dtype_of(a)))
        else:
            raise NotLowered(f"unsupported operand {type(a).__name__}")
    res = dims
    if zeros is not None and (res is None or _category(zeros) > _category(res)):
        res = zeros
    if scal >= 0 and (res is None or scal > _category(res)):
        res = (torch.bool, torch.int64, torch.get_default_dtype())[scal]
    if res is None:
        raise NotLowered("no operands")
    return res


def opmath(dtype):
    """The dtype arithmetic runs in: float32 for half types, else the dtype itself."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def broadcast(*sizes):
    return tuple(torch.broadcast_shapes(*[torch.Size(s) for s in sizes]))


def sizes_of(args):
    return [a.get_size() for a in args if is_ir(a)]


def loader_for(x, size, dtype):
    """A loader of x broadcast to `size` and cast to `dtype` (Python scalars become constants)."""
    if not is_ir(x):
        return lambda idx: ops.constant(x, dtype)
    inner = x.make_loader()
    xs = x.get_size()
    off = len(size) - len(xs)
    src = x.get_dtype()

    def load(idx):
        sub = [Ix() if xs[k] == 1 and size[k + off] != 1 else idx[k + off] for k in range(len(xs))]
        if xs and all(s == 1 for s in xs):
            sub = [Ix() for _ in xs]
        v = inner(sub)
        return ops.to_dtype(v, dtype, src) if src != dtype else v

    return load


def box(loops, val=None):
    """Wrap fresh Pointwise loops in a StorageBox owned by the current graph."""
    return V.graph.new_box(loops, val if val is not None else V.val)


def make_pointwise(fn, *args, out_dtype=None, compute_dtype=None, size=None):
    """Pointwise over the broadcast of args: out[i] = fn(*(arg[i] as compute_dtype))."""
    ctype = compute_dtype or opmath(result_type(*args))
    out_dtype = out_dtype or result_type(*args)
    size = size if size is not None else broadcast(*sizes_of(args)) if sizes_of(args) else ()
    loaders = [loader_for(a, size, ctype) for a in args]

    def inner_fn(idx):
        return fn(*[ld(idx) for ld in loaders])

    return box(Pointwise(out_dtype, size, inner_fn))


def unary(fn, float_only=False, out_dtype=None):
    def lower(x):
        dt = x.get_dtype()
        ct = opmath(dt)
        od = out_dtype
        if float_only and not dt.is_floating_point:
            ct = torch.float32
            od = od or torch.float32
        return make_pointwise(fn, x, out_dtype=od or dt, compute_dtype=ct)

    return lower


def register_unary(packet, opname, float_only=False, out_dtype=None):
    fn = lambda v: getattr(ops, opname)(v)
    register_lowering(packet)(unary(fn, float_only, out_dtype))


for _p, _n in [
    (aten.exp, "exp"),
    (aten.exp2, "exp2"),
    (aten.expm1, "expm1"),
    (aten.log, "log"),
    (aten.log2, "log2"),
    (aten.log10, "log10"),
    (aten.log1p, "log1p"),
    (aten.sqrt, "sqrt"),
    (aten.rsqrt, "rsqrt"),
    (aten.sin, "sin"),
    (aten.cos, "cos"),
    (aten.tan, "tan"),
    (aten.asin, "asin"),
    (aten.acos, "acos"),
    (aten.atan, "atan"),
    (aten.sinh, "sinh"),
    (aten.cosh, "cosh"),
    (aten.tanh, "tanh"),
    (aten.asinh, "asinh"),
    (aten.acosh, "acosh"),
    (aten.atanh, "atanh"),
    (aten.erf, "erf"),
    (aten.erfc, "erfc"),
    (aten.sigmoid, "sigmoid"),
    (aten.reciprocal, "reciprocal"),
    (aten.lgamma, "lgamma"),
]:
    register_unary(_p, _n, float_only=True)

for _p, _n in [
    (aten.neg, "neg"),
    (aten.abs, "abs"),
    (aten.relu, "relu"),
    (aten.sign, "sign"),
    (aten.sgn, "sign"),
    (aten.square, "square"),
]:
    register_unary(_p, _n)

for _p, _n in [(aten.floor, "floor"), (aten.ceil, "ceil"), (aten.trunc, "trunc")]:
    register_unary(_p, _n)

register_unary(aten.frac, "frac", float_only=True)
for _p, _n in [
    (aten.isnan, "isnan"),
    (aten.isinf, "isinf"),
    (aten.isfinite, "isfinite"),
    (aten.signbit, "signbit"),
]:
    register_unary(_p, _n, out_dtype=torch.bool)


@register_lowering(aten.round.default)
def _round(x):
    return make_pointwise(
        ops.round, x, out_dtype=x.get_dtype(), compute_dtype=opmath(x.get_dtype())
    )


@register_lowering(aten.logical_not)
def _logical_not(x):
    return make_pointwise(ops.logical_not, x, out_dtype=torch.bool, compute_dtype=torch.bool)


@register_lowering(aten.bitwise_not)
def _bitwise_not(x):
    dt = x.get_dtype()
    if dt == torch.bool:
        return _logical_not(x)
    if dt.is_floating_point:
        raise NotLowered("bitwise_not of float")
    return make_pointwise(ops.bitwise_not, x, out_dtype=dt, compute_dtype=dt)


def binary(fn, out_bool=False, float_result=False, int_ok=True):
    def lower(a, b, *, alpha=None):
        rt = result_type(a, b)
        if not int_ok and not rt.is_floating_point:
            raise NotLowered("integer operands")
        if float_result and not rt.is_floating_point:
            rt = torch.get_default_dtype()
        ct = opmath(rt)
        if alpha is not None and alpha != 1:
            if not is_ir(b):
                b = b * alpha
                alpha = None
        if alpha is not None and alpha != 1:
            f = lambda x, y: fn(x, ops.mul(y, ops.constant(alpha, ct)))
        else:
            f = fn
        return make_pointwise(f, a, b, out_dtype=torch.bool if out_bool else rt, compute_dtype=ct)

    return lower


register_lowering(aten.add.Tensor, aten.add.Scalar)(binary(lambda a, b: ops.add(a, b)))
register_lowering(aten.sub.Tensor, aten.sub.Scalar)(binary(lambda a, b: ops.sub(a, b)))
register_lowering(aten.mul.Tensor, aten.mul.Scalar)(binary(lambda a, b: ops.mul(a, b)))
register_lowering(aten.maximum)(binary(lambda a, b: ops.maximum(a, b)))
register_lowering(aten.minimum)(binary(lambda a, b: ops.minimum(a, b)))
register_lowering(aten.hypot, prims.hypot)(binary(lambda a, b: ops.hypot(a, b), float_result=True))
register_lowering(aten.atan2)(binary(lambda a, b: ops.atan2(a, b), float_result=True))
register_lowering(aten.fmod.Tensor, aten.fmod.Scalar)(
    binary(lambda a, b: ops.fmod(a, b), int_ok=False)
)
register_lowering(aten.remainder.Tensor, aten.remainder.Scalar)(
    binary(lambda a, b: ops.remainder(a, b), int_ok=False)
)
for _p, _n in [
    (aten.eq, "eq"),
    (aten.ne, "ne"),
    (aten.lt, "lt"),
    (aten.le, "le"),
    (aten.gt, "gt"),
    (aten.ge, "ge"),
]:
    register_lowering(_p.Tensor, _p.Scalar)(
        binary(functools.partial(lambda n, a, b: getattr(ops, n)(a, b), _n), out_bool=True)
    )
for _p, _n in [
    (aten.logical_and, "logical_and"),
    (aten.logical_or, "logical_or"),
    (aten.logical_xor, "logical_xor"),
]:
    register_lowering(_p)(
        binary(functools.partial(lambda n, a, b: getattr(ops, n)(a, b), _n), out_bool=True)
    )


def _bitwise(name):
    def lower(a, b):
        rt = result_type(a, b)
        if rt.is_floating_point:
            raise NotLowered("bitwise op on floats")
        return make_pointwise(getattr(ops, name), a, b, out_dtype=rt, compute_dtype=rt)

    return lower


register_lowering(aten.bitwise_and, aten.__and__)(_bitwise("bitwise_and"))
register_lowering(aten.bitwise_or, aten.__or__)(_bitwise("bitwise_or"))
register_lowering(aten.bitwise_xor, aten.__xor__)(_bitwise("bitwise_xor"))


@register_lowering(aten.rsub.Tensor, aten.rsub.Scalar)
def _rsub(a, b, alpha=1):
    if alpha != 1:
        raise NotLowered("rsub alpha")
    return binary(lambda x, y: ops.sub(y, x))(a, b)


@register_lowering(aten.div.Tensor, aten.div.Scalar, aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div(a, b, rounding_mode=None):
    rt = result_type(a, b)
    if rounding_mode is None:
        if not rt.is_floating_point:
            rt = torch.get_default_dtype()
        ct = opmath(rt)
        return make_pointwise(ops.truediv, a, b, out_dtype=rt, compute_dtype=ct)
    if not rt.is_floating_point:
        if is_ir(b) or b <= 0:
            raise NotLowered("integer division by a tensor or non-positive divisor")
        op = ops.floordiv if rounding_mode == "floor" else ops.truncdiv
        return make_pointwise(op, a, b, out_dtype=rt, compute_dtype=rt)
    ct = opmath(rt)
    op = ops.floordiv if rounding_mode == "floor" else ops.truncdiv
    return make_pointwise(op, a, b, out_dtype=rt, compute_dtype=ct)


@register_lowering(aten.floor_divide)
def _floor_divide(a, b):
    return _div(a, b, rounding_mode="floor")


@register_lowering(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar)
def _pow(a, b):
    rt = result_type(a, b)
    if not rt.is_floating_point:
        raise NotLowered("integer pow")
    ct = opmath(rt)
    if not is_ir(b):
        if b == 2:
            return make_pointwise(lambda x: ops.mul(x, x), a, out_dtype=rt, compute_dtype=ct)
        if b == 0.5:
            return make_pointwise(ops.sqrt, a, out_dtype=rt, compute_dtype=ct)
        if b == 1:
            return make_pointwise(lambda x: x, a, out_dtype=rt, compute_dtype=ct)
    return make_pointwise(ops.pow, a, b, out_dtype=rt, compute_dtype=ct)


@register_lowering(
    aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar
)
def _where(cond, a, b):
    rt = result_type(a, b)
    ct = opmath(rt)
    size = broadcast(*sizes_of([cond, a, b]))
    lc = loader_for(cond, size, torch.bool)
    la, lb = loader_for(a, size, ct), loader_for(b, size, ct)
    return box(Pointwise(rt, size, lambda i: ops.where(lc(i), la(i), lb(i))))


@register_lowering(aten.clamp.default, aten.clamp.Tensor, aten.clamp_min, aten.clamp_max)
def _clamp(x, min=None, max=None):
    if V.current_target in (aten.clamp_max.default, aten.clamp_max.Tensor):
        min, max = None, min
    rt = result_type(*[v for v in (x, min, max) if v is not None])
    ct = opmath(rt)
    size = broadcast(*sizes_of([x, min, max]))
    lx = loader_for(x, size, ct)
    lmin = loader_for(min, size, ct) if min is not None else None
    lmax = loader_for(max, size, ct) if max is not None else None

    def fn(i):
        v = lx(i)
        if lmin is not None:
            v = ops.maximum(v, lmin(i))
        if lmax is not None:
            v = ops.minimum(v, lmax(i))
        return v

    return box(Pointwise(rt, size, fn))


@register_lowering(aten.hardtanh.default)
def _hardtanh(x, min_val=-1.0, max_val=1.0):
    return _clamp(x, min_val, max_val)


@register_lowering(aten.gelu.default)
def _gelu(x, approximate="none"):
    dt = x.get_dtype()
    ct = opmath(dt)
    if not dt.is_floating_point:
        raise NotLowered("gelu of ints")
    c = lambda v: ops.constant(v, ct)
    if approximate == "tanh":

        def fn(v):
            inner = ops.mul(
                c(math.sqrt(2 / math.pi)),
                ops.add(v, ops.mul(c(0.044715), ops.mul(v, ops.mul(v, v)))),
            )
            return ops.mul(ops.mul(c(0.5), v), ops.add(c(1.0), ops.tanh(inner)))

    else:

        def fn(v):
            return ops.mul(
                ops.mul(v, c(0.5)), ops.add(c(1.0), ops.erf(ops.mul(v, c(math.sqrt(0.5)))))
            )

    return make_pointwise(fn, x, out_dtype=dt, compute_dtype=ct)


@register_lowering(aten.silu.default)
def _silu(x):
    dt = x.get_dtype()
    return make_pointwise(
        lambda v: ops.mul(v, ops.sigmoid(v)), x, out_dtype=dt, compute_dtype=opmath(dt)
    )


@register_lowering(aten.leaky_relu.default)
def _leaky_relu(x, negative_slope=0.01):
    dt = x.get_dtype()
    ct = opmath(dt)
    return make_pointwise(
        lambda v: ops.where(
            ops.gt(v, ops.constant(0, ct)), v, ops.mul(v, ops.constant(negative_slope, ct))
        ),
        x,
        out_dtype=dt,
        compute_dtype=ct,
    )


@register_lowering(aten.nan_to_num.default)
def _nan_to_num(x, nan=0.0, posinf=None, neginf=None):
    dt = x.get_dtype()
    if not dt.is_floating_point:
        return make_pointwise(lambda v: v, x, out_dtype=dt, compute_dtype=dt)
    fi = torch.finfo(dt)
    posinf = fi.max if posinf is None else posinf
    neginf = fi.min if neginf is None else neginf
    ct = opmath(dt)
    c = lambda v: ops.constant(v, ct)
    return make_pointwise(
        lambda v: ops.where(
            ops.isnan(v),
            c(nan),
            ops.where(ops.isinf(v), ops.where(ops.gt(v, c(0)), c(posinf), c(neginf)), v),
        ),
        x,
        out_dtype=dt,
        compute_dtype=ct,
    )


# --- type conversion, copies, creation -----------------------------------------------------------


def _convert(x, dtype):
    src = x.get_dtype()
    if src.is_complex or dtype.is_complex:
        raise NotLowered("complex")
    ld = x.make_loader()
    return box(Pointwise(dtype, x.get_size(), lambda i: ops.to_dtype(ld(i), dtype, src)))


@register_lowering(aten._to_copy.default)
def _to_copy(
    x,
    *,
    dtype=None,
    layout=None,
    device=None,
    pin_memory=None,
    non_blocking=False,
    memory_format=None,
):
    if device is not None and torch.device(device).type != "cpu":
        raise NotLowered("device copy")
    if layout not in (None, torch.strided):
        raise NotLowered("layout")
    return _convert(x, dtype or x.get_dtype())


@register_lowering(aten.to.dtype)
def _to_dtype(x, dtype, non_blocking=False, copy=False, memory_format=None):
    return x if dtype == x.get_dtype() and not copy else _convert(x, dtype)


@register_lowering(aten.to.dtype_layout)
def _to_dtype_layout(
    x,
    *,
    dtype=None,
    layout=None,
    device=None,
    pin_memory=None,
    non_blocking=False,
    copy=False,
    memory_format=None,
):
    return _to_copy(x, dtype=dtype, layout=layout, device=device)


@register_lowering(prims.convert_element_type.default)
def _convert_element_type(x, dtype):
    return _convert(x, dtype)


@register_lowering(aten.clone.default)
def _clone(x, *, memory_format=None):
    return _convert(x, x.get_dtype())


@register_lowering(aten.copy.default)
def _copy(dst, src, non_blocking=False):
    size = dst.get_size()
    ld = loader_for(src, size, dst.get_dtype())
    return box(Pointwise(dst.get_dtype(), size, ld))


@register_lowering(aten.real.default, aten.conj_physical.default, aten.conj.default)
def _real(x):
    return x


@register_lowering(
    aten.alias.default, aten.detach.default, aten.lift_fresh_copy.default, prims.view_of.default
)
def _identity(x):
    return x


def _full(size, value, dtype):
    dtype = dtype or (
        dtype_of(value) if not isinstance(value, float) else torch.get_default_dtype()
    )
    if dtype.is_complex:
        raise NotLowered("complex")
    return box(Pointwise(dtype, tuple(size), lambda i: ops.constant(value, dtype)))


def _check_device(device):
    if device is not None and torch.device(device).type != "cpu":
        raise NotLowered("device")


@register_lowering(aten.full.default)
def _full_l(size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    _check_device(device)
    return _full(size, fill_value, dtype or V.val.dtype)


@register_lowering(aten.scalar_tensor.default)
def _scalar_tensor(s, *, dtype=None, layout=None, device=None, pin_memory=None):
    _check_device(device)
    return _full((), s, dtype or V.val.dtype)


@register_lowering(aten.zeros.default, aten.ones.default, aten.empty.memory_format)
def _zeros(size, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    _check_device(device)
    v = 1 if V.current_target == aten.ones.default else 0
    return _full(size, v, dtype or V.val.dtype)


@register_lowering(
    aten.full_like.default, aten.zeros_like.default, aten.ones_like.default, aten.empty_like.default
)
def _full_like(x, *args, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    _check_device(device)
    t = V.current_target
    v = args[0] if t == aten.full_like.default else 1 if t == aten.ones_like.default else 0
    return _full(x.get_size(), v, dtype or V.val.dtype)


@register_lowering(
    aten.new_zeros.default, aten.new_ones.default, aten.new_empty.default, aten.new_full.default
)
def _new_full(x, size, *args, dtype=None, layout=None, device=None, pin_memory=None):
    _check_device(device)
    t = V.current_target
    v = args[0] if t == aten.new_full.default else 1 if t == aten.new_ones.default else 0
    return _full(size, v, dtype or V.val.dtype)


@register_lowering(aten.arange.start_step, aten.arange.default, aten.arange.start)
def _arange(*args, dtype=None, layout=None, device=None, pin_memory=None):
    _check_device(device)
    start, end, step = 0, None, 1
    if len(args) == 1:
        end = args[0]
    elif len(args) == 2:
        start, end = args
    else:
        start, end, step = args
    dtype = dtype or V.val.dtype
    n = V.val.shape[0]
    if any(isinstance(a, float) for a in (start, end, step)):
        raise NotLowered("float arange (eager computes in double with its own rounding)")

    def fn(i):
        v = ops.index_expr(i[0] * int(step) + int(start), torch.int64)
        return ops.to_dtype(v, dtype, torch.int64) if dtype != torch.int64 else v

    return box(Pointwise(dtype, (n,), fn))


@register_lowering(prims.iota.default)
def _iota(length, *, start, step, dtype, device, requires_grad):
    _check_device(device)
    return box(Pointwise(dtype, (length,), lambda i: ops.index_expr(i[0] * step + start, dtype)))


# --- views: index arithmetic, never copies -------------------------------------------------------


def _norm_dim(d, n):
    return d + n if d < 0 else d


def _strided(fn):
    """Wrap a (size, stride, offset) -> (size, stride, offset) | None rule as a Layout rule."""
    from kiln.backend.ir import Layout

    def rule(layout):
        r = fn(layout.size, layout.stride, layout.offset)
        if r is None:
            return None
        size, stride, off = r
        return Layout(size, stride, layout.dtype, layout.device, off)

    return rule


@register_lowering(aten.expand.default)
def _expand(x, size, *, implicit=False):
    xs = x.get_size()
    off = len(size) - len(xs)
    out = tuple(xs[k - off] if s == -1 else s for k, s in enumerate(size))
    if out == tuple(xs):
        return x

    def reindex(idx):
        return [Ix() if xs[k] == 1 and out[k + off] != 1 else idx[k + off] for k in range(len(xs))]

    def strided(sz, st, o):
        return (
            out,
            tuple(
                [0] * off
                + [0 if sz[k] == 1 and out[k + off] != 1 else st[k] for k in range(len(xs))]
            ),
            o,
        )

    return View(x, out, reindex, strided=_strided(strided))


@register_lowering(aten.permute.default)
def _permute(x, dims):
    n = len(x.get_size())
    dims = [_norm_dim(d, n) for d in dims]
    if dims == list(range(n)):
        return x
    xs = x.get_size()
    out = tuple(xs[d] for d in dims)

    def reindex(idx):
        base = [None] * n
        for k, d in enumerate(dims):
            base[d] = idx[k]
        return base

    def strided(sz, st, o):
        return out, tuple(st[d] for d in dims), o

    return View(x, out, reindex, strided=_strided(strided))


@register_lowering(aten.transpose.int)
def _transpose(x, d0, d1):
    n = len(x.get_size())
    dims = list(range(n))
    if n == 0:
        return x
    d0, d1 = _norm_dim(d0, n), _norm_dim(d1, n)
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return _permute(x, dims)


@register_lowering(aten.t.default)
def _t(x):
    return _transpose(x, 0, 1) if len(x.get_size()) == 2 else x


@register_lowering(aten.unsqueeze.default)
def _unsqueeze(x, dim):
    xs = x.get_size()
    dim = _norm_dim(dim, len(xs) + 1)
    out = xs[:dim] + (1,) + xs[dim:]

    def reindex(idx):
        return idx[:dim] + idx[dim + 1 :]

    def strided(sz, st, o):
        s = st[dim] * sz[dim] if dim < len(sz) else 1
        return out, st[:dim] + (s,) + st[dim:], o

    return View(x, out, reindex, strided=_strided(strided))


@register_lowering(aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims)
def _squeeze(x, dim=None):
    xs = x.get_size()
    if dim is None:
        dims = [k for k, s in enumerate(xs) if s == 1]
    else:
        dims = [dim] if isinstance(dim, int) else list(dim)
        dims = [_norm_dim(d, max(len(xs), 1)) for d in dims]
        dims = [d for d in dims if d < len(xs) and xs[d] == 1]
    if not dims:
        return x
    keep = [k for k in range(len(xs)) if k not in dims]
    out = tuple(xs[k] for k in keep)

    def reindex(idx):
        base = [Ix()] * len(xs)
        for j, k in enumerate(keep):
            base[k] = idx[j]
        return base

    def strided(sz, st, o):
        return out, tuple(st[k] for k in keep), o

    return View(x, out, reindex, strided=_strided(strided))


@register_lowering(prims.squeeze.default)
def _prims_squeeze(x, dims):
    return _squeeze(x, list(dims))


@register_lowering(aten.select.int)
def _select(x, dim, index):
    xs = x.get_size()
    dim = _norm_dim(dim, len(xs))
    index = index + xs[dim] if index < 0 else index
    out = xs[:dim] + xs[dim + 1 :]

    def reindex(idx):
        return idx[:dim] + [Ix(None, index)] + idx[dim:]

    def strided(sz, st, o):
        return out, st[:dim] + st[dim + 1 :], o + index * st[dim]

    return View(x, out, reindex, strided=_strided(strided))


@register_lowering(aten.slice.Tensor)
def _slice(x, dim=0, start=None, end=None, step=1):
    xs = x.get_size()
    dim = _norm_dim(dim, len(xs))
    n = xs[dim]
    start, end, _ = slice(start, end, step).indices(n) if step > 0 else (0, 0, 0)
    length = max(0, (end - start + step - 1) // step)
    if start == 0 and length == n:
        return x
    out = xs[:dim] + (length,) + xs[dim + 1 :]

    def reindex(idx):
        return idx[:dim] + [idx[dim] * step + start] + idx[dim + 1 :]

    def strided(sz, st, o):
        return out, st[:dim] + (st[dim] * step,) + st[dim + 1 :], o + start * st[dim]

    return View(x, out, reindex, strided=_strided(strided))


@register_lowering(aten.narrow.default)
def _narrow(x, dim, start, length):
    return _slice(x, dim, start, start + length)


def view_strides(old_size, old_stride, new_size):
    """The strides of `view(new_size)` of a strided tensor, or None if it needs a copy (ATen's rule)."""
    if prod(old_size) == 0 or not old_size:
        return contiguous_strides(new_size)
    newstride = [0] * len(new_size)
    view_d = len(new_size) - 1
    chunk = old_stride[-1]
    tensor_numel = view_numel = 1
    for td in range(len(old_size) - 1, -1, -1):
        tensor_numel *= old_size[td]
        if td == 0 or (old_size[td - 1] != 1 and old_stride[td - 1] != tensor_numel * chunk):
            while view_d >= 0 and (view_numel < tensor_numel or new_size[view_d] == 1):
                newstride[view_d] = view_numel * chunk
                view_numel *= new_size[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if td > 0:
                chunk = old_stride[td - 1]
                tensor_numel = view_numel = 1
    if view_d != -1:
        return None
    return tuple(newstride)


@register_lowering(
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.view.dtype
)
def _view(x, size):
    if isinstance(size, torch.dtype):
        raise NotLowered("view as dtype")
    xs = x.get_size()
    size = list(size)
    if -1 in size:
        k = size.index(-1)
        rest = prod(s for j, s in enumerate(size) if j != k)
        size[k] = prod(xs) // rest if rest else 0
    size = tuple(size)
    if size == tuple(xs):
        return x
    old_c = contiguous_strides(xs)
    new_c = contiguous_strides(size)
    empty = prod(size) == 0

    def reindex(idx):
        if empty:
            return [Ix()] * len(xs)
        flat = Ix()
        for i, s, st in zip(idx, size, new_c):
            if s != 1:
                flat = flat + Ix.wrap(i) * st
        return [Ix() if s == 1 else (flat // st) % s for s, st in zip(xs, old_c)]

    def strided(sz, st, o):
        ns = view_strides(sz, st, size)
        return None if ns is None else (size, ns, o)

    return View(x, size, reindex, strided=_strided(strided))


@register_lowering(aten.flatten.using_ints)
def _flatten(x, start_dim=0, end_dim=-1):
    xs = x.get_size()
    if not xs:
        return _view(x, (1,))
    s, e = _norm_dim(start_dim, len(xs)), _norm_dim(end_dim, len(xs))
    return _view(x, xs[:s] + (prod(xs[s : e + 1]),) + xs[e + 1 :])


@register_lowering(aten.split.Tensor, aten.split_with_sizes.default)
def _split(x, split_size, dim=0):
    xs = x.get_size()
    dim = _norm_dim(dim, len(xs))
    n = xs[dim]
    if isinstance(split_size, int):
        sizes = [min(split_size, n - s) for s in range(0, n, split_size)] or [0]
    else:
        sizes = list(split_size)
    out, start = [], 0
    for s in sizes:
        out.append(_slice(x, dim, start, start + s))
        start += s
    return out


@register_lowering(aten.unbind.int)
def _unbind(x, dim=0):
    dim = _norm_dim(dim, len(x.get_size()))
    return [_select(x, dim, k) for k in range(x.get_size()[dim])]


@register_lowering(aten.flip.default)
def _flip(x, dims):
    xs = x.get_size()
    dims = {_norm_dim(d, len(xs)) for d in dims}

    def reindex(idx):
        return [xs[k] - 1 - idx[k] if k in dims else idx[k] for k in range(len(xs))]

    return View(x, xs, reindex)


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
    ld = x.make_loader()

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
        lambda v: ops.truediv(v, ops.constant(n, opmath(od))),
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
        lambda v: ops.truediv(v, ops.constant(n, ct)), s, out_dtype=ct, compute_dtype=ct
    )
    mload = loader_for(mean, x.get_size(), ct)
    xload = loader_for(x, x.get_size(), ct)

    def sq(i):
        d = ops.sub(xload(i), mload(i))
        return ops.mul(d, d)

    diff2 = box(Pointwise(ct, x.get_size(), sq), val=None)
    ss = make_reduction(diff2, rdims, keepdim, "sum", ct, compute_dtype=ct)
    denom = max(n - correction, 0)
    var = make_pointwise(
        lambda v: ops.truediv(v, ops.constant(denom, ct)), ss, out_dtype=od, compute_dtype=ct
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


# --- indirect indexing, cat, padding -------------------------------------------------------------


def _indirect(ld, size):
    return lambda idx: ops.indirect_indexing(ld(idx), size)


def clamp_ix(e, n):
    """An index forced into [0, n) (for loads whose value a where() discards)."""
    from kiln.backend.ir import _atom

    lo, hi = e.bounds()
    if lo >= 0 and hi < n:
        return e
    return _atom(f"kiln_clamp_idx({e.render()}, {n})", (0, max(n - 1, 0)))


@register_lowering(aten.embedding.default)
def _embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    ws, isz = weight.get_size(), indices.get_size()
    if len(ws) != 2 or indices.get_dtype() not in (torch.int64, torch.int32):
        raise NotLowered("embedding shape")
    wl, il = weight.make_loader(), indices.make_loader()
    n = len(isz)

    def fn(idx):
        ix = ops.indirect_indexing(il(idx[:n]), ws[0], False)  # no negative indices
        return wl([ix, idx[n]])

    return box(Pointwise(weight.get_dtype(), tuple(isz) + (ws[1],), fn))


@register_lowering(aten.index_select.default)
def _index_select(x, dim, index):
    xs = x.get_size()
    if not xs:
        raise NotLowered("0-d")
    dim = _norm_dim(dim, len(xs))
    xl, il = x.make_loader(), index.make_loader()
    isz = index.get_size()
    out = xs[:dim] + (prod(isz),) + xs[dim + 1 :]

    def fn(idx):
        j = [idx[dim]] if isz else []
        ix = ops.indirect_indexing(il(j), xs[dim])
        return xl(idx[:dim] + [ix] + idx[dim + 1 :])

    return box(Pointwise(x.get_dtype(), out, fn))


@register_lowering(aten.gather.default)
def _gather(x, dim, index, *, sparse_grad=False):
    xs = x.get_size()
    if not xs:
        raise NotLowered("0-d")
    dim = _norm_dim(dim, len(xs))
    xl, il = x.make_loader(), index.make_loader()

    def fn(idx):
        ix = ops.indirect_indexing(il(idx), xs[dim])
        return xl(idx[:dim] + [ix] + idx[dim + 1 :])

    return box(Pointwise(x.get_dtype(), index.get_size(), fn))


@register_lowering(aten.index.Tensor)
def _index(x, indices):
    xs = x.get_size()
    pos = [k for k, t in enumerate(indices) if t is not None]
    if not pos or any(indices[k].get_dtype() not in (torch.int64, torch.int32) for k in pos):
        raise NotLowered("boolean or empty index")
    bshape = broadcast(*[indices[k].get_size() for k in pos])
    adjacent = pos == list(range(pos[0], pos[-1] + 1))
    nb = len(bshape)
    out = tuple(V.val.shape)
    loaders = {k: loader_for(indices[k], bshape, indices[k].get_dtype()) for k in pos}
    rest = [k for k in range(len(xs)) if k not in pos]
    xl = x.make_loader()
    first = pos[0] if adjacent else 0

    def fn(idx):
        bidx = idx[first : first + nb]
        other = idx[:first] + idx[first + nb :]
        full = [None] * len(xs)
        for k in pos:
            full[k] = ops.indirect_indexing(loaders[k](bidx), xs[k])
        for k, i in zip(rest, other):
            full[k] = i
        return xl(full)

    return box(Pointwise(x.get_dtype(), out, fn))


@register_lowering(aten.cat.default)
def _cat(tensors, dim=0):
    ts = [t for t in tensors if not (len(t.get_size()) == 1 and t.get_size()[0] == 0)]
    if not ts:
        raise NotLowered("all empty")
    if len(ts) == 1:
        return _convert(ts[0], result_type(*tensors))
    rt = result_type(*tensors)
    n = len(ts[0].get_size())
    dim = _norm_dim(dim, n)
    bounds, start = [], 0
    for t in ts:
        bounds.append((start, t.get_size()[dim]))
        start += t.get_size()[dim]
    out = ts[0].get_size()[:dim] + (start,) + ts[0].get_size()[dim + 1 :]
    ct = opmath(rt)
    loads = [(b, t.make_loader(), t.get_dtype()) for b, t in zip(bounds, ts)]

    def fn(idx):
        acc = None
        for (s, ln), ld, dt in reversed(loads):
            if ln == 0:
                continue
            sub = list(idx)
            sub[dim] = clamp_ix(Ix.wrap(idx[dim]) - s, ln)
            v = ld(sub)
            if dt != ct:
                v = ops.to_dtype(v, ct, dt)
            if acc is None:
                acc = v
            else:
                cond = ops.lt(
                    ops.index_expr(Ix.wrap(idx[dim]), torch.int64),
                    ops.constant(s + ln, torch.int64),
                )
                acc = ops.where(cond, v, acc)
        return acc if acc is not None else ops.constant(0, ct)  # an empty result

    return box(Pointwise(rt, out, fn))


@register_lowering(aten.slice_scatter.default)
def _slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    xs = x.get_size()
    dim = _norm_dim(dim, len(xs))
    start, end, _ = slice(start, end, step).indices(xs[dim])
    if step != 1:
        raise NotLowered("slice_scatter with step")
    length = max(end - start, 0)
    rt = x.get_dtype()
    ct = opmath(rt)
    xl, sl = loader_for(x, xs, ct), src.make_loader()
    sdt = src.get_dtype()

    def fn(idx):
        i = Ix.wrap(idx[dim])
        sub = list(idx)
        sub[dim] = clamp_ix(i - start, length)
        v = sl(sub)
        if sdt != ct:
            v = ops.to_dtype(v, ct, sdt)
        ie = ops.index_expr(i, torch.int64)
        inside = ops.logical_and(
            ops.ge(ie, ops.constant(start, torch.int64)), ops.lt(ie, ops.constant(end, torch.int64))
        )
        return ops.where(inside, v, xl(idx))

    if length == 0:
        return _convert(x, rt)
    return box(Pointwise(rt, xs, fn))


@register_lowering(aten.select_scatter.default)
def _select_scatter(x, src, dim, index):
    xs = x.get_size()
    dim = _norm_dim(dim, len(xs))
    index = index + xs[dim] if index < 0 else index
    rt = x.get_dtype()
    ct = opmath(rt)
    xl, sl, sdt = loader_for(x, xs, ct), src.make_loader(), src.get_dtype()

    def fn(idx):
        v = sl(idx[:dim] + idx[dim + 1 :])
        if sdt != ct:
            v = ops.to_dtype(v, ct, sdt)
        hit = ops.eq(
            ops.index_expr(Ix.wrap(idx[dim]), torch.int64), ops.constant(index, torch.int64)
        )
        return ops.where(hit, v, xl(idx))

    return box(Pointwise(rt, xs, fn))


@register_lowering(aten.stack.default)
def _stack(tensors, dim=0):
    dim = _norm_dim(dim, len(tensors[0].get_size()) + 1)
    return _cat([_unsqueeze(t, dim) for t in tensors], dim)


@register_lowering(aten.constant_pad_nd.default)
def _constant_pad(x, pad, value=0):
    xs = x.get_size()
    if any(p < 0 for p in pad):
        raise NotLowered("negative padding")
    pads = {}
    for k in range(len(pad) // 2):
        pads[len(xs) - 1 - k] = (pad[2 * k], pad[2 * k + 1])
    out = tuple(s + sum(pads.get(d, (0, 0))) for d, s in enumerate(xs))
    dt = x.get_dtype()
    ct = opmath(dt)
    xl = x.make_loader()

    def fn(idx):
        sub, conds = list(idx), []
        for d, (lo, _) in pads.items():
            e = Ix.wrap(idx[d]) - lo
            ie = ops.index_expr(e, torch.int64)
            conds.append(
                ops.logical_and(
                    ops.ge(ie, ops.constant(0, torch.int64)),
                    ops.lt(ie, ops.constant(xs[d], torch.int64)),
                )
            )
            sub[d] = clamp_ix(e, xs[d])
        v = xl(sub)
        if dt != ct:
            v = ops.to_dtype(v, ct, dt)
        if not conds:
            return v
        c = functools.reduce(ops.logical_and, conds)
        return ops.where(c, v, ops.constant(value, ct))

    return box(Pointwise(dt, out, fn))


# --- extern kernels: ATen calls into our buffers -------------------------------------------------

# op -> its .out overload (called with out= a buffer we allocate with eager's strides)
EXTERN_OUT = {
    aten.mm.default: aten.mm.out,
    aten.bmm.default: aten.bmm.out,
    aten.addmm.default: aten.addmm.out,
    aten.baddbmm.default: aten.baddbmm.out,
}
# ops that always run as ATen calls (no .out into our buffers)
EXTERN_ALWAYS = {
    aten.convolution.default,
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    aten.as_strided.default,
}
