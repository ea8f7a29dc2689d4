"""Patterns from real model code, each compiled into exactly one graph and compared with eager."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from frontend_helpers import run_and_compare


def t(*shape, **kw):
    return torch.randn(*shape, **kw)


def attention(q, k, v):
    scale = q.size(-1) ** -0.5
    att = (q @ k.transpose(-2, -1)) * scale
    T = q.shape[-2]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    att = att.masked_fill(~mask, float("-inf"))
    return F.softmax(att, dim=-1) @ v


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def heads(x, n_head):
    B, T, C = x.size()
    return x.view(B, T, n_head, C // n_head).transpose(1, 2).contiguous().view(B, T, C)


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)


def rms_norm(x, w):
    var = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(var + 1e-6) * w


def gelu_tanh(x):
    return (
        0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
    )


def einsum(a, b):
    return torch.einsum("bij,bjk->bik", a, b)


def dtype_casts(x, y):
    return x.float() + y.to(x.dtype) + x.type_as(y) + x.double().to(torch.float32)


def new_tensors(x):
    return x.new_ones(x.shape) + x.new_zeros(2, 3) + torch.zeros_like(x) + torch.full_like(x, 2)


def split_sizes(x):
    a, b = x.split([1, 3], dim=-1)
    return torch.cat((b, a), dim=-1)


def shape_math(x):
    n = len(x.shape)
    d = max(x.shape)
    dims = tuple(x.shape)
    return x.reshape(-1) * (n + d) + sum(dims), list(x.shape), x.shape == (2, 3)


def asserts(x):
    assert x.dim() == 2, "needs 2-d"
    assert isinstance(x, torch.Tensor)
    return x * 2


def getattr_loop(x, mod):
    for i in range(2):
        x = getattr(mod, f"layer{i}")(x)
    return x


class TwoLayers(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer0 = nn.Linear(4, 4)
        self.layer1 = nn.Linear(4, 4)


def nested_closure(x):
    w = x * 2

    def inner(y):
        return y + w

    return inner(x) + inner(w)


def lambda_defaults(x):
    f = lambda y, k=3: y * k  # noqa: E731
    return f(x) + f(x, k=2)


def star_args(x, y):
    args = (x, y)
    kwargs = {"alpha": 0.5}
    return torch.add(*args, **kwargs)


def forwarding(*args, **kwargs):
    return torch.stack(args).sum(0) * kwargs["scale"]


def isinstance_tuple(x, seq):
    if isinstance(seq, (list, tuple)):
        return x + len(seq)
    return x


def masked(x):
    return torch.where(x > 0, x, x.new_zeros(())) + x.clamp(min=0).abs()


def reductions(x):
    return x.mean(), x.std(dim=0), x.var(unbiased=False), x.amax(-1), x.argmax(), x.norm()


def indexing(x):
    return x[:, None, :2], x[..., -1], x[1], x[torch.tensor([0, 1])], x[[0, 1]]


def comparisons(x, y):
    return torch.maximum(x, y), torch.minimum(x, y), x == y, x != y, (x >= y).all()


def conv_pool(x, w):
    y = F.conv2d(x, w, padding=1)
    return F.max_pool2d(F.relu(y), 2), F.adaptive_avg_pool2d(y, 1).flatten(1)


def embedding(idx, table):
    return F.embedding(idx, table).sum(1)


def cross_entropy(logits, target):
    return F.cross_entropy(logits, target)


def string_keys(d):
    return sum(d[f"k{i}"] for i in range(2))


def tuple_returns(x):
    vals, idx = torch.topk(x, 2)
    return vals * 2, idx


def chained_methods(x):
    return x.abs().add(1).log().mul_(2).sub(0.5).clamp_(-1, 1)


def python_numbers(x, a: int, b: float):
    c = a // 2 + int(b) + round(b * 3) + abs(-a) + (a if a > b else b)
    return x * c, c


def module_calls_with_kwargs(x, mha):
    out, weights = mha(x, x, x, need_weights=True)
    return out, weights


CASES = [
    ("attention", attention, (t(2, 4, 8), t(2, 4, 8), t(2, 4, 8))),
    ("sdpa", sdpa, (t(1, 2, 4, 8), t(1, 2, 4, 8), t(1, 2, 4, 8))),
    ("heads", heads, (t(2, 3, 8), 2)),
    ("layer_norm", layer_norm, (t(2, 6), t(6), t(6))),
    ("rms_norm", rms_norm, (t(2, 6), t(6))),
    ("gelu_tanh", gelu_tanh, (t(10),)),
    ("einsum", einsum, (t(2, 3, 4), t(2, 4, 5))),
    ("dtype_casts", dtype_casts, (t(3), t(3))),
    ("new_tensors", new_tensors, (t(2, 3),)),
    ("split_sizes", split_sizes, (t(2, 4),)),
    ("shape_math", shape_math, (t(2, 3),)),
    ("asserts", asserts, (t(2, 2),)),
    ("getattr_loop", getattr_loop, (t(2, 4), TwoLayers())),
    ("nested_closure", nested_closure, (t(3),)),
    ("lambda_defaults", lambda_defaults, (t(3),)),
    ("star_args", star_args, (t(3), t(3))),
    ("isinstance_tuple", isinstance_tuple, (t(3), [1, 2])),
    ("masked", masked, (t(5),)),
    ("reductions", reductions, (t(4, 3),)),
    ("indexing", indexing, (t(3, 4),)),
    ("comparisons", comparisons, (t(4), t(4))),
    ("conv_pool", conv_pool, (t(1, 2, 8, 8), t(3, 2, 3, 3))),
    ("embedding", embedding, (torch.tensor([[1, 2], [0, 3]]), t(5, 4))),
    ("cross_entropy", cross_entropy, (t(4, 5), torch.tensor([0, 1, 4, 2]))),
    ("string_keys", string_keys, ({"k0": t(2), "k1": t(2)},)),
    ("tuple_returns", tuple_returns, (t(5),)),
    ("chained_methods", chained_methods, (t(6),)),
    ("python_numbers", python_numbers, (t(2), 7, 2.5)),
    ("mha", module_calls_with_kwargs, (t(2, 3, 8), nn.MultiheadAttention(8, 2, batch_first=True))),
]


@pytest.mark.parametrize("name,fn,args", CASES, ids=[c[0] for c in CASES])
def test_pattern_one_graph(name, fn, args):
    run_and_compare(fn, *args, expected_graphs=1, expected_frames=1, expected_breaks=0)


def test_forwarding_varargs_kwargs():
    run_and_compare(forwarding, t(3), t(3), scale=2.0, expected_graphs=1, expected_breaks=0)


class Base(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x)


class Child(Base):
    def forward(self, x):
        return super().forward(x) * 2


class TwoArgSuper(Base):
    def forward(self, x):
        return super().forward(x) + 1


MORE = [
    ("super_zero_arg", lambda x, m: m(x), (t(2, 3), Child())),
    ("super_two_arg", lambda x, m: m(x), (t(2, 3), TwoArgSuper())),
    ("module_kwargs_splat", lambda x, m: m(**{"x": x}), (t(2, 3), Child())),
    ("unbound_tensor_method", lambda x: torch.Tensor.add(x, 1) * torch.Tensor.sin(x), (t(3),)),
    ("relu_inplace", lambda x: F.relu(x.clone(), inplace=True), (t(3),)),
    ("tensor_literal", lambda x: x + torch.tensor([1.0, 2.0, 3.0]), (t(3),)),
    ("randn_like_shape", lambda x: torch.randn(x.shape) * 0 + x, (t(3),)),
    (
        "channels_last",
        lambda x: x.contiguous(memory_format=torch.channels_last) + 1,
        (t(1, 2, 3, 3),),
    ),
    (
        "chunk_enumerate",
        lambda x: torch.cat([c * i for i, c in enumerate(x.chunk(2, 1))], 1),
        (t(2, 4),),
    ),
]


@pytest.mark.parametrize("name,fn,args", MORE, ids=[c[0] for c in MORE])
def test_more_patterns_one_graph(name, fn, args):
    run_and_compare(fn, *args, expected_graphs=1, expected_frames=1, expected_breaks=0)
