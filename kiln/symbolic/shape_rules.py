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

from kiln.symbolic import shape_rules_nn as nn
from kiln.symbolic.rule_sizes import (  # noqa: F401  (re-exported: rules and callers use them)
    Sizes,
    _check_equal,
    _dims,
    _is_size,
    _norm_dim,
    broadcast_shapes,
    numel,
    same_as_first,
)
from kiln.symbolic.shape_env import SymNode, contiguous_strides, hint_of  # noqa: F401

aten = torch.ops.aten


# -- pointwise and shape-preserving -----------------------------------------------------------


def pointwise(*args, **kwargs):
    """Broadcast of all tensor arguments."""
    shapes = [a for a in (*args, *kwargs.values()) if isinstance(a, Sizes)]
    return broadcast_shapes(*shapes)


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


def as_strided(x, size, stride, storage_offset=None):
    """as_strided: the sizes asked for."""
    return Sizes(size)


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
    if isinstance(lo, int) and lo == 0 and hi is size and step == 1:
        length = size  # the whole dim (`x[:, :, None]`): nothing to ask, even of a data size
    else:
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
        aten.as_strided.default: as_strided,
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
        aten.convolution.default: nn.convolution,
        aten.convolution_backward.default: nn.convolution_backward,
        aten.native_batch_norm.default: nn.batch_norm,
        aten._native_batch_norm_legit.default: nn.batch_norm,
        aten._native_batch_norm_legit_no_training.default: nn.batch_norm,
        aten._native_batch_norm_legit_functional.default: nn.batch_norm_functional,
        aten.native_batch_norm_backward.default: nn.batch_norm_backward,
        aten.native_group_norm.default: nn.group_norm,
        aten.native_group_norm_backward.default: nn.group_norm_backward,
        aten.topk.default: nn.topk,
        aten.sort.default: nn.sort,
        aten.embedding.default: nn.embedding,
        aten.embedding_dense_backward.default: nn.embedding_dense_backward,
        aten.index_select.default: nn.index_select,
        aten.gather.default: nn.gather,
        aten.linalg_vector_norm.default: vector_norm,
        aten.glu.default: glu,
        aten.glu_backward.default: nn.grad_of_second,
        aten.pixel_unshuffle.default: nn.pixel_unshuffle,
        aten.avg_pool2d.default: nn.pool2d,
        aten.max_pool2d_with_indices.default: nn.max_pool2d_with_indices,
        aten.avg_pool2d_backward.default: nn.grad_of_second,
        aten.max_pool2d_with_indices_backward.default: nn.grad_of_second,
        aten.unfold.default: nn.unfold,
        aten.unfold_backward.default: nn.input_sizes_arg,
        aten.pixel_shuffle.default: nn.pixel_shuffle,
        aten._adaptive_avg_pool2d.default: nn.adaptive_pool,
        aten._adaptive_avg_pool3d.default: nn.adaptive_pool,
        aten.adaptive_max_pool2d.default: nn.adaptive_max_pool,
        aten.adaptive_max_pool3d.default: nn.adaptive_max_pool,
        aten._adaptive_avg_pool2d_backward.default: nn.grad_of_second,
        aten._adaptive_avg_pool3d_backward.default: nn.grad_of_second,
        aten.adaptive_max_pool2d_backward.default: nn.grad_of_second,
        aten.adaptive_max_pool3d_backward.default: nn.grad_of_second,
        aten.avg_pool3d.default: nn.pool3d,
        aten.max_pool3d_with_indices.default: nn.max_pool3d_with_indices,
        aten.avg_pool3d_backward.default: nn.grad_of_second,
        aten.max_pool3d_with_indices_backward.default: nn.grad_of_second,
        aten._embedding_bag.default: nn.embedding_bag,
        aten._embedding_bag_forward_only.default: nn.embedding_bag,
        aten._embedding_bag_dense_backward.default: nn.embedding_bag_dense_backward,
        aten._embedding_bag_backward.default: nn.embedding_bag_backward,
        aten.diag_embed.default: nn.diag_embed,
        aten.diagonal.default: nn.diagonal,
        **dict.fromkeys(_resolve(_UPSAMPLE), nn.upsample),
        **dict.fromkeys(_resolve(_UPSAMPLE_BACKWARD), nn.input_sizes_arg_after),
        aten.index.Tensor: nn.index,
        aten.native_layer_norm.default: nn.native_layer_norm,
        aten.layer_norm.default: nn.layer_norm,
        aten.native_layer_norm_backward.default: nn.native_layer_norm_backward,
        aten.scaled_dot_product_attention.default: nn.sdpa,
        aten._scaled_dot_product_flash_attention_for_cpu.default: nn.sdpa_flash_cpu,
        aten.nll_loss_forward.default: nn.nll_loss_forward,
        aten.nll_loss_backward.default: nn.nll_loss_backward,
        aten._scaled_dot_product_flash_attention_for_cpu_backward.default: (
            nn.sdpa_flash_cpu_backward
        ),
        aten.slice_backward.default: nn.input_sizes_arg,
        aten.select_backward.default: nn.input_sizes_arg,
        aten.constant_pad_nd.default: nn.constant_pad_nd,
        aten.mse_loss.default: nn.mse_loss,
        aten.mse_loss_backward.default: nn.nll_loss_backward,
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
