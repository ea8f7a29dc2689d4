"""Partitioners on joint graphs: what is saved, what the backward recomputes, what it never does."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from kiln.autograd.aot import aot_function
from kiln.autograd.aot_module import aot_module
from kiln.autograd.partition import (
    default_partition,
    is_random,
    min_cut_rematerialization_partition,
    saved_bytes,
)

aten = torch.ops.aten
EXPENSIVE = {
    aten.mm.default,
    aten.addmm.default,
    aten.bmm.default,
    aten.convolution.default,
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    aten.native_layer_norm.default,
}


def graphs(fn, inputs, partition_fn, module=False):
    got = {}

    def fw(gm, ex):
        got["fw"] = gm
        return gm.forward

    def bw(gm, ex):
        got["bw"] = gm
        return gm.forward

    if module:
        out = aot_module(fn, fw, bw, partition_fn=partition_fn)(*inputs)
    else:
        out = aot_function(fn, fw, bw, partition_fn=partition_fn)(*inputs)
    out.sum().backward()
    return got["fw"], got["bw"]


def depends_on_tangent(node):
    seen, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "placeholder" and n.name.startswith("tangents"):
            return True
        stack.extend(n.all_input_nodes)
    return False


def block():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(16, 64), nn.LayerNorm(64), nn.GELU(), nn.Dropout(0.1), nn.Linear(64, 16)
    ).train()


def test_min_cut_saves_no_more_than_default():
    x = torch.randn(8, 16, requires_grad=True)
    fw_d, _ = graphs(block(), [x], default_partition, module=True)
    fw_m, _ = graphs(block(), [x], min_cut_rematerialization_partition, module=True)
    assert saved_bytes(fw_m) < saved_bytes(fw_d)


def test_min_cut_never_recomputes_expensive_or_random_ops():
    x = torch.randn(8, 16, requires_grad=True)
    fw, bw = graphs(block(), [x], min_cut_rematerialization_partition, module=True)
    for n in bw.graph.nodes:
        if n.op == "call_function":
            assert not is_random(n), n
            if n.target in EXPENSIVE:
                assert depends_on_tangent(n), f"{n} recomputed in the backward"
    assert any(is_random(n) for n in fw.graph.nodes)


def test_recomputes_pointwise_chain():
    def f(x):
        return torch.tanh(torch.sigmoid(x).exp() * 2)

    fw, bw = graphs(f, [torch.randn(64, requires_grad=True)], min_cut_rematerialization_partition)
    assert fw.meta["num_saved"] == 1
    assert aten.tanh.default in {n.target for n in bw.graph.nodes}  # recomputed from sigmoid


def test_saves_matmul_output_rather_than_recompute():
    def f(x, w):
        return F.relu(x @ w)

    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    fw, bw = graphs(f, [x, w], min_cut_rematerialization_partition)
    assert aten.mm.default in {n.target for n in fw.graph.nodes}
    assert [n for n in bw.graph.nodes if n.target is aten.mm.default] == [
        n for n in bw.graph.nodes if n.target is aten.mm.default and depends_on_tangent(n)
    ]
