"""AOT autograd desugars wrapper-subclass inputs into their inner tensors (Note [AOT: wrapper
subclasses]): the ATen graph sees plain tensors, the runtime wrapper rebuilds subclass outputs."""

import pytest
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


def test_what_runs_as_traced():
    gm = _traced(lambda x, w: (x * w,))
    plain = Pair(torch.randn(3), torch.randn(3))
    grad = Pair(torch.randn(3), torch.randn(3), requires_grad=True)
    w = torch.randn(3, requires_grad=True)
    backend = aot_autograd(fw_compiler=nop)
    assert isinstance(backend(gm, [plain, w.detach()]), Desugared)
    assert isinstance(backend(gm, [grad, w.detach()]), Desugared)
    # a plain input that requires grad: its gradient may be a subclass; the graph runs as traced
    assert backend(gm, [grad, w]) == gm.forward
    out = backend(gm, [grad, w])(grad, w)[0]
    out.backward(Pair(torch.ones(3), torch.ones(3)))
    torch.testing.assert_close(grad.grad.left, w.detach())


def _training_backend():
    graphs = {}

    def compiler(name):
        def compile(gm, example_inputs):
            graphs[name] = gm
            return nop(gm, example_inputs)

        return compile

    backend = aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"))
    return backend, graphs


@pytest.mark.parametrize("backend", ["aot_eager", "kiln", "recording"])
def test_training_is_desugared(backend):
    def fn(x, y):
        return (x * y).sin() + x

    graphs = None
    if backend == "recording":
        backend, graphs = _training_backend()
    a, b, y = torch.randn(4), torch.randn(4), torch.randn(4)
    x, xe = Pair(a, b, requires_grad=True), Pair(a, b, requires_grad=True)
    kiln.reset()
    got, want = kiln.compile(fn, backend=backend, fullgraph=True)(x, y), fn(xe, y)
    assert type(got) is Pair and got.requires_grad
    torch.testing.assert_close(got.left, want.left)
    g = Pair(torch.randn(4), torch.randn(4))
    got.backward(g)
    want.backward(g)
    assert type(x.grad) is Pair
    torch.testing.assert_close(x.grad.left, xe.grad.left)
    torch.testing.assert_close(x.grad.right, xe.grad.right)
    if graphs is not None:  # the compiled graphs are of the inner tensors
        fw_inputs = _placeholder_vals(graphs["forward"])
        assert len(fw_inputs) == 3 and all(type(v) is ProxyTensor for v in fw_inputs)
        bw_outputs = graphs["backward"].graph.output_node().args[0]
        assert len(bw_outputs) == 2  # the gradients of the two halves


@pytest.mark.parametrize("backend", ["aot_eager", "kiln"])
def test_a_gradient_unlike_the_traced_tangent_recomputes(backend):
    def fn(x, y):
        return (x * y).exp()

    d, y = torch.randn(4), torch.randn(4)
    x, xe = Scaled(d, 2.0), Scaled(d, 2.0)
    x.requires_grad_()
    xe.requires_grad_()
    kiln.reset()
    compiled = kiln.compile(fn, backend=backend, fullgraph=True)
    for scale in (2.0, 0.25):  # like the output's ctx (the compiled backward), and unlike it
        x.grad = xe.grad = None
        got, want = compiled(x, y), fn(xe, y)
        g = Scaled(torch.randn(4), scale)
        got.backward(g)
        want.backward(g)
        assert type(x.grad) is Scaled and x.grad.scale == xe.grad.scale
        torch.testing.assert_close(x.grad.value(), xe.grad.value())
