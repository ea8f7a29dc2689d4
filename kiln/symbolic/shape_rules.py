"""Symbolic shape rules for ATen ops: output sizes from input sizes that may be SymNodes.

Contract: `rule_for(op)` returns a rule or None. A rule is called like the op, with every tensor
argument replaced by its `Sizes` (a tuple of ints/SymNodes; lists of tensors become lists of
`Sizes`), and returns the output's `Sizes`, or a tuple of them (None for an absent output) for a
multi-output op. Rules only compute sizes: the caller runs the op on meta tensors (concrete hints)
for dtype, device and rank, and attaches the rule's sizes and `contiguous_strides(sizes)`. Where a
rule needs a fact (two sizes equal, a size divisible), it asks through SymNode comparisons, which
record guards in the ShapeEnv. For an op with no rule (`rule_for(op) is None`), the caller
specialises its inputs' sizes: `int(s)` on each SymNode size of each tensor argument (a guard
`Eq(s, hint)` each), then uses the meta output's concrete sizes.
"""

import math

import torch

from kiln.symbolic.shape_env import SymNode, contiguous_strides, hint_of  # noqa: F401

aten = torch.ops.aten


class Sizes(tuple):
    """The sizes of one tensor argument (ints and SymNodes)."""


def _is_size(x):
    return isinstance(x, int | SymNode) and not isinstance(x, bool)


def _norm_dim(dim, rank):
    """A dim in [0, rank) (rank 0 accepts -1/0 like torch)."""
    r = max(rank, 1)
    if not -r <= dim < r:
        raise IndexError(f"dim {dim} out of range for rank {rank}")
    return dim % r


def _dims(dim, rank):
    """A sorted tuple of dims; None or [] means all."""
    if dim is None or (isinstance(dim, list | tuple) and len(dim) == 0):
        return tuple(range(rank))
    if isinstance(dim, int):
        dim = [dim]
    return tuple(sorted({_norm_dim(d, rank) for d in dim}))


def _check_equal(a, b, what):
    """Require two sizes equal (a guard for symbolic ones)."""
    if not a == b:
        raise RuntimeError(f"{what}: size mismatch {a} vs {b}")
    return a


def numel(sizes):
    """Product of the sizes."""
    n = 1
    for s in sizes:
        n = n * s
    return n


def broadcast_shapes(*shapes):
    """Broadcast sizes: size 1 stretches (guarded when symbolic), equal sizes unify."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(rank):
        cur = 1
        for shape in shapes:
            j = i - (rank - len(shape))
            if j < 0:
                continue
            s = shape[j]
            if s == 1:
                continue
            cur = s if cur == 1 else _check_equal(cur, s, "broadcast")
        out.append(cur)
    return Sizes(out)


# -- pointwise and shape-preserving -----------------------------------------------------------


def pointwise(*args, **kwargs):
    """Broadcast of all tensor arguments."""
    shapes = [a for a in (*args, *kwargs.values()) if isinstance(a, Sizes)]
    return broadcast_shapes(*shapes)


def same_as_first(x, *args, **kwargs):
    """The first argument's sizes; any other tensor argument must have the same sizes."""
    for other in (*args, *kwargs.values()):
        if isinstance(other, Sizes):
            if len(other) != len(x):
                raise RuntimeError(f"rank mismatch {len(other)} vs {len(x)}")
            for a, b in zip(x, other):
                _check_equal(a, b, "same-shape op")
    return Sizes(x)


def first_sizes(x, *args, **kwargs):
    """The first argument's sizes; other tensors may differ (index_add, scatter: checked by meta)."""
    return Sizes(x)


def two_like_first(x, *args, **kwargs):
    """Two outputs with the first argument's sizes (native_dropout)."""
    return Sizes(x), Sizes(x)


# -- reductions --------------------------------------------------------------------------------


def _reduce(x, dim, keepdim):
    dims = _dims(dim, len(x))
    if keepdim:
        return Sizes(1 if i in dims else s for i, s in enumerate(x))
    return Sizes(s for i, s in enumerate(x) if i not in dims)


def reduce_dims(x, dim=None, keepdim=False, *args, **kwargs):
    """sum/mean/amax/...(x, dim, keepdim)."""
    return _reduce(x, dim, keepdim)


def reduce_all(x, *args, **kwargs):
    """A full reduction to a scalar."""
    return Sizes()


def reduce_correction(x, dim=None, *, correction=None, keepdim=False):
    """var/std.correction."""
    return _reduce(x, dim, keepdim)


def var_mean(x, dim=None, unbiased=True, keepdim=False, *, correction=None):
    """var_mean.dim/.correction: (var, mean), both with the reduced sizes."""
    out = _reduce(x, dim, keepdim)
    return out, Sizes(out)


def reduce_with_indices(x, dim, keepdim=False):
    """max.dim/min.dim: values and indices."""
    out = _reduce(x, dim, keepdim)
    return out, out


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    """linalg_vector_norm: a reduction over `dim` (all when None)."""
    return _reduce(x, dim, keepdim)


def glu(x, dim=-1):
    """glu: `dim` halved (it must be even: a guard)."""
    d = _norm_dim(dim, len(x))
    if not x[d] % 2 == 0:
        raise RuntimeError("glu: odd size")
    return Sizes(x[d] // 2 if i == d else s for i, s in enumerate(x))


def argreduce(x, dim=None, keepdim=False):
    """argmax/argmin: a dim or all."""
    if dim is None:
        return Sizes([1] * len(x)) if keepdim else Sizes()
    return _reduce(x, dim, keepdim)


# -- views ---------------------------------------------------------------------------------------


def infer_size(shape, n):
    """`shape` with one -1 inferred from numel `n` (guards the divisibility)."""
    shape = list(shape)
    holes = [i for i, s in enumerate(shape) if isinstance(s, int) and s == -1]
    if len(holes) > 1:
        raise RuntimeError("only one dimension can be inferred")
    known = numel(s for i, s in enumerate(shape) if i not in holes)
    if holes:
        if not (n % known) == 0:
            raise RuntimeError(f"shape {shape} is invalid for input of size {n}")
        shape[holes[0]] = n // known
    else:
        _check_equal(known, n, "view")
    return Sizes(shape)


def view(x, size):
    """view/_unsafe_view/reshape."""
    return infer_size(size, numel(x))


def permute(x, dims):
    """permute."""
    return Sizes(x[_norm_dim(d, len(x))] for d in dims)


def transpose(x, dim0, dim1):
    """transpose.int."""
    out = list(x)
    if len(x) == 0:
        return Sizes()
    a, b = _norm_dim(dim0, len(x)), _norm_dim(dim1, len(x))
    out[a], out[b] = out[b], out[a]
    return Sizes(out)


def t(x):
    """t: transpose of a <=2-d tensor."""
    return Sizes(reversed(x))


def expand(x, size, implicit=False):
    """expand: -1 keeps, size-1 dims stretch, new leading dims."""
    lead = len(size) - len(x)
    out = []
    for i, s in enumerate(size):
        if i < lead:
            out.append(s)
            continue
        old = x[i - lead]
        if isinstance(s, int) and s == -1:
            out.append(old)
        elif old == 1:
            out.append(s)
        else:
            out.append(_check_equal(old, s, "expand"))
    return Sizes(out)


def repeat(x, repeats):
    """repeat: each dim times its repeat count (new leading dims)."""
    lead = len(repeats) - len(x)
    if lead < 0:
        raise RuntimeError("repeat: fewer repeats than dims")
    return Sizes(r if i < lead else r * x[i - lead] for i, r in enumerate(repeats))


def unsqueeze(x, dim):
    """unsqueeze."""
    out = list(x)
    out.insert(_norm_dim(dim, len(x) + 1), 1)
    return Sizes(out)


def squeeze(x, dim=None):
    """squeeze.default/dim/dims: drop the chosen dims that are 1 (guarded)."""
    dims = _dims(dim, len(x))
    return Sizes(s for i, s in enumerate(x) if not (i in dims and s == 1))


def _clamp_index(i, size, default):
    """A slice bound in [0, size]."""
    if i is None:
        return default
    if isinstance(i, int) and i >= 2**62:
        return size
    if i < 0:
        i = i + size
        return 0 if i < 0 else i
    return size if i > size else i


def slice_(x, dim=0, start=None, end=None, step=1):
    """slice.Tensor: clamped bounds (a guard per symbolic comparison)."""
    d = _norm_dim(dim, len(x))
    size = x[d]
    lo = _clamp_index(start, size, 0)
    hi = _clamp_index(end, size, size)
    length = (hi - lo + (step - 1)) // step if hi > lo else 0
    out = list(x)
    out[d] = length
    return Sizes(out)


def select(x, dim, index):
    """select.int (the index must stay in range: a guard when the size is symbolic)."""
    d = _norm_dim(dim, len(x))
    if not (-x[d] <= index < x[d]):
        raise IndexError(f"select: index {index} out of range for size {x[d]}")
    return Sizes(s for i, s in enumerate(x) if i != d)


def split(x, split_size, dim=0):
    """split.Tensor: the number of chunks is specialised."""
    d = _norm_dim(dim, len(x))
    size = x[d]
    count = max(int((size + split_size - 1) // split_size), 1)
    out = []
    for k in range(count):
        part = list(x)
        part[d] = split_size if k < count - 1 else size - split_size * (count - 1)
        out.append(Sizes(part))
    return tuple(out)


def split_with_sizes(x, split_sizes, dim=0):
    """split_with_sizes."""
    d = _norm_dim(dim, len(x))
    _check_equal(sum(split_sizes), x[d], "split_with_sizes")
    return tuple(Sizes(s if i == d else xs for i, xs in enumerate(x)) for s in split_sizes)


def unbind(x, dim=0):
    """unbind.int: the number of outputs is specialised."""
    d = _norm_dim(dim, len(x))
    rest = Sizes(s for i, s in enumerate(x) if i != d)
    return tuple(rest for _ in range(int(x[d])))


# -- joining ---------------------------------------------------------------------------------


def cat(tensors, dim=0):
    """cat: sum along dim, other dims unify; legacy 1-d empty tensors are skipped."""
    shapes = [s for s in tensors if not (len(s) == 1 and isinstance(s[0], int) and s[0] == 0)]
    if not shapes:
        return Sizes([0])
    d = _norm_dim(dim, len(shapes[0]))
    out = list(shapes[0])
    for s in shapes[1:]:
        for i in range(len(out)):
            if i == d:
                out[i] = out[i] + s[i]
            else:
                out[i] = _check_equal(out[i], s[i], "cat")
    return Sizes(out)


def stack(tensors, dim=0):
    """stack: a new dim of len(tensors)."""
    first = tensors[0]
    for s in tensors[1:]:
        for a, b in zip(first, s):
            _check_equal(a, b, "stack")
    out = list(first)
    out.insert(_norm_dim(dim, len(first) + 1), len(tensors))
    return Sizes(out)


# -- matmul family -----------------------------------------------------------------------------


def mm(a, b):
    """mm: [n, k] @ [k, m]."""
    _check_equal(a[1], b[0], "mm")
    return Sizes([a[0], b[1]])


def bmm(a, b):
    """bmm: [B, n, k] @ [B, k, m]."""
    _check_equal(a[0], b[0], "bmm")
    _check_equal(a[2], b[1], "bmm")
    return Sizes([a[0], a[1], b[2]])


def mv(a, v):
    """mv: [n, k] @ [k] (matmul of a matrix, or folded batch, with a vector)."""
    _check_equal(a[1], v[0], "mv")
    return Sizes([a[0]])


def dot(a, b):
    """dot/vdot: [k] . [k] -> []."""
    _check_equal(a[0], b[0], "dot")
    return Sizes()


def addmm(bias, a, b, *, beta=1, alpha=1):
    """addmm: bias broadcast to mm's sizes."""
    out = mm(a, b)
    broadcast_shapes(bias, out)
    return out


def baddbmm(bias, a, b, *, beta=1, alpha=1):
    """baddbmm."""
    out = bmm(a, b)
    broadcast_shapes(bias, out)
    return out


def matmul(a, b):
    """matmul: vector/matrix/batched forms with batch broadcasting."""
    if len(a) == 1 and len(b) == 1:
        _check_equal(a[0], b[0], "matmul")
        return Sizes()
    if len(a) == 1:
        _check_equal(a[0], b[-2], "matmul")
        return Sizes((*b[:-2], b[-1]))
    if len(b) == 1:
        _check_equal(a[-1], b[0], "matmul")
        return Sizes(a[:-1])
    _check_equal(a[-1], b[-2], "matmul")
    batch = broadcast_shapes(Sizes(a[:-2]), Sizes(b[:-2]))
    return Sizes((*batch, a[-2], b[-1]))


# -- convolution, embedding, indexing --------------------------------------------------------


def convolution(x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    """convolution.default: the output size formula per spatial dim."""
    nsp = len(w) - 2
    batched = len(x) == nsp + 2
    in_channels = x[1] if batched else x[0]
    _check_equal(in_channels, w[0] if transposed else w[1] * groups, "convolution")
    spatial = x[-nsp:]
    out = []
    for i in range(nsp):
        s, p, d, k = stride[i], padding[i], dilation[i], w[2 + i]
        if transposed:
            out.append((spatial[i] - 1) * s - 2 * p + d * (k - 1) + output_padding[i] + 1)
        else:
            out.append((spatial[i] + 2 * p - d * (k - 1) - 1) // s + 1)
    for n in out:
        if not n > 0:
            raise RuntimeError(f"convolution: output size {n} is not positive")
    channels = w[1] * groups if transposed else w[0]
    return Sizes(([x[0]] if batched else []) + [channels] + out)


def convolution_backward(grad, x, w, bias_sizes, *args):
    """convolution_backward: grads of input, weight and bias (None where the mask says so)."""
    mask = args[-1]
    bias = Sizes(bias_sizes) if bias_sizes is not None else Sizes([w[0]])
    return tuple(Sizes(o) if m else None for o, m in zip((x, w, bias), mask))


def _pool_out(size, k, s, p, d, ceil_mode):
    """ATen's pooling_output_shape; with ceil_mode, a last window that would start in the right
    padding is dropped (a guard when the size is symbolic)."""
    out = (size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out = out - 1
    return out


def _pair(v, n=2):
    v = list(v) if isinstance(v, list | tuple) else [v]
    return v * n if len(v) == 1 else v


def _pool(n, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False, *args):
    """The pooling output size per spatial dim (the last n)."""
    k = _pair(kernel_size, n)
    st = _pair(stride, n) if stride not in ((), [], None) else k
    p = _pair(padding, n)
    d = _pair(dilation, n) if not isinstance(dilation, bool) else [1] * n
    if isinstance(dilation, bool):  # avg_pool(x, k, s, p, ceil_mode, count_include_pad, ...)
        ceil_mode = dilation
    spatial = (_pool_out(x[-n + i], k[i], st[i], p[i], d[i], ceil_mode) for i in range(n))
    return Sizes((*x[:-n], *spatial))


def pool2d(x, *args, **kwargs):
    """avg_pool2d: the pooling output size per spatial dim."""
    return _pool(2, x, *args, **kwargs)


def pool3d(x, *args, **kwargs):
    """avg_pool3d."""
    return _pool(3, x, *args, **kwargs)


def max_pool2d_with_indices(x, *args, **kwargs):
    """max_pool2d_with_indices: output and indices."""
    out = _pool(2, x, *args, **kwargs)
    return out, out


def max_pool3d_with_indices(x, *args, **kwargs):
    """max_pool3d_with_indices: output and indices."""
    out = _pool(3, x, *args, **kwargs)
    return out, out


def grad_of_second(grad, x, *args, **kwargs):
    """Backward ops returning the gradient of their second argument (the input)."""
    return Sizes(x)


def unfold(x, dim, size, step):
    """unfold: `dim` becomes the number of windows, a new last dim of `size`."""
    d = _norm_dim(dim, len(x))
    out = list(x)
    if out:
        out[d] = (x[d] - size) // step + 1
    return Sizes((*out, size))


def pixel_shuffle(x, r):
    """pixel_shuffle: C / r^2 channels, H * r, W * r."""
    c = x[-3]
    if not c % (r * r) == 0:
        raise RuntimeError("pixel_shuffle: channels not divisible")
    return Sizes((*x[:-3], c // (r * r), x[-2] * r, x[-1] * r))


def pixel_unshuffle(x, r):
    """pixel_unshuffle: C * r^2 channels, H / r, W / r (divisibility guarded)."""
    for s in x[-2:]:
        if not s % r == 0:
            raise RuntimeError("pixel_unshuffle: size not divisible")
    return Sizes((*x[:-3], x[-3] * r * r, x[-2] // r, x[-1] // r))


def upsample(x, output_size, *args, **kwargs):
    """upsample_*2d(x, output_size, ...): the output size given."""
    return Sizes((*x[: len(x) - len(output_size)], *output_size))


def adaptive_pool(x, output_size):
    """_adaptive_avg_pool2d/3d(x, output_size): the output size given (for the last dims)."""
    return upsample(x, output_size)


def adaptive_max_pool(x, output_size):
    """adaptive_max_pool2d/3d: output and indices, both of the output size given."""
    out = upsample(x, output_size)
    return out, out


def embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, *args, **kwargs):
    """_embedding_bag(_forward_only): output [bags, D], offset2bag [n], bag_size [offsets],
    max_indices ([bags, D] for mode max, else [0]) — the meta kernel's sizes."""
    include_last = kwargs.get("include_last_offset", args[2] if len(args) > 2 else False)
    bags = offsets[0] - 1 if include_last else offsets[0]
    out = Sizes((bags, *weight[1:]))
    return out, Sizes(indices[:1]), Sizes(offsets[:1]), out if mode == 2 else Sizes([0])


def embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, max_idx, num_weights, *args):
    """_embedding_bag_dense_backward: [num_weights, D]."""
    return Sizes((num_weights, grad[-1]))


def embedding_bag_backward(grad, indices, offsets, *args):
    """_embedding_bag_backward (it has the offsets too): [num_weights, D]."""
    return embedding_bag_dense_backward(grad, indices, *args)


def diagonal(x, offset=0, dim1=0, dim2=1):
    """diagonal: dim1 and dim2 dropped, a last dim of the diagonal's length (guards where the
    shorter side is symbolic and not known)."""
    d1, d2 = _norm_dim(dim1, len(x)), _norm_dim(dim2, len(x))
    a, b = (x[d1], x[d2] - offset) if offset >= 0 else (x[d1] + offset, x[d2])
    n = a if a <= b else b
    n = n if n >= 0 else 0
    return Sizes((*(s for i, s in enumerate(x) if i not in (d1, d2)), n))


def diag_embed(x, offset=0, dim1=-2, dim2=-1):
    """diag_embed: the last dim becomes two dims of its size + |offset| at dim1 and dim2."""
    rank = len(x) + 1
    n = x[-1] + abs(offset)
    out = list(x[:-1])
    for d in sorted((_norm_dim(dim1, rank), _norm_dim(dim2, rank))):
        out.insert(d, n)
    return Sizes(out)


def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """embedding: indices' sizes plus the embedding dim."""
    return Sizes((*indices, *weight[1:]))


def embedding_dense_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    """embedding_dense_backward: [num_weights, dim]."""
    return Sizes([num_weights, grad[-1]])


def index_select(x, dim, index):
    """index_select: dim replaced by the index length."""
    out = list(x)
    if out:
        out[_norm_dim(dim, len(x))] = numel(index)
    return Sizes(out)


def index(x, indices):
    """index.Tensor (integer indices; a bool mask never gets here: its size is data-dependent).

    The index tensors broadcast together; their shape replaces the indexed dims in place when
    those are adjacent, else it goes first (numpy's advanced indexing).
    """
    idx = list(indices) + [None] * (len(x) - len(indices))
    if len(idx) > len(x):
        raise IndexError("too many indices")
    used = [i for i, t in enumerate(idx) if t is not None]
    if not used:
        return Sizes(x)
    shape = broadcast_shapes(*[idx[i] for i in used])
    adjacent = used == list(range(used[0], used[-1] + 1))
    rest_before = [s for i, s in enumerate(x) if idx[i] is None and i < used[0]]
    rest_after = [s for i, s in enumerate(x) if idx[i] is None and i > used[0]]
    if adjacent:
        return Sizes((*rest_before, *shape, *rest_after))
    return Sizes((*shape, *rest_before, *rest_after))


def gather(x, dim, index, *, sparse_grad=False):
    """gather: the index's sizes (no larger than the input's outside `dim`)."""
    d = _norm_dim(dim, len(x))
    for i, (a, b) in enumerate(zip(index, x)):
        if i != d and not a <= b:
            raise RuntimeError(f"gather: index size {a} > input size {b} at dim {i}")
    return Sizes(index)


# -- normalization, attention, losses -------------------------------------------------------


def native_layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """native_layer_norm: output, mean, rstd (stats keep the leading dims, 1 elsewhere)."""
    axis = len(x) - len(normalized_shape)
    for a, b in zip(x[axis:], normalized_shape):
        _check_equal(a, b, "layer_norm")
    for param in (weight, bias):
        if param is not None:
            for a, b in zip(param, normalized_shape):
                _check_equal(a, b, "layer_norm")
    stat = Sizes((*x[:axis], *([1] * len(normalized_shape))))
    return Sizes(x), stat, stat


def layer_norm(x, normalized_shape, weight=None, bias=None, *args, **kwargs):
    """layer_norm: the input's sizes (checked against normalized_shape)."""
    return native_layer_norm(x, normalized_shape, weight, bias)[0]


def native_layer_norm_backward(grad, x, normalized_shape, mean, rstd, weight, bias, mask):
    """native_layer_norm_backward: grads of input, weight, bias (None where not asked)."""
    native_layer_norm(x, normalized_shape, weight, bias)
    same_as_first(x, grad)
    outs = (Sizes(x), weight, bias)
    return tuple(Sizes(o) if (m and o is not None) else None for o, m in zip(outs, mask))


def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """scaled_dot_product_attention: q's sizes with v's last dim."""
    _check_equal(q[-1], k[-1], "sdpa")
    _check_equal(k[-2], v[-2], "sdpa")
    if enable_gqa and len(q) >= 3:
        # grouped-query attention: q's heads a multiple of k's and v's (checked on the hints)
        _check_equal(k[-3], v[-3], "sdpa")
        broadcast_shapes(Sizes(q[:-3]), Sizes(k[:-3]), Sizes(v[:-3]))
    else:
        broadcast_shapes(Sizes(q[:-2]), Sizes(k[:-2]), Sizes(v[:-2]))
    return Sizes((*q[:-1], v[-1]))


def sdpa_flash_cpu(q, k, v, *args, **kwargs):
    """_scaled_dot_product_flash_attention_for_cpu ([B, H, L, E], grouped-query heads allowed):
    output and logsumexp [B, H, L]."""
    sdpa(q, k, v, enable_gqa=len(q) == 4)
    return Sizes((*q[:-1], v[-1])), Sizes(q[:-1])


def batch_norm(x, weight, bias, running_mean, running_var, *args, **kwargs):
    """native_batch_norm / _native_batch_norm_legit*: output, save_mean, save_invstd ([C])."""
    c = Sizes([x[1]]) if len(x) > 1 else Sizes([0])
    return Sizes(x), c, c


def batch_norm_functional(x, weight, bias, running_mean, running_var, *args, **kwargs):
    """_native_batch_norm_legit_functional: also the new running stats."""
    out, mean, invstd = batch_norm(x, weight, bias, running_mean, running_var)
    return out, mean, invstd, Sizes(running_mean), Sizes(running_var)


def batch_norm_backward(grad, x, weight, *args):
    """native_batch_norm_backward: grads of input, weight, bias ([C]) where the mask asks."""
    mask = args[-1]
    c = Sizes([x[1]])
    return tuple(Sizes(o) if m else None for o, m in zip((x, c, c), mask))


def _check_group_norm(x, n, c, hxw):
    _check_equal(x[0], n, "group_norm")
    _check_equal(x[1], c, "group_norm")
    _check_equal(numel(x[2:]), hxw, "group_norm")


def group_norm(x, weight, bias, n, c, hxw, group, eps):
    """native_group_norm: output, mean and rstd [N, group]."""
    _check_group_norm(x, n, c, hxw)
    stat = Sizes([n, group])
    return Sizes(x), stat, stat


def group_norm_backward(grad, x, mean, rstd, weight, n, c, hxw, group, mask):
    """native_group_norm_backward: grads of input, weight, bias ([C])."""
    _check_group_norm(x, n, c, hxw)
    return tuple(Sizes(o) if m else None for o, m in zip((x, Sizes([c]), Sizes([c])), mask))


def topk(x, k, dim=-1, largest=True, sorted=True):
    """topk: values and indices with `dim` of size k."""
    out = list(x)
    if out:
        out[_norm_dim(dim, len(x))] = k
    return Sizes(out), Sizes(out)


def sort(x, dim=-1, descending=False):
    """sort: values and indices of the input's sizes."""
    return Sizes(x), Sizes(x)


def sdpa_flash_cpu_backward(grad, q, k, v, *args, **kwargs):
    """_scaled_dot_product_flash_attention_for_cpu_backward: grads of q, k, v."""
    return Sizes(q), Sizes(k), Sizes(v)


def nll_loss_backward(grad, x, *args, **kwargs):
    """nll_loss_backward: the input's sizes."""
    return Sizes(x)


def input_sizes_arg(grad, input_sizes, *args, **kwargs):
    """slice_backward/select_backward: the sizes given as an argument."""
    return Sizes(input_sizes)


def input_sizes_arg_after(grad, output_size, input_size, *args, **kwargs):
    """upsample_*_backward(grad, output_size, input_size, ...): the input size given."""
    lead = len(input_size) - len(output_size)
    for a, b in zip(grad, (*input_size[:lead], *output_size)):
        _check_equal(a, b, "upsample_backward")
    return Sizes(input_size)


def constant_pad_nd(x, pad, value=0):
    """constant_pad_nd: pairs of (before, after) padding from the last dim backwards."""
    out = list(x)
    for i in range(len(pad) // 2):
        d = len(x) - 1 - i
        out[d] = out[d] + pad[2 * i] + pad[2 * i + 1]
    return Sizes(out)


def mse_loss(x, target, reduction=1):
    """mse_loss: elementwise when reduction is none, else a scalar."""
    out = broadcast_shapes(x, target)
    return out if reduction == 0 else Sizes()


def nll_loss_forward(x, target, weight, reduction, ignore_index):
    """nll_loss_forward: output and total_weight."""
    if len(x) == 2:
        _check_equal(x[0], target[0], "nll_loss")
    out = Sizes(target) if reduction == 0 else Sizes()
    return out, Sizes()


# -- factories -----------------------------------------------------------------------------------


def _factory(size, *args, **kwargs):
    return Sizes(size)


def new_factory(x, size, *args, **kwargs):
    """new_zeros/new_empty/new_full/new_ones."""
    return Sizes(size)


def scalar(*args, **kwargs):
    """A 0-d result."""
    return Sizes()


def arange(*args, start=None, end=None, step=None, **kwargs):
    """arange.default/start/start_step: ceil((end - start) / step) elements."""
    nums = [a for a in args if _is_size(a) or isinstance(a, float)]
    if len(nums) == 1:
        lo, hi, st = 0, nums[0], 1
    elif len(nums) == 2:
        lo, hi, st = nums[0], nums[1], 1
    else:
        lo, hi, st = nums[:3]
    if any(isinstance(v, float) for v in (lo, hi, st)):
        return Sizes([max(math.ceil((hint_of(hi) - hint_of(lo)) / hint_of(st)), 0)])
    if isinstance(st, SymNode) or st == 0:
        st = int(st)
    if st > 0:
        n = (hi - lo + st - 1) // st
    else:
        n = (lo - hi - st - 1) // (-st)
    return Sizes([n if n > 0 else 0])


# -- the table -------------------------------------------------------------------------------


def _resolve(names):
    """OpOverloads for "name.overload" strings that exist in this torch."""
    out = []
    for full in names.split():
        name, _, overload = full.partition(".")
        packet = getattr(aten, name, None)
        op = getattr(packet, overload or "default", None) if packet is not None else None
        if op is not None:
            out.append(op)
    return out


_POINTWISE = """
add.Tensor add.Scalar sub.Tensor sub.Scalar mul.Tensor mul.Scalar div.Tensor div.Scalar
div.Tensor_mode pow.Tensor_Tensor pow.Tensor_Scalar pow.Scalar rsub.Tensor rsub.Scalar
maximum minimum eq.Tensor eq.Scalar ne.Tensor ne.Scalar gt.Tensor gt.Scalar ge.Tensor ge.Scalar
lt.Tensor lt.Scalar le.Tensor le.Scalar logical_and logical_or logical_not bitwise_and.Tensor
neg exp log log1p expm1 sin cos tanh sigmoid relu gelu silu sqrt rsqrt abs reciprocal erf sign
floor ceil round clamp clamp.Tensor clamp_min clamp_max where.self where.ScalarOther
where.ScalarSelf masked_fill.Scalar masked_fill.Tensor threshold_backward gelu_backward
sigmoid_backward tanh_backward silu_backward fmod.Tensor fmod.Scalar remainder.Tensor
remainder.Scalar leaky_relu hardtanh isnan atan2 lerp.Scalar addcmul addcdiv softplus
softplus_backward hardswish hardswish_backward hardsigmoid hardsigmoid_backward elu
mish mish_backward hardtanh_backward bitwise_not bitwise_or.Tensor
bitwise_xor.Tensor logical_xor log2 log10 exp2 tan atan asin acos sinh cosh asinh acosh atanh
trunc frac square softshrink hardshrink relu6 nan_to_num isinf isfinite pow.Tensor_Scalar
__and__.Tensor __or__.Tensor __xor__.Tensor
"""
_SAME_AS_FIRST = """
clone _to_copy to.dtype conj_physical alias detach lift_fresh_copy _softmax _log_softmax softmax.int log_softmax.int
_softmax_backward_data _log_softmax_backward_data zeros_like ones_like empty_like
full_like rand_like randn_like fill.Scalar bernoulli.p contiguous tril triu cumsum
native_dropout_backward flip cumprod roll _safe_softmax
"""
_REDUCE_DIMS = """
sum.dim_IntList mean.dim amax amin prod.dim_int logsumexp any.dim all.dim
"""
_FIRST_SIZES = """
index_add scatter.src scatter.value scatter_add index_copy slice_scatter select_scatter
diagonal_scatter as_strided_scatter copy index_put _unsafe_index_put
_unsafe_masked_index_put_accumulate
"""
_UPSAMPLE = """
upsample_nearest1d upsample_nearest2d upsample_nearest3d upsample_linear1d upsample_bilinear2d
upsample_trilinear3d upsample_bicubic2d _upsample_nearest_exact1d _upsample_nearest_exact2d
_upsample_nearest_exact3d _upsample_bilinear2d_aa _upsample_bicubic2d_aa
"""
_UPSAMPLE_BACKWARD = " ".join(f"{n}_backward" for n in _UPSAMPLE.split())
_REDUCE_ALL = (
    "min.default max.default sum.default mean.default prod.default any.default all.default"
)
_FACTORIES = "full zeros ones empty.memory_format empty.default rand randn"
_NEW_FACTORIES = "new_zeros new_empty new_full new_ones"

SHAPE_RULES = {
    op: rule
    for names, rule in [
        (_POINTWISE, pointwise),
        (_SAME_AS_FIRST, same_as_first),
        (_FIRST_SIZES, first_sizes),
        (_REDUCE_DIMS, reduce_dims),
        (_REDUCE_ALL, reduce_all),
        (_FACTORIES, _factory),
        (_NEW_FACTORIES, new_factory),
    ]
    for op in _resolve(names)
}

SHAPE_RULES.update(
    {
        aten.native_dropout.default: two_like_first,
        aten.var.correction: reduce_correction,
        aten.std.correction: reduce_correction,
        aten.var_mean.dim: var_mean,
        aten.var_mean.correction: var_mean,
        aten.max.dim: reduce_with_indices,
        aten.min.dim: reduce_with_indices,
        aten.argmax.default: argreduce,
        aten.argmin.default: argreduce,
        aten.view.default: view,
        aten._unsafe_view.default: view,
        aten.reshape.default: view,
        aten.permute.default: permute,
        aten.transpose.int: transpose,
        aten.t.default: t,
        aten.expand.default: expand,
        aten.repeat.default: repeat,
        aten.unsqueeze.default: unsqueeze,
        aten.squeeze.default: squeeze,
        aten.squeeze.dim: squeeze,
        aten.squeeze.dims: squeeze,
        aten.slice.Tensor: slice_,
        aten.select.int: select,
        aten.split.Tensor: split,
        aten.split_with_sizes.default: split_with_sizes,
        aten.unbind.int: unbind,
        aten.cat.default: cat,
        aten.stack.default: stack,
        aten.mm.default: mm,
        aten.bmm.default: bmm,
        aten.addmm.default: addmm,
        aten.mv.default: mv,
        aten.dot.default: dot,
        aten.vdot.default: dot,
        aten.baddbmm.default: baddbmm,
        aten.matmul.default: matmul,
        aten.convolution.default: convolution,
        aten.convolution_backward.default: convolution_backward,
        aten.native_batch_norm.default: batch_norm,
        aten._native_batch_norm_legit.default: batch_norm,
        aten._native_batch_norm_legit_no_training.default: batch_norm,
        aten._native_batch_norm_legit_functional.default: batch_norm_functional,
        aten.native_batch_norm_backward.default: batch_norm_backward,
        aten.native_group_norm.default: group_norm,
        aten.native_group_norm_backward.default: group_norm_backward,
        aten.topk.default: topk,
        aten.sort.default: sort,
        aten.embedding.default: embedding,
        aten.embedding_dense_backward.default: embedding_dense_backward,
        aten.index_select.default: index_select,
        aten.gather.default: gather,
        aten.linalg_vector_norm.default: vector_norm,
        aten.glu.default: glu,
        aten.glu_backward.default: grad_of_second,
        aten.pixel_unshuffle.default: pixel_unshuffle,
        aten.avg_pool2d.default: pool2d,
        aten.max_pool2d_with_indices.default: max_pool2d_with_indices,
        aten.avg_pool2d_backward.default: grad_of_second,
        aten.max_pool2d_with_indices_backward.default: grad_of_second,
        aten.unfold.default: unfold,
        aten.unfold_backward.default: input_sizes_arg,
        aten.pixel_shuffle.default: pixel_shuffle,
        aten._adaptive_avg_pool2d.default: adaptive_pool,
        aten._adaptive_avg_pool3d.default: adaptive_pool,
        aten.adaptive_max_pool2d.default: adaptive_max_pool,
        aten.adaptive_max_pool3d.default: adaptive_max_pool,
        aten._adaptive_avg_pool2d_backward.default: grad_of_second,
        aten._adaptive_avg_pool3d_backward.default: grad_of_second,
        aten.adaptive_max_pool2d_backward.default: grad_of_second,
        aten.adaptive_max_pool3d_backward.default: grad_of_second,
        aten.avg_pool3d.default: pool3d,
        aten.max_pool3d_with_indices.default: max_pool3d_with_indices,
        aten.avg_pool3d_backward.default: grad_of_second,
        aten.max_pool3d_with_indices_backward.default: grad_of_second,
        aten._embedding_bag.default: embedding_bag,
        aten._embedding_bag_forward_only.default: embedding_bag,
        aten._embedding_bag_dense_backward.default: embedding_bag_dense_backward,
        aten._embedding_bag_backward.default: embedding_bag_backward,
        aten.diag_embed.default: diag_embed,
        aten.diagonal.default: diagonal,
        **dict.fromkeys(_resolve(_UPSAMPLE), upsample),
        **dict.fromkeys(_resolve(_UPSAMPLE_BACKWARD), input_sizes_arg_after),
        aten.index.Tensor: index,
        aten.native_layer_norm.default: native_layer_norm,
        aten.layer_norm.default: layer_norm,
        aten.native_layer_norm_backward.default: native_layer_norm_backward,
        aten.scaled_dot_product_attention.default: sdpa,
        aten._scaled_dot_product_flash_attention_for_cpu.default: sdpa_flash_cpu,
        aten.nll_loss_forward.default: nll_loss_forward,
        aten.nll_loss_backward.default: nll_loss_backward,
        aten._scaled_dot_product_flash_attention_for_cpu_backward.default: (
            sdpa_flash_cpu_backward
        ),
        aten.slice_backward.default: input_sizes_arg,
        aten.select_backward.default: input_sizes_arg,
        aten.constant_pad_nd.default: constant_pad_nd,
        aten.mse_loss.default: mse_loss,
        aten.mse_loss_backward.default: nll_loss_backward,
        aten.arange.default: arange,
        aten.arange.start: arange,
        aten.arange.start_step: arange,
        aten.scalar_tensor.default: scalar,
    }
)


def rule_for(op):
    """The shape rule of an ATen OpOverload, or None (the caller then specialises; see above)."""
    return SHAPE_RULES.get(op)


def symbolic_sizes(op, args, kwargs=None):
    """Output Sizes of `op` on `args` (tensors already replaced by Sizes), or None if no rule."""
    rule = rule_for(op)
    return None if rule is None else rule(*args, **(kwargs or {}))
