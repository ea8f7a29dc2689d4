"""libdevice's functions for Triton's interpreter, computed by torch's CPU kernels
(Note [Triton: libdevice under the interpreter]); only imported under TRITON_INTERPRET=1."""

import numpy as np
import torch
import triton.language as tl
from triton.runtime.interpreter import TensorHandle


def _data(x):
    if isinstance(x, tl.core.tensor):
        return torch.from_numpy(np.array(x.handle.data, copy=True)), x.dtype, x.type.is_block()
    return torch.tensor(x), None, False


def _wrap(fn):
    def call(*args):
        parts = [_data(a) for a in args]
        out = fn(*[p[0] for p in parts])
        dtype = next(p[1] for p in parts if p[1] is not None)
        arr = out.numpy()
        if out.dtype == torch.bool:
            dtype = tl.int1
        block = any(p[2] for p in parts)
        ty = tl.block_type(dtype, list(arr.shape)) if block else dtype
        return tl.core.tensor(TensorHandle(arr, dtype.scalar if block else dtype), ty)

    call.__name__ = getattr(fn, "__name__", "fn")
    return call


_UNARY = {
    "nearbyint": torch.round,
    "isnan": torch.isnan,
    "isinf": torch.isinf,
    "isfinited": torch.isfinite,
}
for _name in (
    "exp exp2 expm1 log log2 log10 log1p sqrt rsqrt sin cos tan asin acos atan sinh cosh tanh "
    "asinh acosh atanh erf erfc lgamma floor ceil trunc signbit"
).split():
    globals()[_name] = _wrap(getattr(torch, _name))
for _name, _fn in _UNARY.items():
    globals()[_name] = _wrap(_fn)
for _name in ("atan2", "hypot", "fmod", "pow", "copysign"):
    globals()[_name] = _wrap(getattr(torch, _name))


def _round_bf16(t):
    return t.float().bfloat16().float()


round_bf16 = _wrap(_round_bf16)  # the interpreter's float32 -> bfloat16 cast truncates
