"""Matmuls as loop IR: mm, addmm and bmm as a sum over k, the choice max-autotune times on CPU.

Note [Matmuls as loops]
By default a matmul is an ATen call (an extern: MKL or oneDNN). Written as loop IR instead,
`out[m, n] = sum_k a[m, k] * b[k, n]` is a row reduction the C++ generator turns into a dot
product per output, vectorized along k when both operands are contiguous in k (x @ w.t() of a
linear layer), or a column reduction vectorized along n when b is contiguous in n (x @ W of
GPT-2's Conv1D), accumulated in double as every float reduction is, and the ops after it (bias,
activation, residual add) fuse into the same kernel. It has no register blocking, so it loses to
a BLAS GEMM once both M and N are large; it wins where the BLAS call's fixed cost dominates: a
decode step's [1..8, K] x [K, N], small layers, batched attention scores of short sequences.
Which one a graph gets is timed per shape under mode="max-autotune" (kiln/backend/cpu_tune.py);
default mode always calls ATen. Only float32/float64 with static sizes are offered.
Where the graph's kernels are Triton's (CUDA, or CPU under config.cpu_backend="triton"), a
float32/float16/bfloat16 matmul lowered this way is marked (`Reduction.matmul`: its operands'
loaders) and written as a tl.dot template with its epilogue fused
(Note [Triton: the matmul template], kiln/backend/codegen/triton_matmul.py).
"""

import contextlib
import threading

import torch

from kiln.backend import devices
from kiln.backend.ir import Pointwise, Reduction, StorageBox, View, ops
from kiln.backend.lowering import V, aten, box, loader_for, make_pointwise

_state = threading.local()


@contextlib.contextmanager
def as_loops(node_names):
    """Lower the matmul nodes named here as loop IR (not ATen calls) while compiling (None:
    those named by an enclosing block, or none)."""
    saved = getattr(_state, "names", frozenset())
    _state.names = saved if node_names is None else frozenset(node_names)
    try:
        yield
    finally:
        _state.names = saved


def chosen(node_name):
    """Whether this matmul node is lowered as loops in the graph being compiled."""
    return node_name in getattr(_state, "names", ())


def chosen_names():
    """The matmul nodes lowered as loops in the graph being compiled, sorted (its cache key)."""
    return sorted(getattr(_state, "names", ()))


def offered(target, val, args):
    """Whether a matmul node may be written as loops (dtype, device, static sizes)."""
    if target not in LOOP_LOWERINGS or not isinstance(val, torch.Tensor):
        return False
    tensors = [a for a in args if isinstance(a, torch.Tensor)] + [val]
    return all(
        t.dtype in (torch.float32, torch.float64)
        and t.device.type == "cpu"
        and all(type(s) is int for s in t.shape)
        and all(type(s) is int for s in t.stride())
        for t in tensors
    )


TEMPLATE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def template_offered(target, val, args):
    """Whether a matmul node may run as the Triton template: float32/float16/bfloat16 with
    static sizes and strides, on CUDA (or on CPU when CPU graphs' kernels are Triton's)."""
    if target not in LOOP_LOWERINGS or not isinstance(val, torch.Tensor):
        return False
    tensors = [a for a in args if isinstance(a, torch.Tensor)] + [val]
    return all(
        t.dtype in TEMPLATE_DTYPES
        and t.dtype == val.dtype
        and devices.triton_kernels(t.device)
        and all(type(s) is int for s in t.shape)
        and all(type(s) is int for s in t.stride())
        for t in tensors
    )


def _template_graph(dtype):
    """Whether a matmul of this dtype in the graph being lowered becomes the Triton template."""
    return devices.triton_kernels(getattr(V.graph, "device", None)) and dtype in TEMPLATE_DTYPES


def _realize_operand(x):
    """Realize the computation under an operand's views: inlined into the sum, a producer's ops
    (a bias and an activation) would run once per output instead of once per element."""
    while isinstance(x, View):
        x = x.base
    if isinstance(x, StorageBox):
        x.realize()


def _sum_over_k(a, b, batched):
    """The realized [.., M, N] sum over k of a[.., m, k] * b[.., k, n]."""
    _realize_operand(a)
    _realize_operand(b)
    *batch, m, k = a.get_size()
    n = b.get_size()[-1]
    dtype = a.get_dtype()
    load_a, load_b = a.make_loader(), b.make_loader()

    def inner(idx, ridx):
        *bi, i, j = idx
        (r,) = ridx
        return ops.mul(load_a([*bi, i, r]), load_b([*bi, r, j]))

    red = Reduction(dtype, (*batch, m, n) if batched else (m, n), (k,), "sum", inner, dtype)
    if _template_graph(dtype) and b.get_dtype() == dtype:
        red.matmul = (load_a, load_b)  # Note [Triton: the matmul template]
    out = V.graph.new_box(red, None)
    out.realize()
    return out


def _mm(a, b):
    return _sum_over_k(a, b, batched=False)


def _bmm(a, b):
    return _sum_over_k(a, b, batched=True)


def _addmm(bias, a, b, *, beta=1, alpha=1):
    # eager: beta * bias + alpha * (a @ b), the bias ignored (NaN included) when beta is 0
    prod = _sum_over_k(a, b, batched=False)
    size = prod.get_size()
    dtype = prod.get_dtype()
    if beta == 0:
        return make_pointwise(lambda p: ops.mul(p, ops.constant(alpha, dtype)), prod)
    load_bias = loader_for(bias, size, dtype)
    load_prod = prod.make_loader()

    def fn(idx):
        p, c = load_prod(idx), load_bias(idx)
        if alpha != 1:
            p = ops.mul(p, ops.constant(alpha, dtype))
        if beta != 1:
            c = ops.mul(c, ops.constant(beta, dtype))
        return ops.add(c, p)

    return box(Pointwise(dtype, size, fn))


# Note [Matmuls: outer products]
# A matmul whose reduction has length 1 (`a[.., m, 1] @ b[.., 1, n]`) is an outer product: each
# output is one multiply, no sum. As an ATen call it costs a BLAS GEMM's fixed overhead per call
# and writes its result to memory; per-sample gradients (vmap(grad(loss)): a weight's gradient is
# one outer product per sample, a bmm with k = 1) spend most of their time there. It is lowered
# as a pointwise multiply instead, whatever the mode, fused with what reads it (eager's result
# is the same product, rounded once).


def outer_product(node):
    """The lowering of an mm/bmm node whose reduction length is statically 1, else None."""
    if node.target not in (aten.mm.default, aten.bmm.default) or len(node.args) != 2:
        return None
    a, b = (getattr(x, "meta", {}).get("val") for x in node.args)
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return None
    if type(a.shape[-1]) is not int or a.shape[-1] != 1:  # (a symbolic k is left alone)
        return None
    return _outer if a.dtype.is_floating_point and a.dtype == b.dtype else None


def _outer(a, b):
    """a[.., m, 1] * b[.., 1, n] as a pointwise product (Note [Matmuls: outer products])."""
    *batch, m, _ = a.get_size()
    n = b.get_size()[-1]
    load_a, load_b = a.make_loader(), b.make_loader()

    def fn(idx):
        *bi, i, j = idx
        return ops.mul(load_a([*bi, i, 0]), load_b([*bi, 0, j]))

    return box(Pointwise(a.get_dtype(), (*batch, m, n), fn))


LOOP_LOWERINGS = {
    aten.mm.default: _mm,
    aten.bmm.default: _bmm,
    aten.addmm.default: _addmm,
}
