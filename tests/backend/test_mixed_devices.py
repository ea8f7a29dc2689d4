"""Graphs with CPU and CUDA tensors (Note [Backend: graphs on two devices]), without a GPU.

The ATen graphs are traced on fake CUDA tensors (our ProxyTensor carries any device), lowered and
generated; the tests read the generated kernels and wrapper: device copies and CPU work are ATen
calls, kernels read no CPU buffer (a 0-d CPU tensor only by value). Where the wrapper needs no GPU
once its "cuda" is read as "cpu", it also runs under Triton's interpreter against eager. The same
programs run on a GPU in tests/backend/test_cuda.py.
"""

import os
import re

import pytest
import torch

from kiln.autograd.aten_tracer import trace_aten
from kiln.backend import compile_fx, devices
from kiln.backend.decompositions import DECOMPOSITIONS
from kiln.backend.graph import GraphLowering, GraphNotSupported
from kiln.backend.ir import compile_scope
from kiln.backend.scheduler import ExternGroup, Group
from kiln.symbolic.fake import ProxyTensor

pytest.importorskip("triton")

aten = torch.ops.aten
interpreted = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="runs the kernels in Triton's interpreter"
)


def cuda(*shape, dtype=torch.float32, index=None):
    """A data-less tensor on a CUDA device (no GPU needed)."""
    meta = torch.empty(shape, dtype=dtype, device="meta")
    return ProxyTensor(meta, torch.device("cuda", index) if index is not None else "cuda")


def to_cuda(x):
    """`x.cuda()` as the ATen graph has it (traced without initialising CUDA)."""
    return aten._to_copy.default(x, device=torch.device("cuda"))


def generate(fn, inputs):
    """(gm, graph, groups, kernels, wrapper, extras) of fn traced on inputs."""
    gm = trace_aten(fn, inputs, decompositions=DECOMPOSITIONS)
    graph, groups, kernels, wrapper, extras, _ = compile_fx.lower_and_generate(gm, inputs)
    check_devices(graph, groups)
    return gm, graph, groups, kernels, wrapper, extras


def check_devices(graph, groups):
    """Kernels read and write only buffers of the main device (0-d CPU tensors by value)."""
    assert graph.device.type == "cuda"
    for g in groups:
        if not isinstance(g, Group):
            continue
        for n in g.nodes:
            assert not devices.foreign(n.buf.layout.device, graph.device), n.name
            for r in n.reads:
                buf = graph.buffers[r]
                on = not devices.foreign(buf.layout.device, graph.device)
                assert on or devices.reads_by_value(buf, graph.device), (n.name, r)


def externs(groups):
    return [str(g.kernel.op) for g in groups if isinstance(g, ExternGroup)]


def run_on_cpu(gm, graph, kernels, wrapper, extras, args):
    """The generated program run under Triton's interpreter with "cuda" read as "cpu"."""
    wrapper = wrapper.replace("'cuda'", "'cpu'")
    call = compile_fx._load(wrapper, kernels, graph.constants, gm, extras)
    return call(*args)


def test_cpu_scalar_is_a_kernel_argument_by_value():
    gm, graph, groups, kernels, wrapper, _ = generate(
        lambda x, s: x * s + 1, [cuda(64), torch.tensor(3.0)]
    )
    assert externs(groups) == []
    assert kernels.count("@triton.jit") == 1
    assert "tl.load(arg1" not in kernels  # the scalar is not read from (CPU) memory
    assert "+ arg1).to(tl.float32)" in kernels
    assert "kernel0(arg0, arg1.item(), buf0)" in wrapper
    assert re.search(r"device='cuda(:0)?'", wrapper)  # (cuda:0 where a GPU is present)


@interpreted
@pytest.mark.parametrize(
    "dtype,value",
    [(torch.float32, 2.5), (torch.int64, 3), (torch.bool, True), (torch.bfloat16, 1.5)],
)
def test_cpu_scalar_by_value_matches_eager(dtype, value):
    fn = lambda x, s: (x * s + 1).sin() + s  # noqa: E731
    s = torch.tensor(value, dtype=dtype)
    gm, graph, _, kernels, wrapper, extras = generate(fn, [cuda(64), s])
    x = torch.randn(64)
    (got,) = run_on_cpu(gm, graph, kernels, wrapper, extras, [x, s])
    torch.testing.assert_close(got, fn(x, s))


@pytest.mark.parametrize("xdtype", [torch.float64, torch.float32])
def test_float64_cpu_scalar_goes_as_its_bits(xdtype):
    """Triton passes floats as float32: a double CPU scalar (a lifted learning rate) goes as the
    int64 of its bits, bitcast back in the kernel: exact."""
    x, s = cuda(64, dtype=xdtype), torch.tensor(0.1, dtype=torch.float64)
    gm, graph, groups, kernels, wrapper, extras = generate(lambda x, s: (x * s).exp(), [x, s])
    assert externs(groups) == []
    assert "arg1.view(torch.int64).item()" in wrapper
    assert ".to(tl.float64, bitcast=True)" in kernels
    if os.environ.get("TRITON_INTERPRET") == "1":
        x = torch.randn(64, dtype=xdtype)
        for v in (0.1, 1e-300, -3.0, 0.0, float("inf")):
            s = torch.tensor(v, dtype=torch.float64)
            (got,) = run_on_cpu(gm, graph, kernels, wrapper, extras, [x, s])
            torch.testing.assert_close(got, (x * s).exp(), rtol=0, atol=0)


def test_cpu_result_is_a_device_copy_after_the_kernels():
    """`y.cpu()` at the end: a kernel on the GPU, then one ATen copy to the CPU."""
    _, graph, groups, _, wrapper, _ = generate(lambda x: (x.sin() * 2).cpu(), [cuda(8, 8)])
    assert isinstance(groups[0], Group) and externs(groups) == ["aten._to_copy.default"]
    assert "device=torch.device('cpu')" in wrapper
    (out,) = graph.outputs
    assert graph.buffers[out[1]].layout.device == torch.device("cpu")


def test_cpu_input_moved_to_the_device_first():
    """`x.to(w.device)` on a CPU input: an ATen copy, then kernels and the matmul on the GPU
    (`to` itself would initialise CUDA here: its ATen op is traced instead)."""
    fn = lambda x, w: (to_cuda(x) @ w).relu() + 1  # noqa: E731
    _, _, groups, kernels, wrapper, _ = generate(fn, [torch.randn(4, 8), cuda(8, 8)])
    ops = externs(groups)
    assert ops[0] == "aten._to_copy.default" and "aten.mm.out" in ops
    assert "device=torch.device('cuda')" in wrapper
    assert kernels.count("@triton.jit") == 1


def test_cpu_intermediates_stay_on_the_cpu():
    """Non-scalar CPU work in a CUDA graph runs as ATen calls on the CPU; the CUDA part fuses."""

    def fn(x, c):
        d = (c * 2 + 1).sum()  # CPU: a [4] tensor, then a 0-d one
        return (x.cos() * d).neg(), c.exp()

    _, graph, groups, kernels, wrapper, _ = generate(fn, [cuda(16), torch.randn(4)])
    assert kernels.count("@triton.jit") == 1
    assert len(externs(groups)) >= 3  # mul, add, sum (exp) on the CPU
    assert ".item()" in wrapper  # d is read by value
    devs = [graph.buffers[o[1]].layout.device for o in graph.outputs]
    assert devs[0].type == "cuda" and devs[1] == torch.device("cpu")


def test_cpu_matmul_in_a_cuda_graph_allocates_on_the_cpu():
    """An .out call on CPU tensors gets a CPU buffer, named so (the default device may be CUDA)."""
    fn = lambda x, c: x * (c @ c).sum()  # noqa: E731
    _, _, groups, _, wrapper, _ = generate(fn, [cuda(8), torch.randn(3, 3)])
    assert "aten.mm.out" in externs(groups)
    assert "dtype=torch.float32, device='cpu')" in wrapper


@interpreted
def test_optimizer_like_step_matches_eager():
    """An Adam-like update: a CPU step counter, its scalar arithmetic on the CPU, the update in
    one kernel reading the CPU scalars by value."""

    def fn(p, g, m, v, step):
        step = step + 1
        bc1 = 1 - 0.9**step
        bc2 = 1 - 0.999**step
        m = m * 0.9 + g * 0.1
        v = v * 0.999 + g * g * 0.001
        denom = (v.sqrt() / bc2**0.5) + 1e-8
        return p - (0.01 / bc1) * m / denom, m, v, step

    args = [torch.randn(32) for _ in range(3)] + [torch.rand(32), torch.tensor(2.0)]
    fakes = [cuda(32) for _ in range(4)] + [torch.tensor(2.0)]
    gm, graph, groups, kernels, wrapper, extras = generate(fn, fakes)
    for grp in groups:  # the scalar arithmetic runs on the CPU, the update is one kernel
        if isinstance(grp, ExternGroup):
            assert grp.kernel.outputs[0].layout.device == torch.device("cpu")
    assert kernels.count("@triton.jit") == 1 and wrapper.count(".item()") == 2
    assert graph.buffers[graph.outputs[3][1]].layout.device == torch.device("cpu")
    got = run_on_cpu(gm, graph, kernels, wrapper, extras, args)
    for g, w in zip(got, fn(*args)):
        torch.testing.assert_close(g, w)


def test_cpu_constant_in_a_cuda_graph():
    gm = trace_aten(lambda x: x + 1, [cuda(4)])
    gm.register_buffer("k", torch.tensor(5.0))
    out = next(n for n in gm.graph.nodes if n.op == "output")
    with gm.graph.inserting_before(out):
        k = gm.graph.get_attr("k")
        k.meta["val"] = torch.tensor(5.0)
        add = out.args[0][0]
        mul = gm.graph.call_function(aten.mul.Tensor, (add, k))
        mul.meta["val"] = add.meta["val"]
    out.args = ((mul,),)
    gm.recompile()
    graph, groups, kernels, wrapper, _, _ = compile_fx.lower_and_generate(gm, [cuda(4)])
    check_devices(graph, groups)
    assert "const0.item()" in wrapper
    k.meta.pop("val")  # (a constant without a val is still seen)
    assert devices.on_two_devices([cuda(4)], gm)


def test_two_cuda_devices_run_eagerly():
    with compile_scope(), pytest.raises(GraphNotSupported, match="several CUDA devices"):
        gm = trace_aten(lambda x, y: x + 1, [cuda(4, index=0), cuda(4, index=1)])
        GraphLowering(gm, [cuda(4, index=0), cuda(4, index=1)]).run()


def test_graph_device_rule():
    assert devices.graph_device([torch.randn(2), torch.tensor(1.0)]).type == "cpu"
    assert devices.graph_device([torch.tensor(1.0), cuda(2)]).type == "cuda"
    gm = trace_aten(lambda x: to_cuda(x) + 1, [torch.randn(3)])  # CPU inputs, a CUDA value
    assert devices.graph_device([torch.randn(3)], gm).type == "cuda"
    assert devices.on_two_devices([torch.randn(3)], gm)


def test_kernel_never_writes_over_cpu_memory():
    """A 0-d CUDA result of a CPU scalar is not stored over the dying CPU buffer it reads."""
    _, _, groups, _, wrapper, _ = generate(lambda x, s: x + s * 2, [cuda(), torch.tensor(1.0)])
    assert externs(groups) == ["aten.mul.Tensor"]
    assert "written in place" not in wrapper
    assert re.search(r"dtype=torch.float32, device='cuda(:0)?'\)", wrapper)


@interpreted
@pytest.mark.parametrize("n", [100, 3000])  # a persistent and a looped reduction
def test_cpu_scalar_inside_reductions_matches_eager(n):
    fn = lambda x, s: (x * s).softmax(-1) * s + (x - s).amax(-1, keepdim=True)  # noqa: E731
    s = torch.tensor(0.7)
    gm, graph, groups, kernels, wrapper, extras = generate(fn, [cuda(4, n), s])
    assert externs(groups) == [] and "tl.load(arg1" not in kernels
    x = torch.randn(4, n)
    (got,) = run_on_cpu(gm, graph, kernels, wrapper, extras, [x, s])
    torch.testing.assert_close(got, fn(x, s))
