"""Training graphs with 2D convolutions: activations stay channels-last from the forward's
convolutions through the saved tensors to the backward's weight gradients (Note [AOT: saved
activations keep their layout]); results equal eager's."""

import copy

import pytest
import torch
import torch.nn as nn

import kiln
from kiln.autograd.aot_module import aot_module
from kiln.backend import compile_fx as kc
from kiln.backend.codegen.wrapper import rt
from kiln.backend.decompositions import DECOMPOSITIONS
from kiln_bench.models import build_resnet

CL = torch.channels_last


def _recording_compiler(compiled):
    def compiler(gm, example_inputs):
        out = kc.compile_aten_graph(gm, example_inputs)
        compiled.append(out)
        return out

    return compiler


def _train_step(model, fn, x):
    out = fn(x)
    loss = out.square().mean()
    loss.backward()
    return out, loss


def _strides(t):
    """Strides of the dims that have more than one element (the others do not matter)."""
    return [st for n, st in zip(t.shape, t.stride()) if n > 1]


def _assert_same_step(model, ref, out, ref_out, loss, ref_loss):
    torch.testing.assert_close(out, ref_out, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(loss, ref_loss, atol=1e-5, rtol=1e-4)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-3, msg=name)
        assert _strides(p.grad) == _strides(q.grad), name
    for (name, b), c in zip(model.named_buffers(), ref.buffers()):
        torch.testing.assert_close(b, c, atol=1e-5, rtol=1e-4, msg=name)


def _conv_net():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1, bias=False),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 16, 3, stride=2, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 8, 1),
    )


def test_saved_activations_stay_channels_last(monkeypatch):
    """The backward reads the forward's NHWC activations as they are: no layout copy at run time."""
    model, ref = _conv_net(), None
    ref = copy.deepcopy(model)
    compiled = []
    fn = aot_module(model, _recording_compiler(compiled), decompositions=DECOMPOSITIONS)
    x = torch.randn(4, 3, 12, 12)
    out, loss = _train_step(model, fn, x)
    ref_out, ref_loss = _train_step(ref, ref, x)
    _assert_same_step(model, ref, out, ref_out, loss, ref_loss)

    fw, bw = compiled
    assert all(isinstance(c, kc.CompiledGraph) for c in compiled)
    # saved conv outputs and activations are channels-last (C has stride 1; the saved weights
    # and the graph's input are the caller's tensors, as they are)
    saved_cl = [s for s in fw.output_strides if s is not None and len(s) == 4 and s[1] == 1]
    assert len(saved_cl) >= 3, fw.output_strides
    # the user-visible output keeps eager's (contiguous) strides
    assert out.stride() == ref_out.stride()

    fixes = []
    real_fix = rt.fix

    def counting_fix(t, size, stride):
        res = real_fix(t, size, stride)
        if res is not t:
            fixes.append((tuple(size), tuple(stride)))
        return res

    monkeypatch.setattr(rt, "fix", staticmethod(counting_fix))
    model.zero_grad(set_to_none=True)
    ref.zero_grad(set_to_none=True)
    out, loss = _train_step(model, fn, x)
    ref_out, ref_loss = _train_step(ref, ref, x)
    _assert_same_step(model, ref, out, ref_out, loss, ref_loss)
    assert fixes == [], fixes


def test_resnet_training_step_parity():
    model, (x,), loss_fn = build_resnet("cpu", torch.float32, batch=4)
    model.train()
    ref = copy.deepcopy(model)
    fn = kiln.compile(model, backend="kiln")
    for _ in range(2):  # the second step runs the cached graphs
        model.zero_grad(set_to_none=True)
        ref.zero_grad(set_to_none=True)
        out = fn(x)
        loss = loss_fn(out)
        loss.backward()
        ref_out = ref(x)
        ref_loss = loss_fn(ref_out)
        ref_loss.backward()
        _assert_same_step(model, ref, out, ref_out, loss, ref_loss)


@pytest.mark.parametrize("input_layout", ["contiguous", "channels_last"])
def test_input_grad_has_eager_strides(input_layout):
    """A gradient flowing back to a graph input (a backward output) gets eager's strides."""
    torch.manual_seed(0)
    conv = nn.Conv2d(4, 8, 3, padding=1)
    x = torch.randn(2, 4, 9, 9)
    if input_layout == "channels_last":
        x = x.to(memory_format=CL)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    kiln.reset()
    fn = kiln.compile(lambda t: torch.relu(conv(t)) * 2, backend="kiln")
    fn(x1).sum().backward()
    (torch.relu(conv(x2)) * 2).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, atol=1e-5, rtol=1e-4)
    assert _strides(x1.grad) == _strides(x2.grad)


def test_channels_last_off_keeps_contiguous_saved(monkeypatch):
    from kiln import config

    monkeypatch.setattr(config, "conv_channels_last", False)
    model = _conv_net()
    compiled = []
    fn = aot_module(model, _recording_compiler(compiled), decompositions=DECOMPOSITIONS)
    _train_step(model, fn, torch.randn(2, 3, 8, 8))
    saved_4d = [s for s in compiled[0].output_strides[1:] if s is not None and len(s) == 4]
    assert saved_4d and all(s[-1] == 1 for s in saved_4d), saved_4d
