"""NumPy scalar inputs are 0-d graph inputs (Note [NumPy: scalar inputs]) and numbers next to an
array go to torch's op as they are (Note [NumPy: numbers as they are])."""

import numpy as np
import pytest
import torch

import kiln
from kiln.exc import Unsupported
from tests.frontend.frontend_helpers import CountingBackend
from tests.frontend.variables.test_numpy import np_same


def _calls(gm):
    return [n for n in gm.graph.nodes if n.op in ("call_function", "call_method")]


@pytest.mark.parametrize("kind", [np.int64, np.float64, np.float32, np.int32])
def test_new_scalar_values_reuse_one_graph(kind):
    def fn(x, s):
        return {"a": x + 1, "b": s / 2, "c": s * 3 - 1, "d": x * s}

    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(fn, backend=backend)
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)
    for i in range(6):
        s = kind(i)
        expected, got = fn(x, s), compiled(x, s)
        for key in ("b", "c"):
            np_same(expected[key], got[key])
        torch.testing.assert_close(got["a"], expected["a"])
        torch.testing.assert_close(got["d"], expected["d"])
    assert backend.calls == 1
    assert kiln.counters["stats"].get("graph_breaks", 0) == 0


def test_a_type_change_recompiles():
    def fn(s):
        return s + 1

    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(fn, backend=backend)
    for s in (np.int64(3), np.int64(4), np.float32(2.5), np.int64(5)):
        np_same(fn(s), compiled(s))
    assert backend.calls == 2


def test_scalar_returned_is_the_same_object():
    def fn(x, s):
        return x.sin(), s, [s]

    s = np.float64(0.25)
    out = kiln.compile(fn, backend="eager", fullgraph=True)(torch.ones(2), s)
    assert out[1] is s and out[2][0] is s


def test_number_goes_to_the_op_as_it_is():
    def fn(s):
        return s / 2

    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(fn, backend=backend, fullgraph=True)
    np_same(fn(np.int64(7)), compiled(np.int64(7)))
    calls = _calls(backend.graphs[0])
    assert not any(n.target is torch.full for n in calls)  # no 0-d tensor of the 2
    assert [n.target for n in calls] == ["to", torch.div]


@pytest.mark.parametrize(
    "fn",
    [
        lambda a: a + 3,
        lambda a: a - True,
        lambda a: a * 0.5,
        lambda a: a // 2,
        lambda a: a % 3,
        lambda a: a**2,
        lambda a: a < 2.5,
        lambda a: a == 4,
        lambda a: 2 - a,
    ],
)
@pytest.mark.parametrize(
    "value", [np.arange(5, dtype=np.int8), np.arange(5, dtype=np.float32), np.uint8(3)]
)
def test_number_operands_keep_numpys_dtypes(fn, value):
    kiln.reset()
    np_same(fn(value), kiln.compile(fn, backend="eager", fullgraph=True)(value))


def test_reading_the_value_breaks():
    def fn(x, s):
        if s > 2:
            return x + 1
        return x - 1

    with pytest.raises(Unsupported):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.ones(2), np.int64(3))
    kiln.reset()
    compiled = kiln.compile(fn, backend="eager")
    for s in (np.int64(3), np.int64(1)):
        torch.testing.assert_close(compiled(torch.ones(2), s), fn(torch.ones(2), s))


def test_item_assignment_breaks_and_raises_as_in_python():
    def fn(s):
        s[()] = 3
        return s

    with pytest.raises(Unsupported, match="NumPy scalar"):
        kiln.compile(fn, backend="eager", fullgraph=True)(np.int64(1))
    kiln.reset()
    with pytest.raises(TypeError):
        kiln.compile(fn, backend="eager")(np.int64(1))


@pytest.mark.parametrize(
    "fn",
    [
        lambda s: s.copy(),
        lambda s: s.astype(np.float32),
        lambda s: s.T,
        lambda s: np.transpose(s),
        lambda s: np.clip(s, 0, 1),
        lambda s: s.squeeze(),
        lambda s: np.asarray(s),  # (a 0-d array, not a scalar)
        lambda s: np.asarray(s).copy(),
    ],
)
@pytest.mark.parametrize("value", [np.int64(3), np.float32(0.25)])
def test_results_are_scalars_where_numpy_gives_scalars(fn, value):
    kiln.reset()
    np_same(fn(value), kiln.compile(fn, backend="eager", fullgraph=True)(value))


def test_from_numpy_of_a_scalar_raises_as_in_python():
    def fn(s):
        return torch.from_numpy(s)

    with pytest.raises(Unsupported, match="from_numpy of a NumPy scalar"):
        kiln.compile(fn, backend="eager", fullgraph=True)(np.int64(1))
    kiln.reset()
    with pytest.raises(TypeError):
        kiln.compile(fn, backend="eager")(np.int64(1))


@pytest.mark.parametrize("op", [np.floor_divide, np.remainder, np.fmod])
def test_integer_division_by_an_input_that_may_be_zero(op):
    def fn(a, s):
        return op(a, s)

    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(fn, backend=backend, fullgraph=True)
    a = np.arange(-3, 4, dtype=np.int64)
    with np.errstate(divide="ignore"):
        for s in (np.int64(0), np.int64(3), np.int64(-2), np.int64(0)):
            np_same(fn(a, s), compiled(a, s))
            np_same(fn(np.int64(7), s), compiled(np.int64(7), s))
    assert backend.calls <= 2  # (an array and a scalar first argument)


def test_python_int_modulo_a_numpy_scalar_input():
    def fn(x, a, b):
        return x + (a % b)

    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(fn, backend=backend, dynamic=True, fullgraph=True)
    x = torch.randn(10)
    with np.errstate(divide="ignore"):
        for a, b in ((4096, np.int64(8)), (4097, np.int64(8)), (-5, np.int64(3)), (7, np.int64(0))):
            torch.testing.assert_close(compiled(x, a, b), fn(x, a, b))
    assert backend.calls == 1


SHIFT = np.float64(0.5)


class _Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = np.float32(2.0)

    def forward(self, x):
        return x * self.scale + self.scale * SHIFT + SHIFT


def test_a_source_read_twice_is_one_input():
    global SHIFT
    kiln.reset()
    backend = CountingBackend()
    model = _Scaled()
    compiled = kiln.compile(model, backend=backend)
    x = torch.ones(3)
    torch.testing.assert_close(compiled(x), model(x))
    placeholders = [n for n in backend.graphs[0].graph.nodes if n.op == "placeholder"]
    assert len(placeholders) == 3  # x, self.scale, SHIFT
    model.scale, SHIFT = np.float32(3.0), np.float64(1.5)
    try:
        torch.testing.assert_close(compiled(x), model(x))
    finally:
        SHIFT = np.float64(0.5)
    assert backend.calls == 1


@pytest.mark.parametrize("tdtype", [torch.float64, torch.float32, torch.int64, torch.complex128])
@pytest.mark.parametrize("kind", [np.float64, np.float32, np.int64, np.complex128])
def test_a_scalar_next_to_a_tensor_computes_in_torchs_dtype(tdtype, kind):
    # Note [NumPy: a scalar next to a tensor]: a float64 tensor keeps the scalar's full precision
    def fn(x, s):
        return x + s, s * x, x - s

    kiln.reset()
    compiled = kiln.compile(fn, backend="eager")
    x = torch.tensor([1.0, 3.0, -2.0]).to(tdtype)
    for value in (0.1, 0.3, 7.7):
        s = kind(value) if kind is not np.int64 else kind(int(value * 10))
        for e, c in zip(fn(x, s), compiled(x, s)):
            assert e.dtype == c.dtype
            assert torch.equal(e, c), (e, c)
