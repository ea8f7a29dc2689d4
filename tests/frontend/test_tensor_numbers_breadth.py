"""float(t) / int(t) of one-element tensors under capture_scalar_outputs: kept in the graph as
item reads, compared with eager Python."""

import pytest
import torch

import kiln
from kiln import config


@pytest.fixture(autouse=True)
def _capture():
    kiln.reset()
    old = config.capture_scalar_outputs
    config.capture_scalar_outputs = True
    yield
    config.capture_scalar_outputs = old


def _convert(kind):
    def fn(x):
        y = x + 1
        return kind(y), y * 2

    return fn


@pytest.mark.parametrize(
    "kind,value",
    [(float, 1.5), (float, 3), (float, True), (int, 4), (int, False), (float, 2**60 + 1)],
)
def test_number_of_a_one_element_tensor(kind, value):
    fn = _convert(kind)
    x = torch.tensor([value])
    got, want = kiln.compile(fn, backend="eager", fullgraph=True)(x), fn(x)
    assert type(got[0]) is type(want[0]) and got[0] == want[0]
    torch.testing.assert_close(got[1], want[1])


def _int_math(x):
    return int(x.sum()) * 3 + 1


def test_int_of_a_tensor_used_in_arithmetic():
    x = torch.tensor([2, 5])
    assert kiln.compile(_int_math, backend="eager", fullgraph=True)(x) == _int_math(x) == 22


def test_int_of_a_float_tensor_breaks():
    with pytest.raises(kiln.exc.Unsupported, match="int\\(\\) of a floating-point tensor"):
        kiln.compile(_convert(int), backend="eager", fullgraph=True)(torch.tensor([2.5]))
    kiln.reset()
    fn = _convert(int)
    assert kiln.compile(fn, backend="eager")(torch.tensor([2.5]))[0] == fn(torch.tensor([2.5]))[0]
