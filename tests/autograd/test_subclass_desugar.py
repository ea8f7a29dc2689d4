"""AOT autograd desugars wrapper-subclass inputs into their inner tensors (Note [AOT: wrapper
subclasses]): the ATen graph sees plain tensors, the runtime wrapper rebuilds subclass outputs."""

import torch

import kiln
from kiln.autograd.aot import aot_autograd, nop
from kiln.autograd.subclasses import Desugared
from kiln.symbolic.fake import ProxyTensor
from tests.frontend.subclass_helpers import Pair, Scaled, pair


def _recording_backend():
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return nop(gm, example_inputs)

    return aot_autograd(fw_compiler=record), graphs


def _placeholder_vals(gm):
    return [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]


def test_the_aten_graph_takes_the_inner_tensors():
    def fn(x, y):
        return x * y + 1

    backend, graphs = _recording_backend()
    x, y = pair(), torch.randn(4)
    kiln.reset()
    out = kiln.compile(fn, backend=backend, fullgraph=True)(x, y)
    want = fn(x, y)
    assert type(out) is Pair
    torch.testing.assert_close(out.left, want.left)
    torch.testing.assert_close(out.right, want.right)
    (gm,) = graphs
    vals = _placeholder_vals(gm)
    assert len(vals) == 3  # left, right, y
    assert all(type(v) is ProxyTensor for v in vals)
    outs = gm.graph.output_node().args[0]
    assert len(outs) == 2  # the two halves of the result
    assert {n.target for n in gm.graph.nodes if n.op == "call_function"} == {
        torch.ops.aten.mul.Tensor,
        torch.ops.aten.add.Tensor,
    }


def test_the_subclass_dispatch_runs_inside_the_trace():
    def fn(x):
        return x + 1

    backend, graphs = _recording_backend()
    x = Scaled(torch.randn(4), 4.0)
    kiln.reset()
    out = kiln.compile(fn, backend=backend, fullgraph=True)(x)
    assert type(out) is Scaled and out.scale == 4.0
    torch.testing.assert_close(out.value(), fn(x).value())
    (gm,) = graphs
    ops = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    # Scaled's own dispatch: data * scale, the op, / scale
    assert ops == [torch.ops.aten.mul.Tensor, torch.ops.aten.add.Tensor, torch.ops.aten.div.Tensor]


def test_an_input_returned_is_the_input_itself():
    def fn(x):
        return x, x.sin()

    x = pair()
    for backend in ("aot_eager", "kiln"):
        kiln.reset()
        got = kiln.compile(fn, backend=backend, fullgraph=True)(x)
        assert got[0] is x
        assert type(got[1]) is Pair
        torch.testing.assert_close(got[1].right, x.right.sin())


def _traced(fn):
    return torch.fx.symbolic_trace(fn)


def test_inference_is_desugared_training_runs_as_traced():
    gm = _traced(lambda x: (x * 2,))
    plain = Pair(torch.randn(3), torch.randn(3))
    grad = Pair(torch.randn(3), torch.randn(3), requires_grad=True)
    backend = aot_autograd(fw_compiler=nop)
    assert isinstance(backend(gm, [plain]), Desugared)
    assert backend(gm, [grad]) == gm.forward  # (the frontend's graph, as backend eager)
    with torch.no_grad():
        assert isinstance(backend(gm, [grad]), Desugared)
    out = backend(gm, [grad])(grad)[0]
    out.backward(Pair(torch.ones(3), torch.ones(3)))
    torch.testing.assert_close(grad.grad.left, torch.full((3,), 2.0))
