"""Shape rules of neural-network ATen ops: convolution, pooling, embedding, indexing,
normalization, attention and losses (the contract is in shape_rules.py)."""

from kiln.symbolic.rule_sizes import (
    Sizes,
    _check_equal,
    _norm_dim,
    broadcast_shapes,
    numel,
    same_as_first,
)

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
