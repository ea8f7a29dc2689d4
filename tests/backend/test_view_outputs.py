"""Outputs that are views of inputs, under backend="kiln": replayed on the real input at run time,
so they must stay differentiable (a decomposition into prims would not be)."""

import pytest
import torch

import kiln


@pytest.mark.parametrize(
    "view",
    [
        lambda x: torch.squeeze(x, (0, 2)),
        lambda x: x.squeeze(),
        lambda x: x.squeeze(2),
        lambda x: x.unsqueeze(1).transpose(0, 3),
    ],
)
def test_view_of_input_output_keeps_grad(view):
    kiln.reset()
    x = torch.randn(1, 3, 1, 4, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    out = kiln.compile(view, backend="kiln")(x)
    ref = view(x2)
    torch.testing.assert_close(out, ref)
    (out * torch.arange(out.numel()).view(out.shape)).sum().backward()
    (ref * torch.arange(ref.numel()).view(ref.shape)).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    assert kiln.counters["stats"]["backend_failures"] == 0


@pytest.mark.parametrize("backend", ["kiln", "aot_eager"])
def test_output_viewing_a_graph_buffer_can_be_modified_in_place(backend):
    # Note [AOT: outputs are not views]: the reshaped mm result is returned as a plain tensor
    kiln.reset()

    def f(x, w):
        return (x @ w).view(4, 16)

    x, w = torch.randn(8, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    x2, w2 = (t.detach().clone().requires_grad_(True) for t in (x, w))
    out, ref = kiln.compile(f, backend=backend)(x, w), f(x2, w2)
    out.mul_(2)
    ref.mul_(2)
    torch.testing.assert_close(out, ref)
    (out * torch.arange(64.0).view(4, 16)).sum().backward()
    (ref * torch.arange(64.0).view(4, 16)).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(w.grad, w2.grad)


@pytest.mark.parametrize("backend", ["kiln", "aot_eager"])
def test_conjugated_output_keeps_its_conjugate_bit(backend):
    # fft.ifft of a real input returns a lazily conjugated view of the r2c result
    kiln.reset()

    def f(x):
        return torch.fft.ifft(x, n=10, dim=1, norm="ortho")

    x = torch.randn(5, 6, 7, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    out, ref = kiln.compile(f, backend=backend)(x), f(x2)
    torch.testing.assert_close(out.resolve_conj(), ref.resolve_conj())
    g = torch.randn(5, 10, 7, dtype=torch.complex64)
    out.backward(g)
    ref.backward(g)
    torch.testing.assert_close(x.grad, x2.grad)
