"""`@register_lowering(aten.x)`: ATen ops → loop IR (Pointwise, Reduction, views, externs).

A lowering receives IR values (StorageBox / View / Buffer / Constant) and Python scalars in the
positions of the op's arguments and returns an IR value (or a tuple of them). A lowering may raise
`NotLowered` for a case it does not handle; the op then runs as an ATen extern call (never a
failure). Every lowered result is checked against the FX node's meta value (size and dtype).
"""

import contextlib
import functools
import math
import threading

import torch

from kiln.backend.ir import (
    Ix,
    Pointwise,
    current_device,
    is_sym,
    known_eq,
    ops,
    size_exprs,
    to_expr,
)

aten = torch.ops.aten
prims = torch.ops.prims

LOWERINGS = {}  # OpOverload -> lowering function (with lowering_reductions.py, lowering_views.py; graph.py imports all three)


class NotLowered(Exception):
    """This lowering does not handle these arguments: run the op as an extern instead."""


class _LoweringContext(threading.local):
    """The node being lowered, in this thread: its GraphLowering, meta value and ATen target.

    Set by `lowering_node` around one lowering call and restored after it (lowerings run inside
    one another: a decomposition lowers through other lowerings)."""

    graph = None  # the GraphLowering
    val = None  # node.meta["val"] of the node lowered
    current_target = None  # its OpOverload (one lowering serves several overloads)


V = _LoweringContext()


@contextlib.contextmanager
def lowering_node(graph, val, target):
    """Lower one node: V.graph, V.val and V.current_target are its, until the block ends."""
    saved = V.graph, V.val, V.current_target
    V.graph, V.val, V.current_target = graph, val, target
    try:
        yield
    finally:
        V.graph, V.val, V.current_target = saved


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
    if isinstance(x, int) or is_sym(x):
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
        elif isinstance(a, (bool, int, float)) or is_sym(a):
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
    """The broadcast of sizes; symbolic sizes must agree as expressions (the tracer's shape
    rules unified them with a guard), else the op runs as an extern."""
    if all(type(x) is int for s in sizes for x in s):
        return tuple(torch.broadcast_shapes(*[torch.Size(s) for s in sizes]))
    n = max(len(s) for s in sizes)
    out = []
    for d in range(n):
        dims = [s[d - n + len(s)] for s in sizes if d - n + len(s) >= 0]
        picked = 1
        for x in dims:
            if type(x) is int and x == 1:
                continue
            if type(picked) is int and picked == 1:
                picked = x
            elif not known_eq(picked, x):
                raise NotLowered(f"symbolic broadcast of {picked} and {x}")
        out.append(picked)
    return tuple(out)


def scalar(x, dtype):
    """ops value of a Python scalar or a symbolic size (an index expression) as dtype."""
    if is_sym(x):
        return ops.index_expr(Ix.wrap(x), dtype)
    return ops.constant(x, dtype)


def ir_sizes(args):
    """The sizes of the IR values among `args`."""
    return [a.get_size() for a in args if is_ir(a)]


def _one(s):
    return type(s) is int and s == 1


def loader_for(x, size, dtype):
    """A loader of x broadcast to `size` and cast to `dtype` (Python scalars become constants)."""
    if not is_ir(x):
        return lambda idx: scalar(x, dtype)
    xs = x.get_size()
    off = len(size) - len(xs)
    src = x.get_dtype()

    every = bool(xs) and all(_one(s) for s in xs)
    bcast = [every or (_one(xs[k]) and not _one(size[k + off])) for k in range(len(xs))]

    def load(idx):
        sub = [Ix() if b else idx[k + off] for k, b in enumerate(bcast)]
        v = x.make_loader()(
            sub
        )  # late-bound (see Note [Backend: when a pointwise value is realized])
        return ops.to_dtype(v, dtype, src) if src != dtype else v

    return load


def box(loops, val=None):
    """Wrap fresh Pointwise loops in a StorageBox owned by the current graph."""
    return V.graph.new_box(loops, val if val is not None else V.val)


def make_pointwise(fn, *args, out_dtype=None, compute_dtype=None, size=None):
    """Pointwise over the broadcast of args: out[i] = fn(*(arg[i] as compute_dtype))."""
    ctype = compute_dtype or opmath(result_type(*args))
    out_dtype = out_dtype or result_type(*args)
    size = size if size is not None else broadcast(*ir_sizes(args)) if ir_sizes(args) else ()
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
            f = lambda x, y: fn(x, ops.mul(y, scalar(alpha, ct)))
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
    size = broadcast(*ir_sizes([cond, a, b]))
    lc = loader_for(cond, size, torch.bool)
    la, lb = loader_for(a, size, ct), loader_for(b, size, ct)
    return box(Pointwise(rt, size, lambda i: ops.where(lc(i), la(i), lb(i))))


@register_lowering(aten.clamp.default, aten.clamp.Tensor, aten.clamp_min, aten.clamp_max)
def _clamp(x, min=None, max=None):
    if V.current_target in (aten.clamp_max.default, aten.clamp_max.Tensor):
        min, max = None, min
    rt = result_type(*[v for v in (x, min, max) if v is not None])
    ct = opmath(rt)
    size = broadcast(*ir_sizes([x, min, max]))
    lx = loader_for(x, size, ct)
    lmin = loader_for(min, size, ct) if min is not None else None
    lmax = loader_for(max, size, ct) if max is not None else None

    # a number bound keeps x on a tie (clamp(-0., min=0.) is -0.), a tensor bound is maximum's
    lo_op = ops.maximum if is_ir(min) else ops.clamp_min
    hi_op = ops.minimum if is_ir(max) else ops.clamp_max

    def fn(i):
        v = lx(i)
        if lmin is not None:
            v = lo_op(v, lmin(i))
        if lmax is not None:
            v = hi_op(v, lmax(i))
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
    if device is not None and not _on_graph_device(device):
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
    size = tuple(to_expr(s) for s in size)
    return box(Pointwise(dtype, size, lambda i: scalar(value, dtype)))


def _check_device(device):
    if device is not None and not _on_graph_device(device):
        raise NotLowered("device")


def _on_graph_device(device):
    """Whether `device` is the device of the graph being lowered (cuda means cuda:current)."""
    d, g = torch.device(device), current_device()
    return d.type == g.type and (d.index is None or g.index is None or d.index == g.index)


@register_lowering(aten.full.default)
def _full_l(size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    _check_device(device)
    return _full(size, fill_value, dtype or V.val.dtype)


@register_lowering(aten.scalar_tensor.default)
def _scalar_tensor(s, *, dtype=None, layout=None, device=None, pin_memory=None):
    _check_device(device)
    return _full((), s, dtype or V.val.dtype)


# (`_efficientzerotensor`: functorch's forward-mode zeros, a tensor without storage in eager, whose
# data a kernel must never read: real zeros here)
@register_lowering(
    aten.zeros.default,
    aten.ones.default,
    aten.empty.memory_format,
    aten._efficientzerotensor.default,
)
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
    n = size_exprs(V.val)[0]
    if any(isinstance(a, float) for a in (start, end, step)):
        raise NotLowered("float arange (eager computes in double with its own rounding)")
    if is_sym(step):
        raise NotLowered("symbolic arange step")

    def fn(i):
        v = ops.index_expr(i[0] * int(step) + start, torch.int64)
        return ops.to_dtype(v, dtype, torch.int64) if dtype != torch.int64 else v

    return box(Pointwise(dtype, (n,), fn))


@register_lowering(prims.iota.default)
def _iota(length, *, start, step, dtype, device, requires_grad):
    _check_device(device)
    return box(Pointwise(dtype, (length,), lambda i: ops.index_expr(i[0] * step + start, dtype)))


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
    aten.convolution_backward.default,
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    aten.as_strided.default,
}
