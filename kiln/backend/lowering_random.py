"""Random ops computed in Triton kernels from a seed per graph (rand, randn, dropout, bernoulli).

Note [Random: numbers from a seed per graph]
Where a graph's kernels are Triton's (CUDA graphs; CPU ones under config.cpu_backend="triton"),
the random ops of the table below compute their numbers inside the kernels that use them, so a
dropout fuses with the ops around it instead of being an ATen call with its own kernel and mask
round trip:
- the graph draws its seeds once per call, as one extern before its first random kernel:
  `torch.randint(0, 2**62, (n,))` on the graph's device, one seed per random op of the graph,
  from torch's own generator. So `torch.manual_seed` makes compiled runs repeatable, every call
  draws new numbers, and a CUDA graph replay does too (a recorded randint advances the device
  generator's offset at each replay);
- element i of random op k is `tl.rand(seeds[k], i)` (`tl.randn` for normals): Philox, a
  counter-based generator, i the element's row-major index in the op's output. A number is a
  function of (seed, index) alone, so a value inlined into two kernels (dropout's output and its
  mask) is the same number in both, and the partitioner keeps the mask as a forward output (a
  random op is never recomputed in the backward), so the backward reads the very mask the
  forward used.
The numbers are not eager's: eager draws from its generator in its own order (torch.compile's
Triton kernels differ from eager the same way). `config.fallback_random = True` (the option
`fallback_random`, KILN_FALLBACK_RANDOM=1) keeps them ATen calls in program order, which draw
exactly eager's numbers; the C++ path always does (its kernels have no counter-based generator).
Left as ATen calls: an explicit generator, float64 results (Triton's Philox draws float32),
dropout with p = 1 or train off (eager's special cases).

| op | element i |
| --- | --- |
| rand, rand_like | u = rand(seed, i) in [0, 1), cast (a half type rounding up to 1 gives 0) |
| uniform(x, a, b) | a + (b - a) * u, cast; a value rounding up to b gives a |
| randn, randn_like | randn(seed, i) |
| bernoulli(x) / bernoulli(x, p) | u < x[i] / u < p, as x's dtype |
| native_dropout(x, p, True) | keep = u < 1 - p; (x[i] * (keep * 1 / (1 - p)), keep) |
"""

import torch

from kiln import config
from kiln.backend.devices import triton_kernels
from kiln.backend.ir import (
    ExternBuffer,
    ExternKernel,
    Ix,
    Layout,
    Pointwise,
    contiguous_strides,
    current_device,
    ops,
    to_expr,
)
from kiln.backend.lowering import (
    NotLowered,
    V,
    box,
    loader_for,
    opmath,
    register_lowering,
)

aten = torch.ops.aten

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
SEED_HIGH = 2**62  # seeds are drawn in [0, SEED_HIGH)

# the ops lowered here (the graph's seed count counts their nodes)
RANDOM_OPS = {
    aten.rand.default,
    aten.rand_like.default,
    aten.randn.default,
    aten.randn_like.default,
    aten.uniform.default,
    aten.bernoulli.default,
    aten.bernoulli.p,
    aten.native_dropout.default,
}


def _in_kernel(dtype):
    """Raise NotLowered unless this graph's random numbers come from its kernels (see the Note)."""
    if config.fallback_random:
        raise NotLowered("config.fallback_random: eager's random numbers, drawn by ATen")
    if not triton_kernels(current_device()):
        raise NotLowered("C++ kernels draw no random numbers: ATen draws eager's")
    if dtype not in DTYPES:
        raise NotLowered(f"random {dtype} (Triton's Philox draws float32)")


def _next_seed():
    """(the graph's seed buffer, the next random op's index in it); the first call adds the
    extern that draws the seeds."""
    graph = V.graph
    seeds = graph.random_seeds
    if seeds is None:
        n = sum(1 for node in graph.gm.graph.nodes if node.target in RANDOM_OPS)
        name = graph._name("extern")
        kernel = ExternKernel(
            name,
            aten.randint.low,
            [0, SEED_HIGH, [n]],
            {"dtype": torch.int64, "device": current_device()},
            [],
        )
        buf = ExternBuffer(graph._name(), Layout((n,), (1,), torch.int64), kernel)
        kernel.outputs = [buf]
        graph.buffers[buf.name] = buf
        graph.operations.append(kernel)
        seeds = graph.random_seeds = [buf, 0]
    buf, k = seeds
    seeds[1] += 1
    return buf, k


def _numbers(size, normal=False):
    """A loader of this op's random float32 numbers over `size` (uniform, or normal)."""
    buf, k = _next_seed()
    strides = contiguous_strides(size)
    draw = ops.randn if normal else ops.rand

    def load(idx):
        seed = buf.make_loader()([Ix(None, k)])
        flat = Ix()
        for i, st in zip(idx, strides):
            flat = flat + Ix.wrap(i) * st
        return draw(seed, ops.index_expr(flat, torch.int64))

    return load


def _below(v, dtype, low=0.0, high=1.0):
    """v (float32) cast to dtype, in [low, high): a value that rounds up to high gives low, as
    eager's uniform does."""
    if dtype != torch.float32:
        v = ops.to_dtype(v, dtype, torch.float32)
    elif (low, high) == (0.0, 1.0):
        return v  # (tl.rand's float32 is below 1)
    return ops.where(ops.eq(v, ops.constant(high, dtype)), ops.constant(low, dtype), v)


def _checked(generator=None, device=None):
    if generator is not None:
        raise NotLowered("an explicit generator")
    if device is not None and torch.device(device).type != current_device().type:
        raise NotLowered("device")


def _draws(size, device, normal):
    """rand/randn and their _like forms over `size`: uniform in [0, 1), or normal."""
    _checked(device=device)
    out = V.val.dtype
    _in_kernel(out)
    u = _numbers(size, normal)
    return box(Pointwise(out, size, u if normal else lambda i: _below(u(i), out)))


@register_lowering(aten.rand.default, aten.randn.default)
def _rand(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    size = tuple(to_expr(s) for s in size)
    return _draws(size, device, V.current_target == aten.randn.default)


@register_lowering(aten.rand_like.default, aten.randn_like.default)
def _rand_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _draws(x.get_size(), device, V.current_target == aten.randn_like.default)


@register_lowering(aten.uniform.default)
def _uniform(x, low=0.0, high=1.0, *, generator=None):
    _checked(generator)
    out = x.get_dtype()
    _in_kernel(out)
    size = x.get_size()
    u = _numbers(size)

    def inner(i):
        span = ops.constant(float(high) - float(low), torch.float32)
        v = ops.add(ops.constant(float(low), torch.float32), ops.mul(span, u(i)))
        return _below(v, out, float(low), float(high))

    return box(Pointwise(out, size, inner))


@register_lowering(aten.bernoulli.default, aten.bernoulli.p)
def _bernoulli(x, p=None, *, generator=None):
    _checked(generator)
    out = x.get_dtype()
    _in_kernel(out)
    size = x.get_size()
    u = _numbers(size)
    prob = loader_for(x if p is None else p, size, torch.float32)

    def inner(i):
        return ops.to_dtype(ops.lt(u(i), prob(i)), out, torch.bool)

    return box(Pointwise(out, size, inner))


@register_lowering(aten.native_dropout.default)
def _native_dropout(x, p, train):
    dtype = x.get_dtype()
    _in_kernel(dtype)
    if train is not True or not 0.0 <= p < 1.0:
        raise NotLowered(f"dropout with p={p}, train={train} (eager's special cases)")
    size = x.get_size()
    u = _numbers(size)
    ct = opmath(dtype)
    xs = loader_for(x, size, ct)

    def keep(i):
        return ops.lt(u(i), ops.constant(1.0 - p, torch.float32))

    def output(i):
        scale = ops.mul(ops.to_dtype(keep(i), ct, torch.bool), ops.constant(1.0 / (1.0 - p), ct))
        return ops.mul(xs(i), scale)

    out, mask = V.val
    return box(Pointwise(dtype, size, output), out), box(Pointwise(torch.bool, size, keep), mask)
