"""functionalize: `to`/`contiguous` that returned their input, then mutated (a decomposition's
`out.to(x.dtype)` followed by `out += y`); the sdpa shape rules with grouped-query heads."""

import torch
import torch.nn.functional as F

import kiln
from kiln.autograd.aten_tracer import format_graph, trace_aten
from kiln.autograd.functionalize import functionalize
from kiln.symbolic.shape_env import ShapeEnv
from kiln.symbolic.shape_rules import Sizes, symbolic_sizes

aten = torch.ops.aten

# decompositions that end in a `to` (as torch's batch norm decomposition does)
DECOMP = {
    aten.relu.default: lambda x: aten.clamp_min.default(x, 0).to(x.dtype),
    aten.sigmoid.default: lambda x: aten.neg.default(x).to(torch.float64),
    aten.tanh.default: lambda x: x.to(x.dtype),
}


def f(x, y):
    z = torch.relu(x * 2)
    z.add_(y)  # the `to` returned clamp_min's result: z is that value
    w = torch.sigmoid(x)
    w.add_(1)  # a real conversion: a new tensor, x untouched
    t = torch.tanh(y)
    t.mul_(3)  # `to` returned the input y itself: y is mutated
    return z * 3, w


def test_to_returning_its_input_then_mutated():
    inputs = (torch.randn(3, 3), torch.randn(3, 3))
    gm = trace_aten(f, inputs, decompositions=DECOMP)
    assert sum(n.target is aten.to.dtype for n in gm.graph.nodes) == 3
    res = functionalize(gm)
    for n in res.gm.graph.nodes:
        if hasattr(n.target, "_schema"):
            assert not n.target._schema.is_mutable, format_graph(res.gm)
    assert res.mutated_inputs == [1]
    x, y = inputs
    ey = y.clone()
    ez = (torch.clamp_min(x * 2, 0) + y) * 3
    ew = -x.double() + 1
    ey.mul_(3)
    outs = res.gm(x.clone(), y.clone())
    torch.testing.assert_close(outs[0], ey)  # the epilogue's new value of y
    torch.testing.assert_close(outs[1], ez)
    torch.testing.assert_close(outs[2], ew)


def test_batch_norm_then_inplace_add_under_kiln():
    """HF ResNet's `hidden_state += residual` after an eval-mode batch norm: one graph, no
    backend failure (the batch norm decomposition ends in `out.to(x.dtype)`)."""
    rm, rv, w, b = torch.randn(3), torch.rand(3) + 0.5, torch.randn(3), torch.randn(3)

    def g(x, y):
        z = F.batch_norm(x, rm, rv, w, b, False, 0.1, 1e-5)
        z += y
        return z.relu()

    x, y = torch.randn(2, 3, 4, 4), torch.randn(2, 3, 4, 4)
    kiln.reset()
    with torch.no_grad():
        got = kiln.compile(g, backend="kiln")(x, y)
    torch.testing.assert_close(got, g(x, y))
    assert kiln.counters["stats"]["backend_failures"] == 0
    assert kiln.counters["stats"]["unique_graphs"] == 1


def M(*sizes):
    return torch.empty(*sizes, device="meta")


def test_sdpa_rules_with_grouped_query_heads_stay_symbolic():
    env = ShapeEnv()
    q = Sizes(env.sizes_of(M(2, 4, 5, 16), "L['q']", dynamic_dims={2}))
    k = Sizes(env.sizes_of(M(2, 2, 17, 16), "L['k']", dynamic_dims={2}))
    out, lse = symbolic_sizes(aten._scaled_dot_product_flash_attention_for_cpu.default, [q, k, k])
    assert list(out[:2]) == [2, 4] and out[3] == 16 and out[2].expr == q[2].expr
    assert list(lse[:2]) == [2, 4] and lse[2].expr == q[2].expr
    got = symbolic_sizes(aten.scaled_dot_product_attention.default, [q, k, k], {"enable_gqa": True})
    assert got[1] == 4 and got[3] == 16 and got[2].expr == q[2].expr
    real = aten._scaled_dot_product_flash_attention_for_cpu.default(
        torch.randn(2, 4, 1, 16), torch.randn(2, 2, 17, 16), torch.randn(2, 2, 17, 16)
    )
    assert list(real[0].shape) == [2, 4, 1, 16] and list(real[1].shape) == [2, 4, 1]
