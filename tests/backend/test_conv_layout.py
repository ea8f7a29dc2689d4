"""Graphs with 2D convolutions run them channels-last; outputs keep eager's strides."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln
from kiln.autograd.aot_module import aot_module
from kiln.autograd.aten_tracer import trace_aten
from kiln.backend import compile_fx as kc
from kiln.backend.decompositions import DECOMPOSITIONS
from kiln.backend.ir import ExternBuffer
from kiln_bench.models import build_resnet


def _conv_layouts(fn, inputs):
    """Strides of the convolution outputs kiln lays out for fn's graph."""
    gm = trace_aten(fn, inputs, decompositions=DECOMPOSITIONS)
    graph = kc.lower_and_generate(gm, inputs)[0]
    return [
        tuple(int(s) for s in b.layout.stride)
        for b in graph.buffers.values()
        if isinstance(b, ExternBuffer) and b.kernel.op == torch.ops.aten.convolution.default
    ]


def _check(fn, inputs):
    gm = trace_aten(fn, inputs, decompositions=DECOMPOSITIONS)
    compiled = kc.compile_aten_graph(gm, inputs)
    assert isinstance(compiled, kc.CompiledGraph), "graph fell back to eager"
    got, want = compiled(*inputs), fn(*inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)
        assert g.stride() == w.stride(), (g.stride(), w.stride())
    return compiled


def _conv_bn_relu(x, w, b, mean, var, gamma, beta):
    y = F.conv2d(x, w, b, padding=1)
    return (torch.relu(F.batch_norm(y, mean, var, gamma, beta, False)),)


def _inputs(n=2, c=3, k=8, hw=10):
    torch.manual_seed(0)
    return [
        torch.randn(n, c, hw, hw),
        torch.randn(k, c, 3, 3),
        torch.randn(k),
        torch.randn(k),
        torch.rand(k) + 0.5,
        torch.randn(k),
        torch.randn(k),
    ]


def test_conv_bn_relu_channels_last_inside_eager_strides_out():
    inputs = _inputs()
    with torch.no_grad():
        _check(_conv_bn_relu, inputs)
        assert _conv_layouts(_conv_bn_relu, inputs) == [(800, 1, 80, 8)]


def test_graphs_compiled_under_grad_run_channels_last_too():
    """Graph outputs keep eager's strides whatever the grad mode (only a training forward's
    saved activations may keep another layout: test_conv_training.py)."""
    inputs = _inputs()
    with torch.enable_grad():
        _check(_conv_bn_relu, inputs)
        assert _conv_layouts(_conv_bn_relu, inputs) == [(800, 1, 80, 8)]


def _residual(x, w1, w2, w3):
    a = torch.relu(F.conv2d(x, w1, padding=1))
    b = F.conv2d(a, w2, padding=1)
    out = torch.relu(b + x)
    # intermediate outputs (a conv output, a permuted and a flattened view) keep eager's strides
    return out, b, out.permute(0, 2, 3, 1), out.flatten(1), F.conv2d(out, w3).mean((2, 3))


def test_residual_block_outputs():
    torch.manual_seed(0)
    inputs = [torch.randn(2, 8, 6, 6), *(torch.randn(8, 8, 3, 3) for _ in range(2))]
    inputs.append(torch.randn(4, 8, 1, 1))
    with torch.no_grad():
        _check(_residual, inputs)


def test_resnet_inference_parity():
    model, inputs, _ = build_resnet("cpu", torch.float32, batch=2)
    model.eval()
    compiled = aot_module(model, kc.compile_aten_graph, decompositions=DECOMPOSITIONS)
    with torch.no_grad():
        want = model(*inputs)
        got = compiled(*inputs)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert got.stride() == want.stride()


def test_conv_channels_last_setting_off(monkeypatch):
    from kiln import config

    monkeypatch.setattr(config, "conv_channels_last", False)
    with torch.no_grad():
        assert _conv_layouts(_conv_bn_relu, _inputs()) == [(800, 100, 10, 1)]


def test_module_conv_bn_relu_eval():
    torch.manual_seed(0)
    mod = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()).eval()
    x = torch.randn(2, 3, 9, 9)
    compiled = aot_module(mod, kc.compile_aten_graph, decompositions=DECOMPOSITIONS)
    with torch.no_grad():
        want, got = mod(x), compiled(x)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert got.stride() == want.stride()


@pytest.mark.parametrize("grad", [False, True])
def test_channels_last_input_gives_eager_strides(grad):
    """CPU convolution answers channels-last for a channels-last input (the meta kernel does not)."""
    kiln.reset()
    conv = torch.nn.Conv2d(3, 8, 3)
    x = torch.randn(2, 3, 10, 10).to(memory_format=torch.channels_last).requires_grad_(grad)
    with torch.set_grad_enabled(grad):
        out, ref = kiln.compile(conv, backend="kiln")(x), conv(x)
    assert out.stride() == ref.stride()
    torch.testing.assert_close(out, ref)


def test_weights_converted_once_and_again_when_changed():
    """A graph-input weight's channels-last copy is kept while the weight is unchanged; an
    in-place update, a new `.data` or another tensor gives a fresh copy (results = eager)."""
    from kiln.backend.codegen.wrapper import rt

    torch.manual_seed(0)
    conv = nn.Conv2d(3, 8, 3, padding=1)
    x = torch.randn(2, 3, 9, 9)
    compiled = aot_module(conv, kc.compile_aten_graph, decompositions=DECOMPOSITIONS)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), conv(x), atol=1e-5, rtol=1e-5)
        first = rt._channels_last.get(conv.weight)[2]
        compiled(x)
        assert rt._channels_last.get(conv.weight)[2] is first  # kept
        conv.weight.mul_(2)  # in place: the version counter moves
        torch.testing.assert_close(compiled(x), conv(x), atol=1e-5, rtol=1e-5)
        assert rt._channels_last.get(conv.weight)[2] is not first
        conv.weight.data = torch.randn(8, 3, 3, 3)  # new memory
        torch.testing.assert_close(compiled(x), conv(x), atol=1e-5, rtol=1e-5)
    with torch.inference_mode():  # inference tensors have no version counter: never kept
        w = torch.randn(8, 3, 3, 3)
        xi = torch.randn(2, 3, 9, 9)
        want = F.conv2d(xi, w, padding=1)
        gm = trace_aten(
            lambda a, b: (F.conv2d(a, b, padding=1),), [xi, w], decompositions=DECOMPOSITIONS
        )
        got = kc.compile_aten_graph(gm, [xi, w])(xi, w)[0]
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def _cudnn_bn_relu(x, w, mean, var, gamma, beta):
    y = F.conv2d(x, w, padding=1)
    y = torch.ops.aten.cudnn_batch_norm(y, gamma, beta, mean, var, False, 0.1, 1e-5)[0]
    return (torch.relu(y),)


def test_cudnn_batch_norm_is_fused_like_native():
    """batch_norm on CUDA inputs traces as cudnn_batch_norm: decomposed as native_batch_norm is
    (it used to stay an extern call whose channels-last output was copied to NCHW every call)."""
    inputs = [
        torch.randn(2, 3, 8, 8),
        torch.randn(4, 3, 3, 3),
        torch.randn(4),
        torch.rand(4) + 0.5,
        torch.randn(4),
        torch.randn(4),
    ]
    gm = trace_aten(_cudnn_bn_relu, inputs, decompositions=DECOMPOSITIONS)
    assert "cudnn_batch_norm" not in gm.code
    graph = kc.lower_and_generate(gm, inputs)[0]
    externs = [b.kernel.op for b in graph.buffers.values() if isinstance(b, ExternBuffer)]
    assert [op for op in externs if not isinstance(op, str)] == [torch.ops.aten.convolution.default]

    def native(x, w, mean, var, gamma, beta):
        y = F.conv2d(x, w, padding=1)
        y = torch.ops.aten.native_batch_norm(y, gamma, beta, mean, var, False, 0.1, 1e-5)[0]
        return (torch.relu(y),)

    compiled = kc.compile_aten_graph(gm, inputs)
    torch.testing.assert_close(compiled(*inputs)[0], native(*inputs)[0], atol=1e-4, rtol=1e-4)


def test_cudnn_batch_norm_training_updates_running_stats():
    """Training-mode cudnn_batch_norm: output, gradients and the running stats as eager's
    native_batch_norm gives them."""

    def run(op, compile_):
        torch.manual_seed(0)
        x = torch.randn(4, 3, 5, 5, requires_grad=True)
        gamma, beta = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
        mean, var = torch.zeros(3), torch.ones(3)

        def f(x, gamma, beta, mean, var):
            return op(x, gamma, beta, mean, var, True, 0.1, 1e-5)[0] * 2

        fn = kiln.compile(f, backend="kiln") if compile_ else f
        fn(x, gamma, beta, mean, var).square().sum().backward()
        return [x.grad, gamma.grad, beta.grad, mean, var]

    got = run(torch.ops.aten.cudnn_batch_norm, True)
    want = run(torch.ops.aten.native_batch_norm, False)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)
