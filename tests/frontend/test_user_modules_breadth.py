"""User nn.Module classes instantiated inside compiled code: each case compares kiln with eager."""

import functools

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln


class _Joiner(torch.nn.Module):
    def forward(self, x, y):
        both = torch.cat((x, y), dim=1)
        return torch.nn.ReLU()(both) * self.scale()

    def scale(self):
        return 2 if self.training else 3


def _apply(mod, x, y):
    return mod(x, y)


def _module_in_partial(x, y):
    call = functools.partial(_apply, mod=_Joiner())
    return call(x=x, y=y)


def _bound_forward_in_partial(x, y):
    call = functools.partial(_apply, mod=_Joiner().forward)
    return call(x=x, y=y)


@pytest.mark.parametrize("fn", [_module_in_partial, _bound_forward_in_partial])
def test_user_module_without_init_built_in_frame(fn):
    x, y = torch.randn(2, 3), torch.randn(2, 2)
    run_and_compare(fn, x, y, fullgraph=True, expected_graphs=1)


def _returned_module(x):
    mod = _Joiner()
    return mod(x, x), mod


def test_user_module_built_in_frame_leaves_it():
    kiln.reset()
    fn = kiln.compile(_returned_module, backend="eager", fullgraph=True)
    x = torch.randn(2, 2)
    out, mod = fn(x)
    other = fn(x)[1]
    assert type(mod) is _Joiner and mod is not other and mod.training
    torch.testing.assert_close(out, _returned_module(x)[0])


class _Gate(torch.nn.Sigmoid):
    def forward(self, x):
        return x * super().forward(x)


class _Slope(torch.nn.LeakyReLU):
    def forward(self, x):
        return super().forward(x) + self.negative_slope


def _torch_base_modules(x):
    return _Gate()(x), _Slope(0.25)(x), _Slope(negative_slope=0.5)(x)


def test_user_subclass_of_parameter_free_torch_module():
    run_and_compare(_torch_base_modules, torch.randn(5), fullgraph=True, expected_graphs=1)


class _WithWeights(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x)


def _module_with_weights(x):
    return _WithWeights()(x) + 1


def test_user_module_with_init_breaks_and_draws_like_eager():
    x = torch.randn(2, 3)
    with pytest.raises(kiln.exc.Unsupported, match="__init__ is not traced"):
        kiln.reset()
        kiln.compile(_module_with_weights, backend="eager", fullgraph=True)(x)
    kiln.reset()
    fn = kiln.compile(_module_with_weights, backend="eager")
    for _ in range(2):  # new random weights per call, drawn as eager draws them
        torch.manual_seed(0)
        expected = _module_with_weights(x)
        torch.manual_seed(0)
        torch.testing.assert_close(fn(x), expected)


def _store_into_new_module(x):
    mod = _Joiner()
    mod.training = False
    return mod(x, x)


def test_store_into_user_module_built_in_frame():
    run_and_compare(_store_into_new_module, torch.randn(2, 2))
