"""The ops kiln decomposes before lowering, in ONE table (drawn from torch._decomp's rules).

Everything listed here is rewritten into simpler ATen ops by the tracer; everything else reaches
lowering.py as it is (and becomes an ATen extern call if it has no lowering).
"""

import torch
from torch._decomp import get_decompositions

from kiln.backend.decomp_foreach import foreach_decompositions

aten = torch.ops.aten

DECOMPOSE = [
    # softmax family: amax / exp / sum / div become one fused kernel
    aten._softmax,
    aten._log_softmax,
    aten._softmax_backward_data,
    aten._safe_softmax,
    aten._log_softmax_backward_data,
    aten.logsumexp,
    # normalization: var_mean + pointwise
    aten.native_layer_norm,
    aten.native_layer_norm_backward,
    aten.native_group_norm,
    aten.native_group_norm_backward,
    aten.native_batch_norm,
    aten.native_batch_norm_backward,
    aten._native_batch_norm_legit,
    aten._native_batch_norm_legit_no_training,
    aten._native_batch_norm_legit_functional,
    aten.cudnn_batch_norm,  # what batch_norm picks for CUDA inputs: as native_batch_norm, fused
    aten.cudnn_batch_norm_backward,  # (left as extern calls, each output was copied to a layout)
    aten.miopen_batch_norm_backward,
    aten.rms_norm,
    # activations and their backward formulas
    aten.gelu_backward,
    aten.silu_backward,
    aten.sigmoid_backward,
    aten.tanh_backward,
    aten.threshold_backward,
    aten.hardtanh_backward,
    aten.leaky_relu_backward,
    aten.elu,
    aten.elu_backward,
    aten.hardsigmoid,
    aten.hardsigmoid_backward,
    aten.hardswish,
    aten.hardswish_backward,
    aten.softplus,
    aten.softplus_backward,
    aten.mish,
    aten.log_sigmoid_forward,
    aten.log_sigmoid_backward,
    # pointwise compounds
    aten.addcmul,
    aten.addcdiv,
    aten.lerp,
    aten.addcmul_,  # the in-place forms (an optimizer's state updates) as well, so that the
    aten.addcdiv_,  # functionalized graph needs no second trace to decompose them
    aten.lerp_,
    aten.xlogy,
    aten.logit,
    aten.clamp_min,
    aten.clamp_max,
    aten.masked_fill,
    aten.hypot,
    aten.std_mean,
    aten.linalg_vector_norm,
    aten.norm,
    aten.dist,
    # losses
    aten.mse_loss,
    aten.mse_loss_backward,
    aten.smooth_l1_loss,
    aten.huber_loss,
    aten.binary_cross_entropy,
    aten.binary_cross_entropy_backward,
    aten.binary_cross_entropy_with_logits,
    aten.nll_loss_forward,
    aten.nll_loss_backward,
    # shape ops that are plain views / copies
    aten.t,
    aten.transpose,
    aten.unsqueeze_copy,
    aten.expand_copy,
    aten.permute_copy,
    aten.view_copy,
    aten.select_backward,
    aten.slice_backward,
    aten.diagonal_backward,
    aten.embedding_dense_backward,
    aten.index_select_backward,
    aten._unsafe_index,
    aten.repeat,
    aten.roll,
    aten.tril,
    aten.triu,
    aten.movedim,
    aten.narrow,
    aten.linspace,
    aten.full_like,
    aten.zeros_like,
    aten.ones_like,
    aten.new_zeros,
    aten.new_ones,
    aten.new_full,
    aten.fill,
    aten.rsub,
    aten.count_nonzero,
    aten.addmv,
    aten.baddbmm,
    aten.addr,
    aten.type_as,
    aten.detach,
    aten.native_dropout_backward,
]


DECOMPOSITIONS = get_decompositions([op for op in DECOMPOSE])
DECOMPOSITIONS.update(foreach_decompositions())  # Note [Foreach: one op per tensor]


def _squeeze_as_view(x, dim=None):
    """squeeze as `aten.view` (torch._decomp's goes through prims.squeeze, which has no autograd
    formula, and a returned view of an input is replayed on the real input at run time)."""
    rank = x.dim()
    if dim is None:
        dims = range(rank)
    else:
        dims = [dim] if isinstance(dim, int) else dim
        dims = {d % rank for d in dims} if rank else set()
    sizes = [s for i, s in enumerate(x.shape) if not (i in dims and s == 1)]
    return aten.view.default(x, sizes)


for _overload in (aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims):
    DECOMPOSITIONS[_overload] = _squeeze_as_view


def decomposition_table():
    """A fresh copy of the table (callers may extend it)."""
    return dict(DECOMPOSITIONS)
