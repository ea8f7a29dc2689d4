"""Convolutional nets under dynamic shapes compile a bounded number of times (eager is the oracle):
F.interpolate with scale factors (Note [Shapes: interpolate]), pooling, batch norm's float sizes
in training (Note [Tracer: float sizes])."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from frontend_helpers import LogCapture
from torch import nn

import kiln
from kiln import logs
from kiln.frontend.variables.resize import exact_scale
from kiln_bench.models import ResNet


@pytest.fixture(autouse=True)
def _reset():
    kiln.reset()
    prev = set(logs._enabled)
    logs.set_logs("recompiles")
    yield
    logs._enabled.clear()
    logs._enabled.update(prev)
    kiln.reset()


def _block(c_in, c_out):
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU())


class UNet(nn.Module):
    """conv+BN+ReLU, max_pool2d, interpolate(scale_factor=2), cat skip connections."""

    def __init__(self, c=4, mode="nearest"):
        super().__init__()
        self.mode = mode
        self.down1, self.down2 = _block(3, c), _block(c, 2 * c)
        self.up = _block(3 * c, c)
        self.out = nn.Conv2d(c, 2, 1)

    def forward(self, x):
        a = self.down1(x)
        b = self.down2(F.max_pool2d(a, 2))
        u = F.interpolate(b, scale_factor=2, mode=self.mode)
        return self.out(self.up(torch.cat([u, a], 1)))


# (batch, image size): even sizes (a 2x2 pool and a 2x upsample give the skip's size back)
SHAPES = [(2, 16), (3, 24), (5, 40), (9, 20)]
TOL = {"atol": 1e-4, "rtol": 1e-4}


def _run(model, backend, train, shapes, **compile_kw):
    torch.manual_seed(0)
    ref = copy.deepcopy(model)
    model.train(train)
    ref.train(train)
    compiled = kiln.compile(model, backend=backend, **compile_kw)
    with LogCapture("recompiles") as cap:
        for b, h in shapes:
            x = torch.randn(b, 3, h, h)
            out, expected = compiled(x), ref(x)
            torch.testing.assert_close(out, expected, **TOL)
            if train:
                out.square().mean().backward()
                expected.square().mean().backward()
    if train:
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, **TOL, msg=name)
    for (name, buf), ref_buf in zip(model.named_buffers(), ref.buffers()):
        torch.testing.assert_close(buf, ref_buf, **TOL, msg=name)  # BN running stats
    messages = cap.messages["recompiles"]
    assert not [m for m in messages if "specialised" in m], messages
    return kiln.counters["frames"]["total"]


@pytest.mark.parametrize(("backend", "mode"), [("eager", "nearest"), ("aot_eager", "bilinear")])
@pytest.mark.parametrize("train", [False, True])
def test_unet_over_batch_and_image_sizes(backend, mode, train):
    # one static compile, then one symbolic for every later size
    assert _run(UNet(mode=mode), backend, train, SHAPES) == 2


def test_unet_kiln_backend_trains_symbolic():
    # batch norm's float sizes in the kiln backend's decomposed graphs (no specialisation)
    assert _run(UNet(), "kiln", True, SHAPES[:3]) == 2


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_resnet_trains_over_batch_and_image_sizes(backend):
    assert _run(ResNet(widths=(16, 16, 32)), backend, True, [(2, 16), (3, 24), (9, 19)]) == 2


def test_resnet_eval_over_batch_and_image_sizes():
    assert _run(ResNet(widths=(16, 16, 32)), "aot_eager", False, [(2, 16), (4, 33), (7, 22)]) == 2


def test_resnet_kiln_backend_one_symbolic_compile():
    # dynamic=True: one symbolic compile serves every size (the static one is skipped for time)
    shapes = [(2, 16), (5, 21), (9, 40)]
    with torch.no_grad():
        assert _run(ResNet(widths=(16, 16, 32)), "kiln", False, shapes, dynamic=True) == 1


def test_interpolate_scales_and_guards():
    def f(x):
        return F.interpolate(x, scale_factor=1.5, mode="nearest") + 1

    compiled = kiln.compile(f, backend="eager", dynamic=True)
    for h in (8, 11, 17):
        x = torch.randn(2, 3, h)
        torch.testing.assert_close(compiled(x), f(x))
    assert kiln.counters["frames"]["total"] == 1
    # a scale whose products with sizes are not exact in a double: the size specialises
    kiln.reset()

    def g(x):
        return F.interpolate(x, scale_factor=0.1, mode="nearest")

    compiled = kiln.compile(g, backend="eager", dynamic=True)
    for h in (30, 30, 40):
        x = torch.randn(2, 3, h)
        torch.testing.assert_close(compiled(x), g(x))
    assert kiln.counters["frames"]["total"] == 2


def test_exact_scale():
    assert exact_scale(2.0) == (2, 1)
    assert exact_scale(1.5) == (3, 2)
    assert exact_scale(0.25) == (1, 4)
    assert exact_scale(0.1) is None
    assert exact_scale(-2.0) is None
    assert exact_scale(float("inf")) is None


def _pools(x):
    return (
        F.max_pool1d(x, 3, 2, 1)
        + F.max_pool1d(x, 2).sum()
        + torch.max_pool1d(x, 2, ceil_mode=True).mean()
        + F.avg_pool1d(x, 2).mean()
    )


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_max_pool1d_output_length_is_symbolic(backend):
    compiled = kiln.compile(_pools, backend=backend)
    with LogCapture("recompiles") as cap:
        for n in [9, 12, 17, 30]:
            x = torch.randn(2, 3, n, requires_grad=True)
            xr = x.detach().clone().requires_grad_()
            out, expected = compiled(x), _pools(xr)
            torch.testing.assert_close(out, expected)
            out.sum().backward()
            expected.sum().backward()
            torch.testing.assert_close(x.grad, xr.grad)
    assert kiln.counters["frames"]["total"] == 2
    assert not [m for m in cap.messages["recompiles"] if "specialised" in m]


def _float_sizes(x):
    h = x.shape[1]
    a = int(h * 1.5)  # exact: (h * 3) // 2
    b = math.floor(float(h) * 0.5)
    c = math.ceil(h / 4)
    d = math.floor(x.shape[0] / 3)  # one inexact division, last: still exact to floor
    return x.new_ones(a, b, c, d).sum() + x.sum()


def test_floats_of_sizes_floored_back_stay_symbolic():
    compiled = kiln.compile(_float_sizes, backend="eager", dynamic=True)
    with LogCapture("recompiles") as cap:
        for shape in [(4, 6), (7, 9), (12, 30), (3, 5)]:
            x = torch.randn(*shape)
            torch.testing.assert_close(compiled(x), _float_sizes(x))
    assert kiln.counters["frames"]["total"] == 1
    assert not cap.messages["recompiles"]


def _inexact(x):
    return x.new_ones(math.floor(x.shape[0] * 0.1)).sum() + x.shape[0] / 3 * 1.5


def test_inexact_float_of_a_size_specialises_with_a_guard():
    compiled = kiln.compile(_inexact, backend="eager", dynamic=True)
    for n in (30, 30, 40):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x), _inexact(x))
    assert kiln.counters["frames"]["total"] == 2


class _ConvOps(nn.Module):
    """Strided/dilated conv, transposed conv, pools, and the interpolate variants."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, stride=2, padding=1, dilation=2)
        self.convt = nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1)

    def forward(self, x):
        up = F.interpolate(x, scale_factor=(2, 1.5), mode="bilinear", align_corners=True)
        return (
            self.convt(self.conv(x)).sum()
            + F.avg_pool2d(x, 3, 2, 1).sum()
            + F.adaptive_avg_pool2d(x, 3).sum()
            + F.adaptive_max_pool2d(x, 2).sum()
            + up.sum()
            + F.upsample_nearest(x, scale_factor=2).sum()
            + F.max_pool2d(x, 3, 2, 1, ceil_mode=True).sum()
        )


@pytest.mark.filterwarnings("ignore:`nn.functional.upsample_nearest` is deprecated")
def test_conv_pool_and_upsample_ops_stay_symbolic():
    model = _ConvOps()
    ref = copy.deepcopy(model)
    compiled = kiln.compile(model, backend="aot_eager")
    with LogCapture("recompiles") as cap:
        for n in [9, 12, 17]:
            x = torch.randn(2, 3, n, n + 1)
            out, expected = compiled(x), ref(x)
            torch.testing.assert_close(out, expected, **TOL)
            out.backward()
            expected.backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, **TOL)
    assert kiln.counters["frames"]["total"] == 2
    assert not [m for m in cap.messages["recompiles"] if "specialis" in m], cap.messages
