"""Training and inference parity with eager when the ATen graphs are compiled by kiln."""

import pytest
import torch
import torch.nn as nn

from kiln.autograd.aot_module import aot_module
from kiln.backend import compile_fx as kc
from kiln.backend.decompositions import DECOMPOSITIONS
from tests.autograd.aot_helpers import check_module_parity


def kiln_module(mod):
    return aot_module(mod, kc.compile_aten_graph, decompositions=DECOMPOSITIONS)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.ln = nn.Linear(16, 32), nn.Linear(32, 8), nn.LayerNorm(32)

    def forward(self, x):
        return self.l2(torch.nn.functional.gelu(self.ln(self.l1(x)))).softmax(-1)


class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x))).mean((2, 3))


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.out = nn.Linear(16, 48), nn.Linear(16, 16)

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 5, 3, 2, 8).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-1, -2) / 8**0.5).softmax(-1)
        return self.out((att @ v).transpose(1, 2).reshape(2, 5, 16))


@pytest.mark.parametrize(
    "make,inp",
    [
        (MLP, lambda: torch.randn(4, 16)),
        (ConvBN, lambda: torch.randn(2, 3, 6, 6)),
        (Attention, lambda: torch.randn(2, 5, 16)),
    ],
    ids=["mlp", "conv_bn", "attention"],
)
def test_training_parity(make, inp):
    torch.manual_seed(0)
    check_module_parity(make(), inp(), compile_fn=kiln_module)


def test_inference_parity_no_grad():
    torch.manual_seed(0)
    mod = MLP().eval()
    x = torch.randn(4, 16)
    compiled = kiln_module(mod)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), mod(x))


def test_kiln_backend_is_registered():
    from kiln.api import lookup_backend

    assert lookup_backend("kiln") is kc.kiln_backend


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_hf_training_parity(name):
    pytest.importorskip("transformers")
    import sys

    sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/autograd")
    from tests.autograd import test_hf_models as hf

    torch.manual_seed(0)
    model, inputs = getattr(hf, name)()
    check_module_parity(model, rtol=1e-4, atol=1e-4, compile_fn=kiln_module, **inputs)


def test_kiln_compile_end_to_end_training():
    import kiln
    from kiln import logs

    before = sum(logs.counters["backend"][k] for k in ("graphs_compiled", "graph_cache_hits"))
    torch.manual_seed(0)
    mod = MLP()
    ref = MLP()
    ref.load_state_dict(mod.state_dict())
    compiled = kiln.compile(mod, backend="kiln")
    x = torch.randn(4, 16)
    out, exp = compiled(x), ref(x)
    torch.testing.assert_close(out, exp)
    out.pow(2).sum().backward()
    exp.pow(2).sum().backward()
    for p, q in zip(mod.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    after = sum(logs.counters["backend"][k] for k in ("graphs_compiled", "graph_cache_hits"))
    assert after >= before + 2  # forward and backward graphs ran as kiln kernels
