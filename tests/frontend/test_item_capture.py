"""`t.item()` / `t.tolist()` kept in the graph under config.capture_scalar_outputs: eager's
results, one graph for every value, a graph break wherever Python needs the value (Note [Shapes:
item() in the graph])."""

import pytest
import torch

import kiln
from kiln.exc import Unsupported
from tests.frontend.frontend_helpers import assert_same, counted_compile


@pytest.fixture
def capture(monkeypatch):
    monkeypatch.setattr(kiln.config, "capture_scalar_outputs", True)


def _counted(fn, fullgraph=False, backend=None):
    return counted_compile(fn, fullgraph, backend)


def test_int_item_as_a_size(capture):
    def fn(x):
        return torch.ones(max(x.item(), 16)), torch.zeros(2, max(x.item() * 2, 1))

    compiled, graphs = _counted(fn, fullgraph=True)
    for v in (3, 40, 16, 0):
        x = torch.tensor([v])
        assert_same(fn(x), compiled(x))
    assert len(graphs) == 1


@pytest.mark.parametrize(
    "make",
    [
        lambda v: torch.tensor([v.item()]),
        lambda v: torch.tensor([[v.item()], [2.0]]),
        lambda v: torch.tensor(v.item()),
        lambda v: torch.tensor((v.item(), 3), dtype=torch.float64),
        lambda v: torch.tensor([v.sum().to(torch.int32).item(), 7]),
    ],
)
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_item_into_torch_tensor(capture, make, backend):
    compiled, graphs = _counted(make, fullgraph=True, backend=backend)
    for v in (torch.tensor([0.1234567]), torch.tensor([-3.75]), torch.tensor([1e-3])):
        expected = make(v)
        got = compiled(v)
        assert_same(expected, got)
        assert got.dtype == expected.dtype
    assert len(graphs) == 1


def test_float_item_returned_and_branched_on(capture):
    def fn(x):
        x = x + 1
        y = x.item()
        if y > 2:
            return x * 2, y
        return x * 3, y

    compiled, graphs = _counted(fn)
    for v in (3.0, 0.5, 1.0 / 3.0):
        x = torch.tensor([v])
        expected, got = fn(x), compiled(x)
        assert_same(expected[0], got[0])
        assert type(got[1]) is float and got[1] == expected[1]
    assert graphs and "item" in graphs[0].code


def test_tolist_of_ints(capture):
    def fn(x, i):
        a, b = i.tolist()
        return torch.zeros(max(a + b, 1), 2), x.sum() * 2, a * 2

    compiled, graphs = _counted(fn, fullgraph=True)
    for values in ([7, 3], [0, 5]):
        args = (torch.ones(3), torch.tensor(values))
        assert_same(fn(*args), compiled(*args))
    assert len(graphs) == 1


def test_off_by_default_a_break():
    def fn(x):
        return torch.ones(max(x.item(), 4)) * 2

    compiled, graphs = _counted(fn)
    for v in (2, 9):
        x = torch.tensor([v])
        assert_same(fn(x), compiled(x))
    assert len(graphs) == 2  # (no graph before the break: the item; one per size after it)
    assert not any("item" in str(gm.graph) for gm in graphs)


@pytest.mark.parametrize("backend", [None, "kiln"])
def test_on_under_fullgraph_as_torch_compile(backend):
    def fn(x, a, n):
        return x * a.item() + torch.ones(max(n.item(), 4)).sum(), float(a)

    compiled, graphs = _counted(fn, fullgraph=True, backend=backend)
    x = torch.randn(3)
    for a, n in ((2.0, 3), (-0.5, 7)):
        args = (x, torch.tensor(a), torch.tensor([n]))
        assert_same(fn(*args), compiled(*args))
    assert len(graphs) == 1


def test_a_branch_on_an_item_under_fullgraph_is_still_an_error():
    def fn(x):
        if x.sum().item() > 0:
            return x + 1
        return x - 1

    kiln.reset()
    with pytest.raises(Unsupported):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.ones(2))


def test_arithmetic_on_a_data_dependent_size_asserts_it_is_nonnegative(capture):
    def fn(x):
        return torch.ones(x.item() + 1)  # (eager raises for a negative size)

    compiled, graphs = _counted(fn, fullgraph=True)  # Note [Shapes: a factory's size read ...]
    for v in (0, 3):
        x = torch.tensor([v])
        assert_same(fn(x), compiled(x))
    with pytest.raises(RuntimeError, match="negative dimension"):
        compiled(torch.tensor([-2]))
    assert len(graphs) == 1


def test_more_than_one_element_breaks(capture):
    def fn(x):
        return x.item()

    kiln.reset()
    with pytest.raises(Unsupported):
        kiln.compile(fn, fullgraph=True)(torch.ones(2))


def test_split_by_item_sizes(capture):
    def fn(x, i):
        a, b = i.tolist()
        return torch.split(x * 2, [a, b]), torch.split(x, [a, 1, b - 1], dim=0)

    compiled, graphs = _counted(fn, fullgraph=True)
    for values in ([7, 3], [2, 8]):
        x = torch.randn(10, requires_grad=True)
        i = torch.tensor(values)
        expected, got = fn(x, i), compiled(x, i)
        assert_same(expected, got)
        sum(t.sum() * k for k, t in enumerate(got[0] + got[1], 1)).backward()
        grad, x.grad = x.grad, None
        sum(t.sum() * k for k, t in enumerate(expected[0] + expected[1], 1)).backward()
        assert_same(grad, x.grad)
    assert len(graphs) == 1
    with pytest.raises(RuntimeError):  # the sizes do not add up: split raises, as eagerly
        compiled(torch.randn(10), torch.tensor([4, 4]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.float64])
def test_float_item_as_a_scalar_operand(capture, dtype):
    def fn(x, a):
        v = a.item()
        return x * v, (x + v).clamp(min=v), torch.where(x > 0, x, v)

    compiled, graphs = _counted(fn, fullgraph=True)
    x = torch.arange(-2, 4).to(dtype)
    for a in (0.25, -3.5, 7.0):
        args = (x, torch.tensor(a))
        assert_same(fn(*args), compiled(*args))
    assert len(graphs) == 1


def test_float_item_as_a_factorys_fill_value_breaks(capture):
    def full(a):
        return torch.full((3,), a.item())

    kiln.reset()
    with pytest.raises(Unsupported, match="data-dependent"):
        kiln.compile(full, backend="eager", fullgraph=True)(torch.tensor(2.0))


@pytest.mark.parametrize("backend", [None, "kiln"])
def test_float_item_arithmetic_stays_in_the_graph(capture, backend):
    def fn(x, a, b):
        v = a.item() * 2 + 1
        w = (v - b.item()) / 4 + x.size(0)
        return x * w, v, 1 - w

    compiled, graphs = _counted(fn, fullgraph=True, backend=backend)
    for a, b in ((0.5, 2.0), (-3.25, 0.0), (1e10, 7.5)):
        args = (torch.randn(3), torch.tensor(a), torch.tensor(b, dtype=torch.float64))
        assert_same(fn(*args), compiled(*args))
    assert len(graphs) == 1


def test_float_item_divided_by_zero_raises_as_eagerly(capture):
    def fn(a, b):
        return a.item() / b.item()

    compiled, _ = _counted(fn, fullgraph=True)
    assert compiled(torch.tensor(3.0), torch.tensor(2.0)) == 1.5
    with pytest.raises(ZeroDivisionError):
        compiled(torch.tensor(3.0), torch.tensor(0.0))


class PaddingMask(torch.nn.Module):
    """A padding mask from the longest length (test_repros' test_unbacked_arange_in_bounds)."""

    def forward(self, lengths):
        row = torch.arange(0, lengths.max().item(), 1)
        mask = (row < lengths.unsqueeze(-1)).type(torch.float32)
        return mask[:, :, None]


@pytest.mark.parametrize("backend", [None, "kiln"])
def test_arange_to_an_item_bound_under_fullgraph(backend):
    model = PaddingMask()
    compiled, graphs = _counted(model, fullgraph=True, backend=backend)
    for lengths in ([5, 4, 4, 4], [1, 2, 3, 1], [0, 0, 0, 0]):
        t = torch.tensor(lengths, dtype=torch.int32)
        assert_same(model(t), compiled(t))
    assert len(graphs) == 1


def test_arange_to_a_negative_item_bound_raises_as_eagerly():
    def fn(n):
        return torch.arange(-3, n.item()) * 2

    compiled, graphs = _counted(fn, fullgraph=True)
    for v in (4, -3, 0):
        assert_same(fn(torch.tensor(v)), compiled(torch.tensor(v)))
    with pytest.raises(RuntimeError):
        fn(torch.tensor(-5))
    with pytest.raises(RuntimeError):
        compiled(torch.tensor(-5))
    assert len(graphs) == 1


@pytest.mark.parametrize("backend", [None, "aot_eager"])
def test_aten_split_with_sizes_by_tolist_sizes(backend):
    def fn(x, sizes):
        return torch.ops.aten.split_with_sizes(x, sizes.tolist())

    compiled, graphs = _counted(fn, fullgraph=True, backend=backend)
    x = torch.randn(32, requires_grad=True)
    for sizes in ((7, 16, 9), (0, 30, 2)):
        expected, got = fn(x, torch.tensor(sizes)), compiled(x, torch.tensor(sizes))
        assert type(got) is type(expected) is list
        assert_same(expected, got)
        sum(t.sum() * i for i, t in enumerate(got)).backward()
    assert len(graphs) == 1


def _branch_on_float_item(x):
    x = x + 1
    if x.item() > 2:
        return x * 2
    return x * 3


def test_a_branch_on_a_float_item_is_a_data_dependent_error():
    """Under fullgraph: kiln.exc.DataDependentError (torch's UserError); without it the frame
    breaks at the comparison and eager's results come back for both branches."""
    with pytest.raises(kiln.exc.DataDependentError, match="gt of a float read from tensor data"):
        kiln.compile(_branch_on_float_item, backend="eager", fullgraph=True)(torch.tensor([3.0]))
    compiled, graphs = _counted(_branch_on_float_item)
    for v in (3.0, 0.5):
        x = torch.tensor([v])
        assert_same(_branch_on_float_item(x), compiled(x))
    assert len(graphs) >= 1
