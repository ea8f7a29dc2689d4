"""bf16/fp16 matmuls and convolutions on CPU computed in float32 (Note [CPU: low-precision
matmuls in float32]): results equal eager's within the dtype's rounding, float32 graphs untouched,
"native" leaves the ops as they are."""

import copy

import pytest
import torch

import kiln
from kiln.autograd.aten_tracer import trace_aten
from kiln.backend.compile_fx import compile_aten_graph
from kiln.backend.decomp_low_precision import RULES
from kiln.backend.decompositions import DECOMPOSITIONS


@pytest.fixture
def mode(monkeypatch):
    def set_mode(value):
        monkeypatch.setattr(kiln.config, "cpu_low_precision_matmul", value)

    set_mode("float32")  # the same on every CPU, native bfloat16 or not
    return set_mode


def compiled_with_rules(fn, inputs):
    gm = trace_aten(fn, inputs, decompositions={**DECOMPOSITIONS, **RULES})
    return gm, compile_aten_graph(gm, inputs)


def conv(x, w, b):
    return torch.nn.functional.conv2d(x, w, b, padding=1).relu()


CASES = {
    "mm": (lambda a, b: a @ b, [(16, 32), (32, 8)]),
    "addmm": (lambda c, a, b: torch.addmm(c, a, b), [(8,), (16, 32), (32, 8)]),
    "bmm": (lambda a, b: torch.bmm(a, b).sigmoid(), [(3, 16, 32), (3, 32, 8)]),
    "conv": (conv, [(2, 4, 8, 8), (6, 4, 3, 3), (6,)]),
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("name", list(CASES))
def test_computed_in_float32_equal_to_eager(mode, name, dtype):
    fn, shapes = CASES[name]
    torch.manual_seed(0)
    inputs = [torch.randn(s).to(dtype) for s in shapes]
    gm, compiled = compiled_with_rules(fn, inputs)
    widened = [
        n
        for n in gm.graph.nodes
        if n.target == torch.ops.prims.convert_element_type.default and n.args[1] == torch.float32
    ]
    assert len(widened) == len(inputs), gm.code  # every input widened once
    (got,) = compiled(*inputs)
    want = fn(*inputs)
    assert got.dtype == want.dtype == dtype
    torch.testing.assert_close(got, want)  # (the dtype's own tolerance)


def test_float32_graphs_are_untouched(mode):
    a, b = torch.randn(4, 8), torch.randn(8, 2)
    gm, _ = compiled_with_rules(lambda a, b: a @ b, [a, b])
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert targets == [torch.ops.aten.mm.default]


def test_native_leaves_the_ops(mode):
    mode("native")
    a, b = torch.randn(4, 8).bfloat16(), torch.randn(8, 2).bfloat16()
    gm, compiled = compiled_with_rules(lambda a, b: a @ b, [a, b])
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"] == [
        torch.ops.aten.mm.default
    ]
    torch.testing.assert_close(compiled(a, b)[0], a @ b)


def test_autocast_training_step_equal_to_eager(mode):
    # linear, conv and their backward under CPU autocast: outputs and every gradient
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 6 * 6, 10),
    )
    ref = copy.deepcopy(model)
    x = torch.randn(4, 3, 6, 6)
    compiled = kiln.compile(model)
    outs = []
    for m in (ref, compiled):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = m(x)
        out.float().pow(2).mean().backward()
        outs.append(out)
    assert outs[1].dtype == outs[0].dtype == torch.bfloat16
    torch.testing.assert_close(outs[1], outs[0])
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=2e-2, rtol=2e-2, msg=name)
