"""Lowerings of views (index arithmetic, never copies), indirect indexing, cat and padding."""

import functools

import torch

from kiln.backend.index_exprs import _atom
from kiln.backend.ir import (
    Ix,
    Layout,
    Pointwise,
    View,
    cexpr,
    contiguous_strides,
    floordiv,
    known_eq,
    known_lt,
    known_nonneg,
    ops,
    prod,
    size_exprs,
    to_expr,
)
from kiln.backend.lowering import (
    NotLowered,
    V,
    _convert,
    aten,
    box,
    broadcast,
    loader_for,
    opmath,
    prims,
    register_lowering,
    result_type,
    scalar,
)

# --- views: index arithmetic, never copies -------------------------------------------------------


def _norm_dim(d, n):
    return d + n if d < 0 else d


def _strided(fn):
    """Wrap a (size, stride, offset) -> (size, stride, offset) | None rule as a Layout rule."""

    def rule(layout):
        r = fn(layout.size, layout.stride, layout.offset)
        if r is None:
            return None
        size, stride, off = r
        return Layout(size, stride, layout.dtype, layout.device, off)

    return rule


# ops lowered to index arithmetic over their input (a View): they read nothing themselves, so
# only their own consumers count as uses of the value under them (graph.note_use)
VIEW_OPS = {
    aten.expand.default,
    aten.permute.default,
    aten.transpose.int,
    aten.t.default,
    aten.unsqueeze.default,
    aten.squeeze.default,
    aten.squeeze.dim,
    aten.squeeze.dims,
    prims.squeeze.default,
    aten.select.int,
    aten.slice.Tensor,
    aten.narrow.default,
    aten.view.default,
    aten._unsafe_view.default,
    aten.reshape.default,
    aten.flatten.using_ints,
    aten.split.Tensor,
    aten.split_with_sizes.default,
    aten.unbind.int,
    aten.flip.default,
}


@register_lowering(aten.expand.default)
def _expand(x, size, *, implicit=False):
    xs = x.get_size()
    size = [to_expr(s) for s in size]
    off = len(size) - len(xs)
    out = tuple(xs[k - off] if type(s) is int and s == -1 else s for k, s in enumerate(size))
    if _same(out, xs):
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
    index = to_expr(index)
    if type(index) is not int and not known_nonneg(index):
        raise NotLowered("symbolic select index of unknown sign")
    index = index + xs[dim] if type(index) is int and index < 0 else index
    out = xs[:dim] + xs[dim + 1 :]

    def reindex(idx):
        return idx[:dim] + [Ix.wrap(index)] + idx[dim:]

    def strided(sz, st, o):
        return out, st[:dim] + st[dim + 1 :], o + index * st[dim]

    return View(x, out, reindex, strided=_strided(strided))


@register_lowering(aten.slice.Tensor)
def _slice(x, dim=0, start=None, end=None, step=1):
    xs = x.get_size()
    dim = _norm_dim(dim, len(xs))
    n = xs[dim]
    try:
        start, end, length = slice_bounds(n, start, end, step)
    except NotLowered:
        start, end, length = _slice_from_val(dim, start, step)
    if known_eq(start, 0) and known_eq(length, n):
        return x
    out = xs[:dim] + (length,) + xs[dim + 1 :]

    def reindex(idx):
        return idx[:dim] + [idx[dim] * step + start] + idx[dim + 1 :]

    def strided(sz, st, o):
        return out, st[:dim] + (st[dim] * step,) + st[dim + 1 :], o + start * st[dim]

    return View(x, out, reindex, strided=_strided(strided))


def _slice_from_val(dim, start, step):
    """x[start:end] whose clamping is not provable (x[:, :3] of a dim of size s1 >= 2): the traced
    length is what the shape guards made true, so the slice takes it (start >= 0, step 1)."""
    start = 0 if start is None else to_expr(start)
    val = V.val
    if step != 1 or not isinstance(val, torch.Tensor) or not known_nonneg(start):
        raise NotLowered("slice bounds not provable")
    vs = size_exprs(val)
    if len(vs) <= dim:
        raise NotLowered("slice bounds not provable")
    return start, start + vs[dim], vs[dim]


def slice_bounds(n, start, end, step):
    """(start, end, length) of x[start:end:step] along a dim of size n, normalised like Python;
    for symbolic sizes only the cases whose clamping is proved (else NotLowered)."""
    start, end, step = (None if v is None else to_expr(v) for v in (start, end, step))
    if type(step) is not int:
        raise NotLowered("symbolic slice step")
    if all(type(v) is int or v is None for v in (n, start, end)):
        start, end, _ = slice(start, end, step).indices(n) if step > 0 else (0, 0, 0)
        return start, end, max(0, (end - start + step - 1) // step)
    if step <= 0:
        raise NotLowered("slice step")

    def clamp(v, default):
        if v is None:
            return default
        if type(v) is int and v >= 2**62:  # sys.maxsize and friends: the end
            return n
        if type(v) is int and v < 0:
            v = n + v
        if known_nonneg(v) and (known_nonneg(n - v)):
            return v
        if known_nonneg(v - n):
            return n
        raise NotLowered(f"slice bound {v} of a dim of size {n} is not provably in range")

    start, end = clamp(start, 0), clamp(end, n)
    if not known_nonneg(end - start):
        raise NotLowered(f"slice [{start}:{end}] may be empty")
    length = end - start if step == 1 else floordiv(end - start + step - 1, step)
    return start, end, length


def _same(a, b):
    """Two size tuples equal as expressions."""
    return len(a) == len(b) and all(known_eq(x, y) for x, y in zip(a, b))


@register_lowering(aten.narrow.default)
def _narrow(x, dim, start, length):
    return _slice(x, dim, start, start + length)


def view_strides(old_size, old_stride, new_size):
    """The strides of `view(new_size)` of a strided tensor, or None if it needs a copy (ATen's rule)."""
    if not old_size or known_eq(prod(old_size), 0):
        return contiguous_strides(new_size)
    if not all(type(v) is int for v in tuple(old_size) + tuple(old_stride) + tuple(new_size)):
        return _view_strides_sym(old_size, old_stride, new_size)
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


def _view_strides_sym(old_size, old_stride, new_size):
    """view_strides for symbolic sizes: ATen's chunk walk where `view_numel < tensor_numel` is
    "the chunk is not complete yet" (equal products, proved), so any unproved step is a copy."""
    newstride = [0] * len(new_size)
    view_d = len(new_size) - 1
    chunk = old_stride[-1]
    tensor_numel = view_numel = 1
    for td in range(len(old_size) - 1, -1, -1):
        tensor_numel = prod([tensor_numel, old_size[td]])
        contiguous_above = td > 0 and (
            known_eq(old_size[td - 1], 1) or known_eq(old_stride[td - 1], tensor_numel * chunk)
        )
        if td == 0 or not contiguous_above:
            while view_d >= 0 and (
                not known_eq(view_numel, tensor_numel) or known_eq(new_size[view_d], 1)
            ):
                if not known_eq(view_numel, tensor_numel) and known_lt(tensor_numel, view_numel):
                    return None
                newstride[view_d] = prod([view_numel, chunk])
                view_numel = prod([view_numel, new_size[view_d]])
                view_d -= 1
            if not known_eq(view_numel, tensor_numel):
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
    size = [to_expr(s) for s in size]
    neg = [j for j, s in enumerate(size) if type(s) is int and s == -1]
    if neg:
        k = neg[0]
        rest = prod(s for j, s in enumerate(size) if j != k)
        size[k] = floordiv(prod(xs), rest) if not known_eq(rest, 0) else 0
    size = tuple(size)
    if _same(size, xs):
        return x
    old_c = contiguous_strides(xs)
    new_c = contiguous_strides(size)
    empty = known_eq(prod(size), 0)

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
    if not isinstance(split_size, (list, tuple)):
        split_size = to_expr(split_size)
    if isinstance(split_size, (list, tuple)):
        sizes = [to_expr(s) for s in split_size]
    elif type(split_size) is int and type(n) is int:
        sizes = [min(split_size, n - s) for s in range(0, n, split_size)] or [0]
    else:  # the tracer fixed the number of pieces (a guard): all full but the last
        count = len(V.val)
        sizes = [split_size] * (count - 1) + [n - (count - 1) * split_size]
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
        return [Ix.wrap(xs[k] - 1) - idx[k] if k in dims else idx[k] for k in range(len(xs))]

    return View(x, xs, reindex)


# --- indirect indexing, cat, padding -------------------------------------------------------------


def _indirect(ld, size):
    return lambda idx: ops.indirect_indexing(ld(idx), size)


def clamp_ix(e, n):
    """An index forced into [0, n) (for loads whose value a where() discards)."""
    lo, hi = e.bounds()
    if known_nonneg(lo) and known_lt(hi, n):
        return e
    top = max(n - 1, 0) if type(n) is int else n - 1
    return _atom(f"kiln_clamp_idx({e.render()}, {cexpr(n)})", (0, top))


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
    out = size_exprs(V.val)
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
                    scalar(s + ln, torch.int64),
                )
                acc = ops.where(cond, v, acc)
        return acc if acc is not None else ops.constant(0, ct)  # an empty result

    return box(Pointwise(rt, out, fn))


@register_lowering(aten.slice_scatter.default)
def _slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    xs = x.get_size()
    dim = _norm_dim(dim, len(xs))
    if step != 1:
        raise NotLowered("slice_scatter with step")
    start, end, length = slice_bounds(xs[dim], start, end, step)
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
            ops.ge(ie, scalar(start, torch.int64)), ops.lt(ie, scalar(end, torch.int64))
        )
        return ops.where(inside, v, xl(idx))

    if known_eq(length, 0):
        return _convert(x, rt)
    return box(Pointwise(rt, xs, fn))


@register_lowering(aten.select_scatter.default)
def _select_scatter(x, src, dim, index):
    xs = x.get_size()
    dim = _norm_dim(dim, len(xs))
    index = to_expr(index)
    if type(index) is not int and not known_nonneg(index):
        raise NotLowered("symbolic select index of unknown sign")
    index = index + xs[dim] if type(index) is int and index < 0 else index
    rt = x.get_dtype()
    ct = opmath(rt)
    xl, sl, sdt = loader_for(x, xs, ct), src.make_loader(), src.get_dtype()

    def fn(idx):
        v = sl(idx[:dim] + idx[dim + 1 :])
        if sdt != ct:
            v = ops.to_dtype(v, ct, sdt)
        hit = ops.eq(ops.index_expr(Ix.wrap(idx[dim]), torch.int64), scalar(index, torch.int64))
        return ops.where(hit, v, xl(idx))

    return box(Pointwise(rt, xs, fn))


@register_lowering(aten.stack.default)
def _stack(tensors, dim=0):
    dim = _norm_dim(dim, len(tensors[0].get_size()) + 1)
    return _cat([_unsqueeze(t, dim) for t in tensors], dim)


@register_lowering(aten.constant_pad_nd.default)
def _constant_pad(x, pad, value=0):
    xs = x.get_size()
    if any(type(p) is not int for p in pad):
        raise NotLowered("symbolic padding")
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
                    ops.lt(ie, scalar(xs[d], torch.int64)),
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
