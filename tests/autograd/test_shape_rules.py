"""Symbolic shape rules: checked against meta-tensor execution, and symbolic results by expression."""

import pytest
import sympy
import torch

from kiln.symbolic import hook_ops, layouts, shape_rules
from kiln.symbolic.shape_env import ShapeEnv, SymNode, hint_of
from kiln.symbolic.shape_rules import Sizes, contiguous_strides, rule_for, symbolic_sizes

aten = torch.ops.aten


def M(*sizes, dtype=torch.float32):
    """A meta tensor."""
    return torch.empty(*sizes, device="meta", dtype=dtype)


def Ix(*sizes):
    """A meta int64 tensor."""
    return M(*sizes, dtype=torch.int64)


def _symbolize(env, args, kwargs):
    """Replace each meta tensor by its fully dynamic Sizes."""
    counter = iter(range(1000))

    def conv(a):
        if isinstance(a, torch.Tensor):
            return Sizes(env.sizes_of(a, f"L['a{next(counter)}']"))
        if isinstance(a, list | tuple) and any(isinstance(x, torch.Tensor) for x in a):
            return [conv(x) for x in a]
        return a

    return [conv(a) for a in args], {k: conv(v) for k, v in kwargs.items()}


def _out_shapes(out):
    """Concrete output shapes of a meta result (tensor or tuple)."""
    if isinstance(out, torch.Tensor):
        return tuple(out.shape)
    return tuple(None if o is None else tuple(o.shape) for o in out)


def _hint_shapes(res):
    if isinstance(res, Sizes):
        return tuple(hint_of(s) for s in res)
    return tuple(None if r is None else tuple(hint_of(s) for s in r) for r in res)


# (op, builder(*params) -> (args, kwargs), list of params)
N3 = [(2, 3, 5), (7, 4, 6), (16, 9, 8)]
N2 = [(2, 3), (7, 4), (16, 9)]
CASES = [
    (aten.add.Tensor, lambda a, b, c: ((M(a, b), M(b)), {}), N3),
    (aten.add.Tensor, lambda a, b, c: ((M(a, 1, c), M(b, 1)), {}), N3),
    (aten.mul.Tensor, lambda a, b, c: ((M(a, b), M(a, b)), {}), N3),
    (aten.mul.Scalar, lambda a, b, c: ((M(a, b), 2.0), {}), N3),
    (aten.sub.Tensor, lambda a, b, c: ((M(1, b), M(a, 1)), {}), N3),
    (aten.where.self, lambda a, b, c: ((M(a, 1, dtype=torch.bool), M(b), M(1, b)), {}), N3),
    (aten.relu.default, lambda a, b, c: ((M(a, b, c),), {}), N3),
    (aten.gelu_backward.default, lambda a, b, c: ((M(a, b), M(a, b)), {}), N3),
    (aten.clone.default, lambda a, b, c: ((M(a, b, c),), {}), N3),
    (aten._to_copy.default, lambda a, b, c: ((M(a, b),), {"dtype": torch.float16}), N3),
    (aten._softmax.default, lambda a, b, c: ((M(a, b), -1, False), {}), N3),
    (aten._log_softmax.default, lambda a, b, c: ((M(a, b), 0, False), {}), N3),
    (aten.native_dropout.default, lambda a, b, c: ((M(a, b), 0.1, True), {}), N3),
    (aten.sum.dim_IntList, lambda a, b, c: ((M(a, b, c), [1]), {}), N3),
    (aten.sum.dim_IntList, lambda a, b, c: ((M(a, b, c), [0, -1], True), {}), N3),
    (aten.sum.default, lambda a, b, c: ((M(a, b),), {}), N3),
    (aten.mean.dim, lambda a, b, c: ((M(a, b, c), [-1], True), {}), N3),
    (aten.amax.default, lambda a, b, c: ((M(a, b, c), [1]), {}), N3),
    (aten.var.correction, lambda a, b, c: ((M(a, b, c), [2]), {"keepdim": True}), N3),
    (aten.var_mean.correction, lambda a, b, c: ((M(a, b, c), [2]), {"keepdim": True}), N3),
    (aten.var_mean.dim, lambda a, b, c: ((M(a, b, c), [1], True, False), {}), N3),
    (aten.max.dim, lambda a, b, c: ((M(a, b), 1), {}), N3),
    (aten.argmax.default, lambda a, b, c: ((M(a, b), 0, True), {}), N3),
    (aten.view.default, lambda a, b, c: ((M(a, b, c), [a * b, c]), {}), N3),
    (aten.view.default, lambda a, b, c: ((M(a, b, c), [a, -1]), {}), N3),
    (aten._unsafe_view.default, lambda a, b, c: ((M(a, b * c), [a, b, c]), {}), N3),
    (aten.reshape.default, lambda a, b, c: ((M(a, b), [-1]), {}), N3),
    (aten.permute.default, lambda a, b, c: ((M(a, b, c), [2, 0, 1]), {}), N3),
    (aten.as_strided.default, lambda a, b, c: ((M(a, b, c), [a - 1, c], [c, 1], 1), {}), N3),
    (aten.transpose.int, lambda a, b, c: ((M(a, b, c), 0, -1), {}), N3),
    (aten.t.default, lambda a, b, c: ((M(a, b),), {}), N3),
    (aten.expand.default, lambda a, b, c: ((M(a, 1), [c, a, b]), {}), N3),
    (aten.expand.default, lambda a, b, c: ((M(a, b), [-1, b]), {}), N3),
    (aten.unsqueeze.default, lambda a, b, c: ((M(a, b), -1), {}), N3),
    (aten.squeeze.dim, lambda a, b, c: ((M(a, 1, b), 1), {}), N3),
    (aten.squeeze.dim, lambda a, b, c: ((M(a, b), 1), {}), N3),
    (aten.squeeze.default, lambda a, b, c: ((M(1, a, 1, b),), {}), N3),
    (aten.slice.Tensor, lambda a, b, c: ((M(a, b), 1, 1, 2**63 - 1), {}), N3),
    (aten.slice.Tensor, lambda a, b, c: ((M(a, b), 0, 0, 3), {}), N3),
    (aten.slice.Tensor, lambda a, b, c: ((M(a, b), 1, -2, None, 2), {}), N3),
    (aten.slice.Tensor, lambda a, b, c: ((M(a, b), 0, 1, -1), {}), N3),
    (aten.select.int, lambda a, b, c: ((M(a, b, c), 1, 0), {}), N3),
    (aten.split.Tensor, lambda a, b, c: ((M(a, b), 2, 1), {}), N3),
    (aten.split_with_sizes.default, lambda a, b, c: ((M(a + b, c), [a, b]), {}), N3),
    (aten.unbind.int, lambda a, b, c: ((M(a, b), 1), {}), N3),
    (aten.cat.default, lambda a, b, c: (([M(a, c), M(b, c)],), {}), N3),
    (aten.cat.default, lambda a, b, c: (([M(a, b), M(a, c)], -1), {}), N3),
    (aten.stack.default, lambda a, b, c: (([M(a, b), M(a, b), M(a, b)], 1), {}), N3),
    (aten.mm.default, lambda a, b, c: ((M(a, b), M(b, c)), {}), N3),
    (aten.bmm.default, lambda a, b, c: ((M(a, b, c), M(a, c, b)), {}), N3),
    (aten.addmm.default, lambda a, b, c: ((M(c), M(a, b), M(b, c)), {}), N3),
    (aten.mv.default, lambda a, b, c: ((M(a, b), M(b)), {}), N3),
    (aten.dot.default, lambda a, b, c: ((M(a), M(a)), {}), N3),
    (aten.baddbmm.default, lambda a, b, c: ((M(a, 1, c), M(a, b, 5), M(a, 5, c)), {}), N3),
    (aten.matmul.default, lambda a, b, c: ((M(a, 1, b, c), M(a, c, b)), {}), N3),
    (aten.matmul.default, lambda a, b, c: ((M(b), M(a, b, c)), {}), N3),
    (aten.matmul.default, lambda a, b, c: ((M(a, b), M(b)), {}), N3),
    (
        aten.convolution.default,
        lambda a, b, c: (
            (M(a, 3, b + 8, c + 9), M(4, 3, 3, 2), M(4), [2, 1], [1, 0], [1, 2], False, [0, 0], 1),
            {},
        ),
        N3,
    ),
    (
        aten.convolution.default,
        lambda a, b, c: (
            (M(a, 4, b + 2), M(4, 2, 3), None, [2], [1], [1], True, [1], 2),
            {},
        ),
        N3,
    ),
    (aten.embedding.default, lambda a, b, c: ((M(a + 10, c), Ix(a, b)), {}), N3),
    (
        aten.embedding_dense_backward.default,
        lambda a, b, c: ((M(a, c), Ix(a), 30, -1, False), {}),
        N3,
    ),
    (aten.index_select.default, lambda a, b, c: ((M(a, b), 0, Ix(c)), {}), N3),
    (aten.gather.default, lambda a, b, c: ((M(a, b), 1, Ix(a, c)), {}), N3),
    (aten.native_layer_norm.default, lambda a, b, c: ((M(a, b, c), [c], M(c), M(c), 1e-5), {}), N3),
    (
        aten.native_layer_norm.default,
        lambda a, b, c: ((M(a, b, c), [b, c], None, None, 1e-5), {}),
        N3,
    ),
    (aten.layer_norm.default, lambda a, b, c: ((M(a, b, c), [c], M(c)), {}), N3),
    (
        aten.native_layer_norm_backward.default,
        lambda a, b, c: (
            (M(a, b, c), M(a, b, c), [c], M(a, b, 1), M(a, b, 1), M(c), M(c), [True, True, False]),
            {},
        ),
        N3,
    ),
    (
        aten.scaled_dot_product_attention.default,
        lambda a, b, c: ((M(a, 2, b, c), M(a, 2, 5, c), M(a, 2, 5, 3)), {}),
        N3,
    ),
    (
        aten._scaled_dot_product_flash_attention_for_cpu.default,
        lambda a, b, c: ((M(a, 2, b, c), M(a, 2, b, c), M(a, 2, b, c)), {}),
        N3,
    ),
    (aten.nll_loss_forward.default, lambda a, b, c: ((M(a, b), Ix(a), None, 1, -100), {}), N3),
    (aten.full.default, lambda a, b, c: (([a, b], 1.0), {"device": "meta"}), N3),
    (aten.zeros.default, lambda a, b, c: (([a, b, c],), {"device": "meta"}), N3),
    (aten.new_zeros.default, lambda a, b, c: ((M(a), [b, c]), {}), N3),
    (aten.arange.default, lambda a, b, c: ((a,), {"device": "meta"}), N3),
    (aten.arange.start_step, lambda a, b, c: ((b, a + 20, c), {"device": "meta"}), N3),
    (aten.scalar_tensor.default, lambda a, b, c: ((1.0,), {"device": "meta"}), N3),
    (aten.repeat.default, lambda a, b, c: ((M(a, b), [2, 1, 3]), {}), N3),
    (
        aten.convolution_backward.default,
        lambda a, b, c: (
            (M(a, 4, 6, 6), M(a, 3, 8, 8), M(4, 3, 3, 3), [4], [1, 1], [0, 0], [1, 1], False)
            + ([0, 0], 1, [True, True, True]),
            {},
        ),
        N3,
    ),
    (
        aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
        lambda a, b, c: (
            (M(a, 2, b, c), M(a, 2, b, c), M(a, 2, b, c), M(a, 2, b, c), M(a, 2, b, c))
            + (M(a, 2, b), 0.0, False),
            {},
        ),
        N3,
    ),
    (
        aten.nll_loss_backward.default,
        lambda a, b, c: ((M(()), M(a, b), Ix(a), None, 1, -100, M(())), {}),
        N3,
    ),
    (aten.slice_backward.default, lambda a, b, c: ((M(a, 2), [a, b + 2], 1, 0, 2, 1), {}), N3),
    (aten.select_backward.default, lambda a, b, c: ((M(a), [a, b], 1, 0), {}), N3),
    (aten.constant_pad_nd.default, lambda a, b, c: ((M(a, b, c), [1, 2, 0, 3]), {}), N3),
    (aten.mse_loss.default, lambda a, b, c: ((M(a, b), M(a, b), 0), {}), N3),
    (
        aten.native_batch_norm.default,
        lambda a, b, c: ((M(a, b, c), M(b), M(b), M(b), M(b), True, 0.1, 1e-5), {}),
        N3,
    ),
    (
        aten._native_batch_norm_legit_functional.default,
        lambda a, b, c: ((M(a, b, c), M(b), M(b), M(b), M(b), True, 0.1, 1e-5), {}),
        N3,
    ),
    (
        aten.native_batch_norm_backward.default,
        lambda a, b, c: (
            (M(a, b, c), M(a, b, c), M(b), M(b), M(b), M(b), M(b), True, 1e-5)
            + ([True, True, False],),
            {},
        ),
        N3,
    ),
    (
        aten.native_group_norm.default,
        lambda a, b, c: ((M(a, 2 * b, c), None, None, a, 2 * b, c, 2, 1e-5), {}),
        N3,
    ),
    (
        aten.native_group_norm_backward.default,
        lambda a, b, c: (
            (M(a, 2 * b, c), M(a, 2 * b, c), M(a, 2), M(a, 2), M(2 * b), a, 2 * b, c, 2)
            + ([True, True, True],),
            {},
        ),
        N3,
    ),
    (aten.topk.default, lambda a, b, c: ((M(a, b + 2, c), 2, 1), {}), N3),
    (aten.sort.default, lambda a, b, c: ((M(a, b, c), 1), {}), N3),
    (aten.index_add.default, lambda a, b, c: ((M(a + 3, b), 0, Ix(2), M(2, b)), {}), N3),
    (aten.index.Tensor, lambda a, b, c: ((M(a, b + 3, c), [None, Ix(a, 2)]), {}), N3),
    (aten.index.Tensor, lambda a, b, c: ((M(a, b, c), [Ix(a, 1), None, Ix(1, c)]), {}), N3),
    (aten.linalg_vector_norm.default, lambda a, b, c: ((M(a, b, c), 2, [1], True), {}), N3),
    (aten.glu.default, lambda a, b, c: ((M(a, 2 * b, c), 1), {}), N3),
    (
        aten.avg_pool2d.default,
        lambda a, b, c: ((M(a, 3, b + 4, c + 5), [2, 2], [2, 1], [1, 0]), {}),
        N3,
    ),
    (
        aten.max_pool2d_with_indices.default,
        lambda a, b, c: ((M(a, 3, b + 4, c + 5), [3, 2], [2, 2], [1, 1], [1, 2]), {}),
        N3,
    ),
    (
        aten.max_pool2d_with_indices_backward.default,
        lambda a, b, c: (
            (M(a, 3, b // 2 + 2, c // 2 + 2), M(a, 3, b + 4, c + 4), [2, 2], [2, 2], [0, 0], [1, 1])
            + (False, Ix(a, 3, b // 2 + 2, c // 2 + 2)),
            {},
        ),
        N3,
    ),
    (aten.unfold.default, lambda a, b, c: ((M(a, b + 3, c), 1, 3, 2), {}), N3),
    (aten.pixel_shuffle.default, lambda a, b, c: ((M(a, 4 * b, c, 3), 2), {}), N3),
    (aten.pixel_unshuffle.default, lambda a, b, c: ((M(a, b, 2 * c, 4), 2), {}), N3),
    (aten.upsample_nearest2d.default, lambda a, b, c: ((M(a, b, c, 3), [2 * c, 6]), {}), N3),
    (
        aten.upsample_nearest2d_backward.default,
        lambda a, b, c: ((M(a, b, 2 * c, 6), [2 * c, 6], [a, b, c, 3]), {}),
        N3,
    ),
    (aten._adaptive_avg_pool2d.default, lambda a, b, c: ((M(a, 3, b + 4, c), [3, 2]), {}), N3),
    (aten.adaptive_max_pool2d.default, lambda a, b, c: ((M(a, 3, b + 4, c), [3, 2]), {}), N3),
    (aten.mse_loss_backward.default, lambda a, b, c: ((M(()), M(a, b), M(a, b), 1), {}), N3),
    # ceil_mode pooling: the last window dropped where it would start in the padding
    (
        aten.max_pool2d_with_indices.default,
        lambda a, b, c: ((M(a, 3, b + 4, c + 5), [3, 3], [2, 2], [1, 1], [1, 1], True), {}),
        N3 + [(1, 5, 6), (2, 6, 7), (3, 11, 12)],
    ),
    (
        aten.avg_pool2d.default,
        lambda a, b, c: ((M(a, 2, b + 3, c + 2), [3, 2], [2, 2], [0, 1], True), {}),
        N3 + [(1, 5, 6), (2, 6, 7), (3, 11, 12)],
    ),
    (
        aten.avg_pool3d.default,
        lambda a, b, c: ((M(a, 2, b + 3, c + 2, 5), [2, 2, 2], [2, 2, 1], 0, True), {}),
        N3,
    ),
    (
        aten.max_pool3d_with_indices.default,
        lambda a, b, c: ((M(a, 2, b + 3, c + 2, 4), [2, 2, 2], [2, 2, 2], 0, 1, False), {}),
        N3,
    ),
    (aten.diag_embed.default, lambda a, b, c: ((M(a, b, c),), {}), N3),
    (aten.diagonal.default, lambda a, b, c: ((M(a, b, c),), {}), N3),
    (aten.diagonal.default, lambda a, b, c: ((M(a, b, c), 1, 1, 2), {}), N3),
    (aten.diagonal.default, lambda a, b, c: ((M(a, b, c), -1, 2, 0), {}), N3),
    (aten.diag_embed.default, lambda a, b, c: ((M(a, c), -2, 0, 2), {}), N3),
    (
        aten._embedding_bag.default,
        lambda a, b, c: ((M(a + 4, c), Ix(b + 2), Ix(a), False, 2, False, None, True), {}),
        N3,
    ),
    (
        aten._embedding_bag_forward_only.default,
        lambda a, b, c: ((M(a + 4, c), Ix(b + 2), Ix(a)), {"mode": 1}),
        N3,
    ),
    (
        aten._embedding_bag_dense_backward.default,
        lambda a, b, c: ((M(a, c), Ix(b), Ix(b), Ix(a), Ix(0), 7, False, 0, None), {}),
        N3,
    ),
    (
        aten._embedding_bag_backward.default,
        lambda a, b, c: (
            (M(a, c), Ix(b), Ix(a), Ix(b), Ix(a), Ix(0), 7, False, 0, False, None),
            {},
        ),
        N3,
    ),
    (aten.upsample_linear1d.default, lambda a, b, c: ((M(a, b, c), [2 * c], False), {}), N3),
    (
        aten.upsample_bicubic2d_backward.default,
        lambda a, b, c: ((M(a, b, 2 * c, 6), [2 * c, 6], [a, b, c, 3], False), {}),
        N3,
    ),
    (hook_ops.HOOK_TOKEN, lambda a, b, c: ((M(a, b),), {}), N3),  # (a token: one element)
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_rule_matches_meta(case):
    op, build, params = CASES[case]
    assert rule_for(op) is not None
    for p in params:
        args, kwargs = build(*p)
        expected = _out_shapes(op(*args, **kwargs))
        env = ShapeEnv()
        sargs, skwargs = _symbolize(env, args, kwargs)
        got = symbolic_sizes(op, sargs, skwargs)
        assert _hint_shapes(got) == expected, (op, p)
        for fact in env.guard_facts():  # every recorded fact holds on the hints
            assert env.hint(fact) is True


def test_every_table_entry_is_an_aten_overload():
    for op in shape_rules.SHAPE_RULES:
        assert isinstance(op, torch._ops.OpOverload)
    assert rule_for(aten.nonzero.default) is None


def test_view_infers_symbolic_dim():
    env = ShapeEnv()
    x = Sizes(env.sizes_of(M(4, 10, 64), "L['x']", dynamic_dims={0, 1}))
    b, t, _ = x
    out = symbolic_sizes(aten.view.default, [x, [b, t, -1]])
    assert out[2] == 64 and isinstance(out[2], int)
    flat = symbolic_sizes(aten.view.default, [x, [-1, 64]])
    assert str(flat[0].expr) == "s0*s1"
    assert env.guards == []  # divisibility of s0*s1*64 by 64 is static
    halves = symbolic_sizes(aten.view.default, [x, [b, t, 2, -1]])
    assert halves[3] == 32
    # [s0] viewed as [-1, 8] needs a divisibility guard, then the division is exact
    env = ShapeEnv()
    (n,) = env.sizes_of(M(24), "L['y']")
    out = symbolic_sizes(aten.view.default, [Sizes([n]), [-1, 8]])
    assert env.guard_texts()[-1] == "(L['y'].size()[0] % 8) == 0"
    assert (out[0] * 8).expr == n.expr


def test_broadcast_unifies_and_guards():
    env = ShapeEnv()
    a = Sizes(env.sizes_of(M(5, 3), "L['a']"))
    b = Sizes(env.sizes_of(M(3), "L['b']"))
    out = symbolic_sizes(aten.add.Tensor, [a, b])
    assert [str(s) for s in out] == ["s0", "s1"]
    assert "L['b'].size()[0] == L['a'].size()[1]" in env.guard_texts()
    one = Sizes(env.sizes_of(M(1, 3), "L['c']"))  # the 1 is specialised, no symbol to guard
    assert symbolic_sizes(aten.mul.Tensor, [one, a])[0].expr == a[0].expr
    with pytest.raises(RuntimeError):
        env2 = ShapeEnv()
        symbolic_sizes(
            aten.add.Tensor,
            [Sizes(env2.sizes_of(M(5), "L['a']")), Sizes(env2.sizes_of(M(4), "L['b']"))],
        )


def test_slice_and_conv_expressions():
    env = ShapeEnv()
    x = Sizes(env.sizes_of(M(2, 9, 16, 20), "L['x']"))
    whole = symbolic_sizes(aten.slice.Tensor, [x, 1, 0, 2**63 - 1])
    assert whole[1].expr == x[1].expr and env.guards == []
    w = Sizes([4, 9, 3, 3])
    out = symbolic_sizes(
        aten.convolution.default, [x, w, None, [2, 2], [1, 1], [1, 1], False, [0, 0], 1]
    )
    assert out[1] == 4
    assert out[2].expr == sympy.floor((x[2].expr - 1) / 2) + 1
    half = x[2] // 2
    assert isinstance(half, SymNode) and half.hint == 8


def test_contiguous_strides_symbolic():
    env = ShapeEnv()
    a, b, c = env.sizes_of(M(3, 4, 5), "L['x']")
    strides = contiguous_strides((a, b, c))
    assert str(strides[0].expr) == "s1*s2" and strides[1].expr == c.expr and strides[2] == 1
    assert contiguous_strides((3, 0, 2)) == torch.empty(3, 0, 2).stride()
    assert contiguous_strides((2, 1, 4)) == (4, 4, 1)


def test_no_rule_contract_specialises():
    env = ShapeEnv()
    (n, m) = env.sizes_of(M(6, 7), "L['x']")
    assert rule_for(aten.nonzero.default) is None
    assert (int(n), int(m)) == (6, 7)  # what the caller does for an op without a rule
    assert env.guard_texts()[-2:] == ["L['x'].size()[0] == 6", "L['x'].size()[1] == 7"]


def _generic_candidates(a, b, c, broadcast):
    """Argument lists to try for a shared-rule op (the first one meta accepts is checked)."""
    out = []
    for dt in (torch.float32, torch.bool, torch.int64):
        x, y, z = M(a, 1, c, dtype=dt), M(b, 1, dtype=dt), M(1, b, c, dtype=dt)
        cond = M(b, 1, dtype=torch.bool)
        if not broadcast:  # same-shape ops get same-shape tensors
            y, z, cond = M(a, 1, c, dtype=dt), M(a, 1, c, dtype=dt), M(a, 1, c, dtype=torch.bool)
        out += [(x,), (x, y), (x, 2), (x, 2.0), (x, y, z), (cond, x, y), (x, cond, 0.5)]
        out += [(x, y, 0.5), (x, -1, 1.0), (x, -1, False), (x, y, -1, dt), (x, y, "tanh")]
        out += [
            (x, [1]),
            (x, [0, 2], True),
            ([a, c],),
            ([a, c], 2.0),
            (x, [b, c]),
            (x, [b, c], 2.0),
        ]
        out += [
            (x, 0.5),
            (x, 0.1, 1.0),
            (2.0, x),
            (cond, 0.5, x),
            (x, cond, torch.empty((), device="meta", dtype=dt)),
            (x, [c]),
        ]
    return [(args, {}) for args in out] + [((x, y), {"rounding_mode": "floor"})]


SHARED_RULES = (
    "pointwise",
    "same_as_first",
    "reduce_dims",
    "reduce_all",
    "_factory",
    "new_factory",
)


def test_every_shared_rule_op_matches_meta():
    """Every table entry with a shared rule, on generic broadcasting inputs, for two shapes."""
    unchecked = []
    for op, rule in shape_rules.SHAPE_RULES.items():
        if rule.__name__ not in SHARED_RULES:
            continue
        checked = False
        for p in [(3, 4, 5), (9, 2, 7)]:
            for args, kwargs in _generic_candidates(*p, rule.__name__ == "pointwise"):
                if rule.__name__ == "_factory":
                    kwargs = {"device": "meta"}
                try:
                    expected = _out_shapes(op(*args, **kwargs))
                except Exception:
                    continue
                env = ShapeEnv()
                sargs, skwargs = _symbolize(env, args, kwargs)
                got = symbolic_sizes(op, sargs, skwargs)
                assert _hint_shapes(got) == expected, (op, args)
                checked = True
                break
        if not checked:
            unchecked.append(str(op))
    assert unchecked == [], unchecked


def test_every_rule_function_has_a_case():
    covered = {rule_for(op) for op, _, _ in CASES}
    shared = {r for r in shape_rules.SHAPE_RULES.values() if r.__name__ in SHARED_RULES}
    assert set(shape_rules.SHAPE_RULES.values()) - covered - shared == set()


def test_propagate_uses_rule_or_specialises():
    env = ShapeEnv()
    x = M(6, 4)
    sizes = {id(x): env.sizes_of(x, "L['x']")}
    sizes_of = lambda t: sizes[id(t)]
    res = layouts.propagate(aten.sum.dim_IntList, (x, [1]), {}, torch.sum(x, [1]), sizes_of)
    assert str(res[0].expr) == "s0" and env.guards == []
    out = aten.nonzero.default(torch.zeros(6, 4))  # no rule: specialise, concrete sizes
    res = layouts.propagate(aten.nonzero.default, (x,), {}, out, sizes_of)
    assert res == tuple(out.shape)
    assert {"L['x'].size()[0] == 6", "L['x'].size()[1] == 4"} <= set(env.guard_texts())
    env = ShapeEnv()
    sizes[id(x)] = env.sizes_of(x, "L['x']")
    n, m = sizes[id(x)]
    args, kwargs = layouts.hint_args((x, [m, n]), {})
    assert args[1] == [4, 6] and env.guards == []
    res = layouts.propagate(aten.view.default, (x, [m, n]), {}, aten.view.default(*args), sizes_of)
    assert [str(s) for s in res] == ["s1", "s0"]
    outs = aten.native_layer_norm.default(x, [4], None, None, 1e-5)
    res = layouts.propagate(
        aten.native_layer_norm.default, (x, [4], None, None, 1e-5), {}, outs, sizes_of
    )
    assert [str(s) for s in res[1]] == ["s0", "1"]
    assert "L['x'].size()[1] == 4" in env.guard_texts()  # normalized_shape [4] pins the last dim


def test_rules_guard_the_sizes_they_rely_on():
    env = ShapeEnv()
    x = Sizes(env.sizes_of(M(5, 8), "L['x']"))
    symbolic_sizes(aten.native_layer_norm.default, [x, [8], None, None, 1e-5])
    symbolic_sizes(aten.select.int, [x, 0, 3])
    assert _guard_holds(env, (5, 8)) and _guard_holds(env, (4, 8))
    assert not _guard_holds(env, (5, 9))  # the normalized shape pins the last dim
    assert not _guard_holds(env, (3, 8))  # index 3 needs size > 3
    env = ShapeEnv()
    x = Sizes(env.sizes_of(M(2, 3, 9, 9), "L['x']"))
    w = Sizes([4, 3, 3, 3])
    symbolic_sizes(aten.convolution.default, [x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1])
    assert _guard_holds(env, (7, 3, 5, 6)) and not _guard_holds(env, (7, 4, 5, 6))
    assert not _guard_holds(env, (7, 3, 2, 6))  # a 3-wide kernel needs 3 inputs


def _guard_holds(env, shape):
    return eval(env.guard_expr(), {"L": {"x": torch.empty(shape, device="meta")}})


STRIDE_CASES = [
    (aten.permute.default, lambda x: (x, [2, 0, 1])),
    (aten.as_strided.default, lambda x: (x, [x.shape[0] - 1, 2], [x.shape[2], 1], 1)),
    (aten.transpose.int, lambda x: (x, 1, 2)),
    (aten.expand.default, lambda x: (x[:, :1], [4, x.shape[0], 5, x.shape[2]])),
    (aten.unsqueeze.default, lambda x: (x.permute(2, 0, 1), 1)),
    (aten.squeeze.dim, lambda x: (x[:, :1], 1)),
    (aten.slice.Tensor, lambda x: (x, 2, 1, 2**63 - 1, 2)),
    (aten.select.int, lambda x: (x, 1, 0)),
    (aten.split.Tensor, lambda x: (x, 2, 2)),
    (aten.unbind.int, lambda x: (x, 1)),
    (aten.diagonal.default, lambda x: (x, 1, 1, 2)),
    (aten.diagonal.default, lambda x: (x.permute(2, 0, 1), -1, 0, 2)),
    (aten.view.default, lambda x: (x, [-1, x.shape[2]])),
    (aten.view.default, lambda x: (x.transpose(0, 1), [x.shape[1], x.shape[0], -1])),  # fallback
    (aten.add.Tensor, lambda x: (x.permute(2, 0, 1), 1.0)),
    (aten.mul.Tensor, lambda x: (x, x)),
    (aten.nonzero.default, lambda x: (x,)),  # no rule
]


@pytest.mark.parametrize("case", range(len(STRIDE_CASES)))
def test_propagate_strides_match_meta(case):
    op, build = STRIDE_CASES[case]
    for shape in [(3, 4, 6), (5, 7, 8)]:
        x = torch.zeros(shape)  # real tensors: the views below must keep their strides
        args = build(x)
        try:
            out = op(*args)
        except RuntimeError:
            continue  # the input cannot be viewed so: nothing to propagate
        env = ShapeEnv()
        base = env.sizes_of(x, "L['x']")
        args = list(args)
        # the symbolic sizes/strides of the (view) input, derived from the base tensor's
        sym = {id(x): (Sizes(base), contiguous_strides(base))}
        if args[0] is not x:
            sym[id(args[0])] = _derive(x, args[0], sym)
        sizes, strides = layouts.propagate(
            op, args, {}, out, lambda t, sym=sym: sym[id(t)][0], lambda t, sym=sym: sym[id(t)][1]
        )
        outs = out if isinstance(out, list | tuple) else [out]
        sizes = sizes if isinstance(out, list | tuple) else [sizes]
        strides = strides if isinstance(out, list | tuple) else [strides]
        for o, sz, st in zip(outs, sizes, strides):
            assert tuple(hint_of(v) for v in sz) == tuple(o.shape)
            for n, a, b in zip(o.shape, st, o.stride()):
                assert n == 1 or hint_of(a) == b, (op, shape, st, o.stride())
        for fact in env.guard_facts():
            assert env.hint(fact) is True


def _derive(x, v, sym):
    """Symbolic sizes/strides of a view `v` of `x` made with plain torch (permute, slice)."""
    sizes, strides = sym[id(x)]
    if v.shape == x.permute(2, 0, 1).shape and v.stride() == x.permute(2, 0, 1).stride():
        return Sizes(sizes[d] for d in (2, 0, 1)), tuple(strides[d] for d in (2, 0, 1))
    if v.stride() == x.transpose(0, 1).stride():
        return Sizes((sizes[1], sizes[0], sizes[2])), (strides[1], strides[0], strides[2])
    return Sizes((sizes[0], 1, sizes[2])), strides  # x[:, :1]


def test_dense_strides():
    env = ShapeEnv()
    a, b, c = env.sizes_of(torch.empty(2, 3, 4), "L['x']")
    assert [str(v) for v in layouts.dense_strides((a, b, c), (12, 4, 1))] == [
        "s1*s2",
        "s2",
        "1",
    ]
    cl = layouts.dense_strides((a, b, c), (12, 1, 3))  # channels-last-like
    assert [str(v) for v in cl] == ["s1*s2", "1", "s1"]
    assert layouts.dense_strides((a, b, c), (0, 4, 1))[0] == 0
    assert layouts.dense_strides((a, b, c), (24, 8, 2)) is None


def test_same_shape_ops_unify_their_inputs():
    env = ShapeEnv()
    g = Sizes(env.sizes_of(M(5, 8), "L['g']"))
    y = Sizes(env.sizes_of(M(5, 8), "L['y']"))
    out = symbolic_sizes(aten._softmax_backward_data.default, [g, y, -1, torch.float32])
    assert [str(s) for s in out] == ["s0", "s1"]
    texts = env.guard_texts()
    assert "L['y'].size()[0] == L['g'].size()[0]" in texts
    assert "L['y'].size()[1] == L['g'].size()[1]" in texts


def _tensors(args, kwargs):
    """The tensor arguments in the order _symbolize names them a0, a1, ..."""
    out = []
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, list | tuple):
            out.extend(x for x in a if isinstance(x, torch.Tensor))
    return out


def _swap_tensors(args, kwargs, new):
    """`args`/`kwargs` with their tensors replaced, in order, by `new`."""
    it = iter(new)

    def sw(a):
        if isinstance(a, torch.Tensor):
            return next(it)
        if isinstance(a, list | tuple) and any(isinstance(x, torch.Tensor) for x in a):
            return [sw(x) for x in a]
        return a

    return [sw(a) for a in args], {k: sw(v) for k, v in kwargs.items()}


@pytest.mark.parametrize("case", range(len(CASES)))
def test_guards_are_sound(case):
    """Traced at one shape, run at another: where the guard holds, the symbolic sizes are right."""
    op, build, params = CASES[case]
    for p in params:
        args, kwargs = build(*p)
        env = ShapeEnv()
        sargs, skwargs = _symbolize(env, args, kwargs)
        got = symbolic_sizes(op, sargs, skwargs)
        guard = env.guard_expr()
        for q in params:
            qargs, qkwargs = build(*q)
            tensors = _tensors(qargs, qkwargs)
            scope = {"L": {f"a{i}": t for i, t in enumerate(tensors)}}
            holds = eval(guard, scope)
            rargs, rkwargs = _swap_tensors(args, kwargs, tensors)  # p's constants, q's tensors
            try:
                expected = _out_shapes(op(*rargs, **rkwargs))
            except (RuntimeError, IndexError, ValueError):
                assert not holds, (op, p, q, guard)
                continue
            if holds:
                ev = lambda s, env=env, scope=scope: (
                    eval(env.render(s.expr), scope) if isinstance(s, SymNode) else s
                )
                if isinstance(got, Sizes):
                    actual = tuple(ev(s) for s in got)
                else:
                    actual = tuple(None if g is None else tuple(ev(s) for s in g) for g in got)
                assert actual == expected, (op, p, q, guard)
