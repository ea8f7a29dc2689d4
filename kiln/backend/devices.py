"""Graphs on two devices: a graph's main device, and which values its kernels may read."""

import torch

from kiln import config
from kiln.backend.ir import CPU, Buffer


def triton_kernels(device):
    """Whether a graph on this device gets Triton kernels: CUDA, or the CPU under
    config.cpu_backend="triton" (Triton's interpreter); else C++ kernels."""
    kind = getattr(device, "type", None)
    return kind == "cuda" or (kind == "cpu" and config.cpu_backend == "triton")


# Note [Backend: graphs on two devices]
# Eager lets CUDA and CPU tensors meet in one program: a 0-d CPU tensor acts as a scalar next to
# CUDA tensors (an optimizer's `step`, `x * torch.tensor(3.0)`), and `.cuda()`, `.to(dev)`,
# `.cpu()` move values between the devices. A graph's main device is CUDA when any of its
# tensors (inputs, constants, values) is on CUDA (one CUDA device only: two run eagerly), and all
# its kernels are Triton kernels on that device. Every value keeps eager's device:
# - a node whose result, or one of whose tensor arguments, is on the CPU runs as an ATen call on
#   its own device (the extern fallback; the CPU work of a CUDA graph is small scalar arithmetic
#   in practice, so it gets no C++ kernels), and so do the device copies (`_to_copy` of a CPU
#   tensor to CUDA, of a CUDA tensor to the CPU): kernels never read or write CPU memory, and
#   nothing fuses across devices;
# - except a 0-d CPU tensor read by a kernel: the kernel takes its value as a scalar argument
#   (`arg1.item()` in the wrapper), as eager's CUDA kernels do (TensorIterator hands a CPU scalar
#   to the kernel by value). No host-to-device copy and no synchronisation: `.item()` of a CPU
#   tensor is a host read (1.4 µs here), where a copy would be a device allocation and a
#   cudaMemcpy from pageable memory per call (several µs, not measured here), and an Adam step
#   reads two such scalars per parameter; the value is taken when the kernel is launched, so a
#   later write to the CPU tensor (the next `step += 1`) cannot race it. Triton passes Python
#   floats as float32, exact for float32/float16/bfloat16 values; a float64 one (a learning rate
#   lifted to a tensor, Note [AOT: floats lifted to tensors]) goes as the int64 of its bits and
#   the kernel bitcasts it back: exact;
# - buffers are reused only on their own device, a kernel writes in place only over memory of
#   its own device, and the wrapper allocates CPU buffers with device="cpu" (under
#   `torch.set_default_device("cuda")` a bare empty_strided would land on the GPU);
# - a graph with CPU tensors is not recorded as a CUDA graph (reduce-overhead): a recording keeps
#   the scalars' values of the recorded call.
# A mutated CPU input (`step += 1`) is a CPU ATen call whose result the AOT runtime copies back
# into the input, as for any mutated input. CPU-only graphs are unchanged (C++ kernels).
BY_VALUE_DTYPES = {
    torch.float64,
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.bool,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
}


def graph_device(example_inputs, gm=None):
    """The main device of a graph: its CUDA device if it has CUDA tensors, else the CPU
    (ValueError: tensors on two CUDA devices, on another kind, or inputs on the meta device)."""
    devs = {x.device for x in example_inputs if isinstance(x, torch.Tensor)}
    if any(d.type == "meta" for d in devs):  # (no data to compute on: eager shapes them)
        raise ValueError("inputs on the meta device")
    if gm is not None:
        for node in gm.graph.nodes:
            devs |= {v.device for v in _tensors(node.meta.get("val"))}
            if node.op == "get_attr":
                devs |= {v.device for v in _tensors(getattr(gm, node.target, None))}
    cuda = {_canonical(d) for d in devs if d.type == "cuda"}
    if len(cuda) > 1:
        raise ValueError(f"tensors on several CUDA devices: {sorted(map(str, cuda))}")
    other = {d.type for d in devs} - {"cpu", "cuda", "meta"}
    if other:
        raise ValueError(f"tensors on {sorted(other)}")
    if cuda:
        return cuda.pop()
    return CPU


def _canonical(d):
    """cuda and cuda:<current> are one device (a fake's device may have no index)."""
    if d.index is None and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return d


def _tensors(v):
    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, (list, tuple)):
        return [t for x in v for t in _tensors(x)]
    return []


def foreign(device, graph_dev):
    """Whether a tensor on `device` is off the graph's main device (a CPU one in a CUDA graph)."""
    return device.type != graph_dev.type and device.type != "meta"


def reads_by_value(buf, graph_dev):
    """Whether a kernel of a graph on `graph_dev` reads buffer `buf` as a scalar argument."""
    lay = buf.layout
    return (
        graph_dev.type != "cpu"
        and lay.device is not None
        and lay.device.type == "cpu"
        and len(lay.size) == 0
        and lay.dtype in BY_VALUE_DTYPES
    )


def off_device(graph, args, val):
    """Why a node cannot be a kernel of `graph` (a result or a tensor argument off its main
    device, Note [Backend: graphs on two devices]), else None."""
    dev = graph.device
    for v in _tensors(val):
        if foreign(v.device, dev):
            return f"its result is on {v.device}"
    for a in args:
        if isinstance(a, Buffer) and a.layout.device is not None:
            if foreign(a.layout.device, dev) and not reads_by_value(a, dev):
                return f"it reads {a.name} on {a.layout.device}"
    return None


def on_two_devices(example_inputs, gm):
    """Whether a graph has both CPU and CUDA tensors (inputs, constants or values)."""
    types = {x.device.type for x in example_inputs if isinstance(x, torch.Tensor)}
    for node in gm.graph.nodes:
        types |= {v.device.type for v in _tensors(node.meta.get("val"))}
        if node.op == "get_attr":
            types |= {v.device.type for v in _tensors(getattr(gm, node.target, None))}
    return {"cpu", "cuda"} <= types


def value_arg(name, dtype):
    """The wrapper's expression passing 0-d CPU tensor `name` to a kernel by value."""
    if dtype == torch.float64:  # as its bits (Triton would round a Python float to float32)
        return f"{name}.view(torch.int64).item()"
    if dtype == torch.bool:  # as an int: the kernel compares it with 0 (Triton 3.7's
        return f"int({name}.item())"  # interpreter cannot take a Python bool as an int1)
    return f"{name}.item()"
