"""functionalize: mutation-free graphs whose outputs + epilogue reproduce eager mutation semantics."""

import pytest
import torch
import torch.nn.functional as F

from kiln.autograd.aten_tracer import format_graph, trace_aten
from kiln.autograd.functionalize import OutputAlias, functional_variant, functionalize
from kiln.exc import Unsupported

aten = torch.ops.aten


def run_functional(fn, *inputs):
    """Trace + functionalize fn; run it on copies of inputs with the epilogue; compare with eager."""
    res = functionalize(trace_aten(fn, inputs))
    for n in res.gm.graph.nodes:
        if n.op == "call_function" and hasattr(n.target, "_schema"):
            assert not n.target._schema.is_mutable, format_graph(res.gm)
    eager_inputs = [x.clone() for x in inputs]
    expected = fn(*eager_inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    ours = [x.clone() for x in inputs]
    outs = res.gm(*ours)
    nm = len(res.mutated_inputs)
    for i, v in zip(res.mutated_inputs, outs[:nm]):
        ours[i].copy_(v)
    for got, exp in zip(outs[nm:], expected):
        torch.testing.assert_close(got, exp)
    for got, exp in zip(ours, eager_inputs):
        torch.testing.assert_close(got, exp)
    return res


def test_inplace_through_views_of_an_intermediate():
    def f(x):
        y = x * 2
        y[0].add_(1)
        y[:, 1:3].mul_(3)
        y.t()[1].sub_(0.5)
        y.diagonal().zero_()
        y.view(-1)[5] = 9.0
        return y, y.sum()

    res = run_functional(f, torch.randn(4, 4))
    assert res.mutated_inputs == []
    targets = {n.target for n in res.gm.graph.nodes}
    assert aten.select_scatter.default in targets and aten.slice_scatter.default in targets


def test_split_and_unbind_items_written_without_grad():
    def f(x):
        y = x.clone()
        a, b = y.split(2, dim=1)
        b.fill_(7)
        r0, r1, r2 = y.unbind(0)
        r1.neg_()
        return y, a

    res = run_functional(f, torch.randn(3, 4))
    alias = res.output_aliases[1]
    assert alias.kind == "output" and alias.base == 0


def test_input_mutation_returned_for_the_epilogue():
    def f(x, buf):
        buf.add_(x.sum(0))
        x[:, 1:].relu_()
        return x + buf

    res = run_functional(f, torch.randn(2, 3), torch.zeros(3))
    assert res.mutated_inputs == [0, 1]


def test_index_put_copy_out_and_promotion():
    def f(x, idx, h):
        y = torch.zeros(5, 3)
        y[idx] = x
        y.copy_(y * 2)
        z = torch.empty(5, 3)
        torch.add(y, 1, out=z)
        h.add_(torch.ones(3))  # float16 += float32 keeps float16
        w = torch.ones(2, 3)
        w.copy_(x[0])  # broadcast copy
        return z, w

    run_functional(f, torch.randn(2, 3), torch.tensor([1, 3]), torch.zeros(3, dtype=torch.float16))


def test_batch_norm_running_stats_and_counter():
    def f(x, rm, rv, nbt):
        nbt.add_(1)
        return F.batch_norm(x, rm, rv, training=True, momentum=0.1)

    res = run_functional(f, torch.randn(4, 3), torch.zeros(3), torch.ones(3), torch.tensor(0))
    assert res.mutated_inputs == [1, 2, 3]
    assert aten._native_batch_norm_legit_functional.default in {
        n.target for n in res.gm.graph.nodes
    }


def test_output_aliases_inputs():
    res = functionalize(trace_aten(lambda x: (x, x.view(-1), x.t()[0]), [torch.randn(2, 3)]))
    assert res.output_aliases[0] == OutputAlias("input", 0, [])
    assert res.output_aliases[1].kind == "input" and len(res.output_aliases[1].chain) == 1
    assert [op for op, _, _ in res.output_aliases[2].chain] == [aten.t.default, aten.select.int]


def test_metadata_mutation_of_fresh_values():
    def f(x):
        y = x * 2
        y.unsqueeze_(0)
        y.add_(1)
        y.t_()
        return y, y.shape[0]

    res = run_functional(f, torch.randn(3))
    assert [n.meta["val"].shape for n in res.gm.graph.nodes if n.name == "t_"] == [(3, 1)]


def test_metadata_mutation_of_an_input_is_unsupported():
    def f(x):
        x.t_()
        return x + 1

    with pytest.raises(Unsupported, match="metadata-mutating"):
        functionalize(trace_aten(f, [torch.randn(2, 3)]))


def test_functional_variants():
    assert functional_variant(aten.add_.Tensor) is aten.add.Tensor
    assert functional_variant(aten.add.out) is aten.add.Tensor
    assert functional_variant(aten.bernoulli_.float) is aten.bernoulli.p
    assert functional_variant(aten.index_put_.default) is aten.index_put.default


def test_golden_text():
    def f(x):
        y = x * 2
        y[0].add_(1)
        x.mul_(3)
        return (y,)

    res = functionalize(trace_aten(f, [torch.randn(3, 4)]))
    assert format_graph(res.gm) == (
        "def forward(arg0_1):\n"
        "    # arg0_1: f32[3, 4]\n"
        "    mul = aten.mul.Tensor(arg0_1, 2)  # f32[3, 4]\n"
        "    select = aten.select.int(mul, 0, 0)  # f32[4]\n"
        "    add_ = aten.add.Tensor(select, 1)  # f32[4]\n"
        "    select_scatter = aten.select_scatter.default(mul, add_, 0, 0)  # f32[3, 4]\n"
        "    mul_ = aten.mul.Tensor(arg0_1, 3)  # f32[3, 4]\n"
        "    return (mul_, select_scatter)"
    )


def test_foreach_inplace_ops():
    def f(a, b, g):
        torch._foreach_add_([a, b], [g, g], alpha=-0.5)
        torch._foreach_mul_([a, b], 2.0)
        return (a + b,)

    res = run_functional(f, torch.randn(3), torch.randn(3), torch.randn(3))
    assert res.mutated_inputs == [0, 1]


@pytest.mark.parametrize(
    "mutate",
    [
        lambda y: y.transpose_(0, 1),
        lambda y: y.t_(),
        lambda y: y.swapaxes_(0, 1),
        lambda y: y.swapdims_(1, 0),
        lambda y: y.unsqueeze_(1).squeeze_(1),
        lambda y: y.unsqueeze_(0).squeeze_(),
        lambda y: y.unsqueeze_(2).squeeze_([2]),
        lambda y: y.as_strided_((3, 2), (1, 3)),
    ],
    ids=[
        "transpose_",
        "t_",
        "swapaxes_",
        "swapdims_",
        "squeeze_dim",
        "squeeze_",
        "squeeze_dims",
        "as_strided_",
    ],
)
def test_inplace_view_ops_on_fresh_values(mutate):
    """Each in-place view op on a fresh value becomes its view twin (transpose_ is transpose.int)."""

    def f(x):
        y = x * 2
        mutate(y)
        return y + 1, y, y.shape[0]

    res = run_functional(f, torch.randn(2, 3))
    assert not [n for n in res.gm.graph.nodes if str(n.target).endswith("_.default")]
