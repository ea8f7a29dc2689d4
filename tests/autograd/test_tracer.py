"""The ATen tracer: graphs of aten overloads with fake vals; running the graph reproduces eager."""

import operator

import pytest
import torch
import torch.nn.functional as F

from kiln.autograd.aten_tracer import Tracer, format_graph, trace_aten
from kiln.exc import Unsupported
from kiln.symbolic.fake import ProxyTensor

aten = torch.ops.aten


def check(fn, *inputs, rtol=1e-5, atol=1e-5, decompositions=None):
    """Trace fn, check the graph is all ATen with fake vals, run it on real inputs vs eager."""
    gm = trace_aten(fn, inputs, decompositions=decompositions)
    for n in gm.graph.nodes:
        if n.op == "call_function":
            assert isinstance(n.target, torch._ops.OpOverload) or n.target is operator.getitem, n
        if n.op in ("call_function", "placeholder", "get_attr"):
            assert "val" in n.meta, n
            val = n.meta["val"]
            for v in val if isinstance(val, (tuple, list)) else [val]:
                if isinstance(v, torch.Tensor):
                    assert isinstance(v, ProxyTensor)
                    assert v.device == torch.device("cpu")
    expected = fn(*inputs)
    got = gm(*inputs)
    exp_flat = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    assert len(got) == len(exp_flat)
    for g, e in zip(got, exp_flat):
        if isinstance(e, torch.Tensor):
            assert g.shape == e.shape and g.dtype == e.dtype
            torch.testing.assert_close(g, e, rtol=rtol, atol=atol)
        else:
            assert g == e
    return gm


def targets(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_two_cosines_graph_text():
    gm = trace_aten(lambda x: torch.cos(torch.cos(x)), [torch.randn(5, 5)])
    assert targets(gm) == [aten.cos.default, aten.cos.default]
    text = format_graph(gm)
    assert "aten.cos.default(arg0_1)  # f32[5, 5]" in text
    assert "cos = torch.ops.aten.cos.default(arg0_1)" in gm.code


def test_pointwise_scalars_and_promotion():
    def f(x, i):
        return x * 2 + 1, (x + i).relu(), x.sigmoid() - torch.tanh(x), i * 3, (i / 2).exp()

    gm = check(f, torch.randn(3, 4), torch.arange(12).view(3, 4))
    vals = [n.meta["val"] for n in gm.graph.nodes if n.op == "call_function"]
    assert any(v.dtype == torch.int64 for v in vals)


def test_reductions_and_views():
    def f(x):
        y = x.view(4, 6).t().contiguous()
        return x.sum(), x.mean(1), x.amax(-1), y[1:, ::2], x.permute(2, 0, 1).reshape(-1), x[0, 1]

    check(f, torch.randn(2, 3, 4))


def test_matmul_softmax_layer_norm():
    def f(x, w, b):
        h = F.linear(x, w, b)
        return h.softmax(-1), F.layer_norm(h, (8,)), torch.bmm(x, x.transpose(1, 2))

    check(f, torch.randn(2, 3, 5), torch.randn(8, 5), torch.randn(8))


def test_conv_batchnorm_eval_and_train():
    torch.manual_seed(0)
    conv, bn = torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)
    bn.eval()
    check(lambda x: bn(conv(x)), torch.randn(2, 3, 8, 8), atol=1e-4, rtol=1e-4)
    bn.train()
    gm = trace_aten(lambda x: bn(conv(x)), [torch.randn(2, 3, 8, 8)])
    assert any("batch_norm" in str(t) for t in targets(gm))


def test_embedding_and_index_ops():
    emb = torch.nn.Embedding(10, 4)

    def f(idx, x):
        y = x.clone()
        y[idx % 3] = 0.5
        return (
            emb(idx),
            x[idx % 3],
            torch.gather(x, 1, idx.view(2, 2) % 4),
            y,
            x.index_select(0, idx % 3),
        )

    check(f, torch.tensor([1, 2, 7, 3]), torch.randn(3, 4))


def test_factory_ops_record_real_device():
    def f(x):
        return x + torch.zeros(3) + torch.arange(3) + torch.ones_like(x) + torch.full((3,), 2.0)

    gm = check(f, torch.randn(3))
    zeros = [n for n in gm.graph.nodes if n.target == aten.zeros.default][0]
    assert zeros.kwargs["device"] == torch.device("cpu")
    assert zeros.meta["val"].device == torch.device("cpu")


def test_random_factory_shapes():
    gm = trace_aten(lambda x: x + torch.randn(4), [torch.randn(4)])
    assert aten.randn.default in targets(gm)
    assert gm(torch.zeros(4))[0].shape == (4,)


def test_closure_tensor_becomes_constant():
    c = torch.randn(3)
    gm = check(lambda x: x * c + torch.tensor([1.0, 2.0, 3.0]), torch.randn(3))
    assert sum(1 for n in gm.graph.nodes if n.op == "get_attr") == 2


def test_inplace_recorded_faithfully():
    def f(x):
        y = x * 1
        y.add_(1)
        y[0].mul_(3)
        return (y,)

    gm = check(f, torch.randn(3, 2))
    assert aten.add_.Tensor in targets(gm)


def test_decompositions_applied():
    def silu(x):
        return x * torch.sigmoid(x)

    gm = check(lambda x: F.silu(x), torch.randn(4), decompositions={aten.silu.default: silu})
    assert targets(gm) == [aten.sigmoid.default, aten.mul.Tensor]


def test_custom_op_with_fake_kernel():
    @torch.library.custom_op("kiln_test::mysin", mutates_args=())
    def mysin(x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x)

    @mysin.register_fake
    def _(x):
        return torch.empty_like(x)

    gm = check(lambda x: mysin(x) + 1, torch.randn(3))
    assert torch.ops.kiln_test.mysin.default in targets(gm)


def test_torch_level_graph_module():
    def f(x, y):
        return torch.sin(x) + y.view(-1).sum() * 2, x.t()

    gm0 = torch.fx.symbolic_trace(f)
    gm = check(gm0, torch.randn(2, 3), torch.randn(3, 2))
    assert aten.sin.default in targets(gm)


def test_item_is_unsupported():
    with pytest.raises(Unsupported, match="data-dependent"):
        trace_aten(lambda x: x.sum().item(), [torch.randn(3)])


def test_fake_tensor_outside_trace():
    gm = trace_aten(lambda x: x @ x.t(), [torch.randn(3, 5)])
    val = [n for n in gm.graph.nodes if n.op == "call_function"][-1].meta["val"]
    assert isinstance(val, ProxyTensor) and val.shape == (3, 3) and val.device.type == "cpu"
    out = torch.empty_like(val) + val
    assert isinstance(out, ProxyTensor) and out.shape == (3, 3) and out.stride() == (3, 1)
    with pytest.raises(Exception):  # noqa: B017 - no data to read
        val.tolist()


def test_boolean_mask_assignment_becomes_masked_fill():
    def f(x, m):
        y = x * 2
        y[m] = 0.5
        return (y,)

    gm = check(f, torch.randn(4, 5), torch.rand(4, 5) > 0.5)
    assert aten.masked_fill_.Tensor in targets(gm)
    assert aten.index_put_.default not in targets(gm)


def test_tensor_literal_is_fresh_each_call():
    def f(x):
        t = torch.tensor([1.0, 2.0, 3.0])
        t.add_(x)
        return (t,)

    from kiln.autograd.aot import aot_function, nop

    g = aot_function(f, nop)
    for _ in range(3):
        torch.testing.assert_close(g(torch.ones(3)), (torch.tensor([2.0, 3.0, 4.0]),))


def test_conjugate_bit_travels_with_the_traced_tensor():
    """A traced `_conj` view carries the conjugate bit as eager's does: hfft's backward conjugates
    twice and views the result as real (it failed: the proxy hid the bit from that composite)."""
    import kiln

    def grad_of_hfft(f, x):
        x = x.detach().requires_grad_()
        return torch.autograd.grad(f(x).sum(), x)[0]

    x = torch.randn(5, 6, 7)
    hfft = lambda x: torch.fft.hfft(x, n=10, dim=1, norm="ortho")  # noqa: E731
    for backend in ("aot_eager", "kiln"):
        compiled = kiln.compile(hfft, backend=backend)
        torch.testing.assert_close(grad_of_hfft(compiled, x), grad_of_hfft(hfft, x))


def test_negative_bit_travels_with_the_traced_tensor():
    z = torch.randn(4, dtype=torch.complex64)
    check(lambda z: z.conj().imag * 2 + z.conj().resolve_conj().real, z)


def test_is_compiling_flag_restored_after_overlapping_traces():
    """Two traces that overlap (two threads compiling at once) leave is_compiling() False and the
    saved-tensor hooks on after both end; each used to restore the values it saw, and the second
    saw the first's."""
    first, second = Tracer().tracing(), Tracer().tracing()
    first.__enter__()
    second.__enter__()
    assert torch.compiler.is_compiling()
    first.__exit__(None, None, None)
    assert torch.compiler.is_compiling()  # (the second trace still runs)
    second.__exit__(None, None, None)
    assert not torch.compiler.is_compiling()
    set_tracing = torch._C._autograd._saved_tensors_hooks_set_tracing
    assert set_tracing(False) is False  # (the user's saved-tensor hooks run again)
