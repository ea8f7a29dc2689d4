"""bfloat16/float16 matmuls and convolutions on CPUs without native support, computed in float32.

Note [CPU: low-precision matmuls in float32]
On a CPU without bfloat16 (float16) instructions (no AVX512-BF16 / AMX: oneDNN reports it with
`torch.ops.mkldnn._is_mkldnn_bf16_supported()`), ATen's bfloat16 GEMM and convolution run an
emulated path: a 512x768 @ 768x768 `mm` takes 40x as long as in float32, a 3x3 convolution 20x.
Those kernels widen each bfloat16 to float32, accumulate in float32 and round the result once; so
does this rewrite, with the fast float32 kernels: the inputs are widened (exact: every bfloat16
and float16 is a float32), the op runs in float32, and its result is rounded back to the input
dtype once. Only the order of the float32 accumulation may differ from oneDNN's emulation, as
it differs between any two GEMM kernels (and between eager on two CPUs). The widening and the
rounding are pointwise nodes that the scheduler fuses into the neighbouring kernels.

The rules are decompositions given to the AOT tracer (so forward and backward graphs both get
them); each one calls the original op unchanged when its inputs are not low-precision CPU
tensors. `config.cpu_low_precision_matmul` picks: "auto" (rewrite where oneDNN lacks the
dtype), "float32" (always rewrite), "native" (never).
"""

import torch

from kiln import config

aten = torch.ops.aten
prims = torch.ops.prims

_LOW = (torch.bfloat16, torch.float16)


def _native(dtype):
    """Whether this CPU computes `dtype` GEMMs natively (oneDNN's own test)."""
    try:
        if dtype is torch.bfloat16:
            return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    except (AttributeError, RuntimeError):  # a torch built without oneDNN
        return False


def _rewrite(*tensors):
    """The low-precision dtype to compute in float32, or None (run the op as it is)."""
    ts = [t for t in tensors if isinstance(t, torch.Tensor)]
    if not ts or any(t.device.type != "cpu" for t in ts):
        return None
    dtype = ts[0].dtype
    if dtype not in _LOW or any(t.dtype != dtype for t in ts):
        return None
    mode = config.cpu_low_precision_matmul
    if mode == "native" or (mode == "auto" and _native(dtype)):
        return None
    return dtype


def _wide(t):
    return prims.convert_element_type.default(t, torch.float32) if t is not None else None


def _narrow(t, dtype):
    return prims.convert_element_type.default(t, dtype) if t is not None else None


def _mm(a, b):
    dtype = _rewrite(a, b)
    if dtype is None:
        return aten.mm.default(a, b)
    return _narrow(aten.mm.default(_wide(a), _wide(b)), dtype)


def _bmm(a, b):
    dtype = _rewrite(a, b)
    if dtype is None:
        return aten.bmm.default(a, b)
    return _narrow(aten.bmm.default(_wide(a), _wide(b)), dtype)


def _addmm(bias, a, b, *, beta=1, alpha=1):
    dtype = _rewrite(bias, a, b)
    if dtype is None:
        return aten.addmm.default(bias, a, b, beta=beta, alpha=alpha)
    out = aten.addmm.default(_wide(bias), _wide(a), _wide(b), beta=beta, alpha=alpha)
    return _narrow(out, dtype)


def _convolution(x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    dtype = _rewrite(x, w, bias)
    args = (stride, padding, dilation, transposed, output_padding, groups)
    if dtype is None:
        return aten.convolution.default(x, w, bias, *args)
    return _narrow(aten.convolution.default(_wide(x), _wide(w), _wide(bias), *args), dtype)


def _convolution_backward(grad, x, w, bias_sizes, *args):
    dtype = _rewrite(grad, x, w)
    if dtype is None:
        return aten.convolution_backward.default(grad, x, w, bias_sizes, *args)
    outs = aten.convolution_backward.default(_wide(grad), _wide(x), _wide(w), bias_sizes, *args)
    return tuple(_narrow(t, dtype) for t in outs)


RULES = {
    aten.mm.default: _mm,
    aten.bmm.default: _bmm,
    aten.addmm.default: _addmm,
    aten.convolution.default: _convolution,
    aten.convolution_backward.default: _convolution_backward,
}


def low_precision_decompositions():
    """The rules, or none when the setting turns them off."""
    return {} if config.cpu_low_precision_matmul == "native" else dict(RULES)
