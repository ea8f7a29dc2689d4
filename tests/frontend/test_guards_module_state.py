"""A module's parameters and buffers are guarded on every call: each change that can alter the
compiled code's meaning recompiles, and the result matches eager."""

import torch

import kiln
from tests.frontend.frontend_helpers import CountingBackend


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.register_buffer("offset", torch.zeros(3))

    def forward(self, x):
        return self.lin(x) + self.offset


def _compiled(backend=None):
    torch.manual_seed(0)
    net = Net()
    backend = backend or CountingBackend()
    return net, kiln.compile(net, backend=backend), backend


def _check(net, cf, x):
    with torch.no_grad():
        torch.testing.assert_close(cf(x), net(x))


def test_shape_changed_through_data_recompiles():
    net, cf, backend = _compiled()
    _check(net, cf, torch.randn(2, 4))
    net.lin.weight.data = torch.randn(3, 5)
    _check(net, cf, torch.randn(2, 5))
    assert backend.calls == 2


def test_dtype_changed_through_data_recompiles():
    net, cf, backend = _compiled()
    x = torch.randn(2, 4)
    _check(net, cf, x)
    for p in (net.lin.weight, net.lin.bias):
        p.data = p.data.double()
    net.offset = net.offset.double()
    _check(net, cf, x.double())
    assert backend.calls == 2


def test_requires_grad_toggle_recompiles():
    net, cf, backend = _compiled()
    x = torch.randn(2, 4)
    out = cf(x)
    assert out.requires_grad
    net.lin.weight.requires_grad_(False)
    net.lin.bias.requires_grad_(False)
    out = cf(x)
    assert not out.requires_grad and backend.calls == 2
    torch.testing.assert_close(out, net(x))


def test_swapped_parameter_object_is_read_anew():
    net, cf, backend = _compiled()
    x = torch.randn(2, 4)
    _check(net, cf, x)
    net.lin.weight = torch.nn.Parameter(torch.randn(3, 4))  # same layout: no recompile needed
    _check(net, cf, x)
    net.lin.bias = torch.nn.Parameter(torch.randn(6)[::2])
    assert net.lin.bias.stride() == (2,)
    _check(net, cf, x)  # (a strided bias: a new layout)
    assert backend.calls == 2


def test_buffer_resized_in_place_recompiles():
    net, cf, backend = _compiled()
    x = torch.randn(2, 4)
    _check(net, cf, x)
    net.offset.resize_(1)
    net.offset.fill_(0.5)
    _check(net, cf, x)
    assert backend.calls == 2


def test_strides_changed_through_set_recompile():
    net, cf, backend = _compiled()
    x = torch.randn(2, 4)
    _check(net, cf, x)
    w = net.lin.weight
    with torch.no_grad():
        w.set_(w.detach().t().contiguous().t())  # same values, column-major
    _check(net, cf, x)
    assert backend.calls == 2


def test_kiln_backend_sees_every_change():
    net, cf, _ = _compiled(backend="kiln")
    x = torch.randn(2, 4)
    _check(net, cf, x)
    net.lin.weight.data = net.lin.weight.data.t().contiguous().t()
    _check(net, cf, x)
    net.offset.resize_(1)
    _check(net, cf, x)
    net.lin.bias.data = net.lin.bias.data.double()
    net.lin.weight.data = net.lin.weight.data.double()
    net.offset.data = net.offset.data.double()
    _check(net, cf, x.double())
