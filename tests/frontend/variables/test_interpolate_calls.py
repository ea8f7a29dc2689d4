"""F.interpolate to a symbolic output size traced as its upsampling op (Note [Torch: interpolate
to a symbolic size]), and tuples of ints read item by item (Note [Shapes: ints in tuple inputs]):
eager results and gradients over changing sizes, one dynamic graph, no break."""

import pytest
import torch
import torch.nn.functional as F

import kiln

CASES = [  # (mode, spatial dims, extra keyword arguments)
    ("nearest", 2, {}),
    ("nearest-exact", 1, {}),
    ("bilinear", 2, {"align_corners": False}),
    ("bilinear", 2, {"align_corners": True}),
    ("bilinear", 2, {"antialias": True}),
    ("bicubic", 2, {"align_corners": False}),
    ("linear", 1, {}),
    ("trilinear", 3, {"align_corners": False}),
    ("nearest", 3, {}),
]


@pytest.mark.parametrize("backend", ["eager", "kiln"])
@pytest.mark.parametrize(("mode", "dims", "extra"), CASES)
def test_upsampling_to_a_skip_connections_size(mode, dims, extra, backend):
    def up(x, skip):
        return F.interpolate(x, size=skip.shape[2:], mode=mode, **extra) + skip

    kiln.reset()
    compiled = kiln.compile(up, backend=backend)
    for n in (4, 5, 6):
        x = torch.randn(2, 3, *[n + d for d in range(dims)], requires_grad=True)
        skip = torch.randn(2, 3, *[2 * n + 1 + d for d in range(dims)])
        got, expected = compiled(x, skip), up(x, skip)
        torch.testing.assert_close(got, expected)
        (g,) = torch.autograd.grad(got.sum(), x)
        (e,) = torch.autograd.grad(expected.sum(), x)
        torch.testing.assert_close(g, e)
    stats = kiln.counters["stats"]
    assert stats["unique_graphs"] == 2 and "graph_breaks" not in stats  # (then dynamic)


def test_an_output_size_given_as_a_tuple_of_ints():
    def resize(x, size):
        return F.interpolate(x, size=size, mode="bilinear") * 2

    kiln.reset()
    compiled = kiln.compile(resize)
    x = torch.randn(1, 3, 8, 8)
    for h in range(10, 20):  # (more sizes than the cache limit: the ints became symbols)
        torch.testing.assert_close(compiled(x, (h, h + 1)), resize(x, (h, h + 1)))
    stats = kiln.counters["stats"]
    assert stats["unique_graphs"] == 2 and "graph_breaks" not in stats


def test_scale_factors_and_area_keep_their_paths():
    def fn(x):
        return F.interpolate(x, scale_factor=2.0, mode="nearest"), F.adaptive_avg_pool2d(x, 3)

    kiln.reset()
    compiled = kiln.compile(fn)
    for n in (6, 7, 8):
        x = torch.randn(1, 2, n, n)
        for g, e in zip(compiled(x), fn(x), strict=True):
            torch.testing.assert_close(g, e)


def test_arguments_interpolate_refuses_raise_as_in_eager():
    def fn(x, skip, **kwargs):
        return F.interpolate(x, size=skip.shape[2:], **kwargs)

    kiln.reset()
    compiled = kiln.compile(fn)
    for n in (4, 5, 6):
        x, skip = torch.randn(1, 2, n, n), torch.randn(1, 2, n + 3, n + 1)
        for kwargs in (
            {"recompute_scale_factor": True},
            {"mode": "nearest", "align_corners": True},
        ):
            with pytest.raises(ValueError) as expected:
                fn(x, skip, **kwargs)
            with pytest.raises(ValueError) as got:
                compiled(x, skip, **kwargs)
            assert str(got.value) == str(expected.value)
