"""Floats computed from symbolic sizes (batch norm's `1 / n` and `n / (n - 1)`) are graph values:
`operator.truediv` nodes of size nodes, recomputed by the backward from saved int sizes
(Note [Tracer: float sizes], Note [Partitioner: saved floats], Note [Shapes: float sizes])."""

import operator

import pytest
import sympy
import torch
import torch.nn.functional as F

import kiln
from kiln import logs
from kiln.autograd.aot import aot_autograd
from kiln.autograd.partition import min_cut_rematerialization_partition
from kiln.backend.decompositions import decomposition_table
from kiln.symbolic.shape_env import ShapeEnv, to_torch


@pytest.fixture(autouse=True)
def _reset():
    kiln.reset()
    logs.counters.clear()
    yield
    kiln.reset()


def test_floor_of_an_exact_float_is_a_symbolic_size():
    env = ShapeEnv()
    s = to_torch(env.create_size(10, "x.size()[0]"))
    half = s * 1.5  # a SymFloat
    assert str(half.node.expr) == "3*s0/2"
    assert str(to_torch(half.node.floor()).node.expr) == "floor(3*s0/2)"
    assert str((s / (s - 1)).node.expr) == "s0/(s0 - 1)"
    assert env.guards == []
    # 0.1 is no small dyadic: flooring it specialises the size
    assert half.node.wrap_float(0.1).kind == "float"
    third = s * 0.1
    assert third.node.expr.has(sympy.Float)
    assert int(third.node.floor().expr) == 1
    assert {str(k): v for k, v in env.specialised().items()} == {"s0": 10}


class _Recorder:
    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward


def test_batch_norm_training_float_sizes_are_graph_values():
    rec = _Recorder()
    backend = aot_autograd(
        rec,
        partition_fn=min_cut_rematerialization_partition,
        decompositions=decomposition_table(),
    )
    bn = torch.nn.BatchNorm2d(3)
    ref = torch.nn.BatchNorm2d(3)

    def f(x):
        return F.relu(bn(x))

    compiled = kiln.compile(f, backend=backend, dynamic=True)
    for b, h in [(2, 5), (4, 7), (3, 9)]:
        x = torch.randn(b, 3, h, h + 1)
        xc, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
        out, expected = compiled(xc), F.relu(ref(xr))
        torch.testing.assert_close(out, expected)
        out.sum().backward()
        expected.sum().backward()
        torch.testing.assert_close(xc.grad, xr.grad)
        torch.testing.assert_close(bn.weight.grad, ref.weight.grad)
        torch.testing.assert_close(bn.running_var, ref.running_var)
        torch.testing.assert_close(bn.running_mean, ref.running_mean)
    assert logs.counters["frames"]["total"] == 1
    fw, bw = rec.graphs
    for gm in (fw, bw):
        divs = [n for n in gm.graph.nodes if n.target is operator.truediv]
        assert divs and all(isinstance(n.meta["val"], torch.SymFloat) for n in divs)
    # the backward receives ints only (floats are recomputed from them)
    for ph in bw.graph.nodes:
        if ph.op == "placeholder":
            assert not isinstance(ph.meta.get("val"), torch.SymFloat)
