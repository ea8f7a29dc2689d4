"""Values read from tensor data (unbacked) in size arithmetic, checks and factories: folded where
every value gives the same answer, asserted at run time where it needs a fact, never guessed;
eager is the oracle, fullgraph=True asserts the frame compiled as one graph."""

import pytest
import torch
from frontend_helpers import assert_same

import kiln


@pytest.fixture(autouse=True)
def _reset():
    kiln.reset()
    yield
    kiln.reset()


def _outcome(fn, *args):
    try:
        return fn(*args), None
    except (RuntimeError, ZeroDivisionError) as e:
        return None, type(e)


def _compiled(fn):
    graphs = []

    def count(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    return kiln.compile(fn, backend=count, fullgraph=True), graphs


def _exact_mod(x):
    u0, u1 = x.tolist()
    if ((u0 + 10) * (u0 + 10)) % (u0 + 10) == 0:
        return torch.tensor(True)
    return torch.tensor(False)


def _exact_floordiv(x):
    u0 = x.item()
    return torch.zeros(((u0 + 3) * u0) // u0) + u0


@pytest.mark.parametrize("values", [[20, 21], [-13, 2], [-9, 0]])
def test_a_modulo_that_divides_exactly_folds(values):
    compiled, graphs = _compiled(_exact_mod)
    x = torch.tensor(values)
    assert_same(_exact_mod(x), compiled(x))
    assert len(graphs) == 1


@pytest.mark.parametrize("n", [4, 1, -2])
def test_a_floordiv_that_divides_exactly(n):
    compiled, graphs = _compiled(_exact_floordiv)
    x = torch.tensor(n)
    expected, got = _outcome(_exact_floordiv, x), _outcome(compiled, x)
    assert expected[1] is got[1]
    if expected[1] is None:
        assert_same(expected[0], got[0])
    assert len(graphs) == 1


def test_a_zero_divisor_raises_at_run_time():
    compiled, graphs = _compiled(_exact_mod)
    assert_same(_exact_mod(torch.tensor([2, 3])), compiled(torch.tensor([2, 3])))
    with pytest.raises(ZeroDivisionError):
        _exact_mod(torch.tensor([-10, 3]))
    with pytest.raises(ZeroDivisionError):  # (the graph divides first, as eager does)
        compiled(torch.tensor([-10, 3]))
    assert len(graphs) == 1


def _empty_of_half(x):
    n = x.item()
    return torch.empty((n - 1) // 2).fill_(3.0)


@pytest.mark.parametrize("n", [4, 1, 0, -1, 7])
def test_a_factory_size_with_a_floor_division(monkeypatch, n):
    """`(n - 1) // 2 >= 0` is asserted when the graph runs (eager raises for a negative size)."""
    monkeypatch.setattr(kiln.config, "capture_scalar_outputs", True)
    compiled, graphs = _compiled(_empty_of_half)
    x = torch.tensor([n])
    expected, got = _outcome(_empty_of_half, x), _outcome(compiled, x)
    assert expected[1] is got[1]
    if expected[1] is None:
        assert_same(expected[0], got[0])
    assert len(graphs) == 1


def _tolist_sum(xs):
    u0, u1 = xs.tolist()
    return xs * (u0 + u1)


def test_tolist_of_a_tensor_of_symbolic_size_specialises_it(monkeypatch):
    monkeypatch.setattr(kiln.config, "capture_scalar_outputs", True)
    graphs = []

    def count(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    compiled = kiln.compile(_tolist_sum, backend=count, fullgraph=True, dynamic=True)
    for values in ([5, 6], [8, -7]):  # one graph: the length 2 is guarded, not the values
        x = torch.tensor(values)
        assert_same(_tolist_sum(x), compiled(x))
    assert len(graphs) == 1


def _tolist_any_length(xs):
    return xs * sum(xs.tolist())


def test_tolist_length_is_guarded(monkeypatch):
    monkeypatch.setattr(kiln.config, "capture_scalar_outputs", True)
    graphs = []

    def count(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    compiled = kiln.compile(_tolist_any_length, backend=count, fullgraph=True, dynamic=True)
    for values in ([5, 6], [1, 2, 3], [4, 4]):
        x = torch.tensor(values)
        assert_same(_tolist_any_length(x), compiled(x))
    assert len(graphs) == 2  # one per length


def _item_equals_sizes(x, y, z, n):
    z += 7
    u0 = z.item()
    torch._check(x.size(0) < 100)
    torch._check(u0 == x.size(0) + y.size(0) + n)
    return x * u0, z


def test_check_of_an_item_value_against_sizes_and_an_int_input(monkeypatch):
    """A fact mixing an `.item()` value with input sizes and an int input: asserted at run time
    (eager's torch._check raises RuntimeError there too), one graph for every size."""
    monkeypatch.setattr(kiln.config, "capture_scalar_outputs", True)
    compiled, graphs = _compiled(_item_equals_sizes)
    calls = [(16, 16, 3, 35), (7, 5, 2, 14), (4, 3, 1, 8), (16, 16, 3, 32 + 7)]  # the last fails
    for a, b, n, z in calls:
        args = (torch.randn(a, 2), torch.randn(b, 2), torch.tensor(z - 7), n)
        expected = _outcome(
            _item_equals_sizes, *[t.clone() if torch.is_tensor(t) else t for t in args]
        )
        got = _outcome(compiled, *args)
        assert expected[1] is got[1]
        if expected[1] is None:
            assert_same(expected[0], got[0])
    assert expected[1] is RuntimeError
    assert len(graphs) == 2  # (the second call made the sizes and n symbolic)


def _checked_terms(xs):
    from torch.fx.experimental.symbolic_shapes import sym_and

    u0, u1 = xs.tolist()
    torch._check(sym_and(u0 >= 3, u0 <= 10, u1 >= 2))
    n = 0
    if u0 >= 3:  # each decided by the checked facts: no break
        n += 1
    if u0 <= 11:
        n += 1
    if u1 >= 1:
        n += 1
    return xs * (u0 + u1 + n)


@pytest.mark.parametrize("values", [[5, 6], [10, 2], [9, 0], [2, 5], [11, 3]])
def test_check_of_sym_and_asserts_each_term(monkeypatch, values):
    monkeypatch.setattr(kiln.config, "capture_scalar_outputs", True)
    compiled, graphs = _compiled(_checked_terms)
    x = torch.tensor(values)
    expected, got = _outcome(_checked_terms, x), _outcome(compiled, x)
    assert expected[1] is got[1]
    if expected[1] is None:
        assert_same(expected[0], got[0])
    assert len(graphs) == 1


def _argwhere_map(tensor, mapping):
    xx, yy = torch.meshgrid(mapping, tensor, indexing="ij")
    indices = torch.argwhere(xx == yy)
    mapped = torch.zeros_like(tensor)
    mapped[indices[:, 1]] = indices[:, 0]
    return mapped, (xx > 3).argwhere()


@pytest.mark.parametrize("backend", ["eager", "kiln"])
def test_argwhere_is_nonzero_in_the_graph(monkeypatch, backend):
    monkeypatch.setattr(kiln.config, "capture_dynamic_output_shape_ops", True)
    compiled, graphs = _compiled(_argwhere_map)
    for mapping in ([0, 3, 4, 5, 7], [1, 1, 9, 2, 2]):  # other counts of matches: the same graph
        args = (torch.tensor([1, 2, 3, 5, 6, 7]), torch.tensor(mapping))
        assert_same(_argwhere_map(*args), compiled(*args))
    assert len(graphs) == 1
    graph = kiln.compile(_argwhere_map, backend=backend, fullgraph=True)
    assert_same(_argwhere_map(*args), graph(*args))


def _branch_on_item(x):
    y = x.item()
    torch._check(y >= 0)
    if y == 0:
        return x * 0
    return torch.arange(0, y) + x


def test_a_branch_on_an_item_value_is_a_data_dependent_error(monkeypatch):
    """Under fullgraph: kiln.exc.DataDependentError (an Unsupported; torch's UserError there);
    without it the frame breaks and eager's results come back."""
    monkeypatch.setattr(kiln.config, "capture_scalar_outputs", True)
    with pytest.raises(kiln.exc.DataDependentError, match=r"Eq\(u0, 0\)"):
        kiln.compile(_branch_on_item, backend="eager", fullgraph=True)(torch.tensor([3]))
    kiln.reset()
    compiled = kiln.compile(_branch_on_item, backend="eager")
    for v in (3, 0):
        assert_same(_branch_on_item(torch.tensor([v])), compiled(torch.tensor([v])))


def _checked_quotient(x):
    u0, u1 = x.tolist()
    torch._check((2 * u0) // (u0 + u1) != 0)
    if (2 * u0) // (u0 + u1) == 0:  # decided by the checked fact: no break
        return torch.tensor(True)
    return torch.tensor(False) + (7 * u0) % (u0 - u1 - 1)


@pytest.mark.parametrize("values", [[3, 3], [1, 5], [3, -3], [-7, 2], [4, 3]])
def test_division_by_a_divisor_of_unknown_sign_is_computed_by_the_graph(values):
    compiled, graphs = _compiled(_checked_quotient)
    x = torch.tensor(values)
    expected, got = _outcome(_checked_quotient, x), _outcome(compiled, x)
    assert expected[1] is got[1]  # (torch._check's RuntimeError, ZeroDivisionError as eager)
    if expected[1] is None:
        assert_same(expected[0], got[0])
    assert len(graphs) == 1


def _unused_quotient(x):
    u0, u1 = x.tolist()
    q = u0 // u1  # noqa: F841 (unused: eager still raises for u1 == 0)
    return x + 1


@pytest.mark.parametrize("values", [[3, 2], [3, 0]])
def test_an_unused_division_still_raises_as_eager(values):
    compiled, graphs = _compiled(_unused_quotient)
    x = torch.tensor(values)
    expected, got = _outcome(_unused_quotient, x), _outcome(compiled, x)
    assert expected[1] is got[1]
    if expected[1] is None:
        assert_same(expected[0], got[0])
    assert len(graphs) == 1


def _row_by_item(x, index):
    idx = index.item()
    torch._check(idx >= 0)
    torch._check(idx < x.size(0))
    return x[idx] * 2, x[:, 1][idx]


@pytest.mark.parametrize("i", [1, 0, 2])
def test_indexing_by_an_item_value(monkeypatch, i):
    """`x[i]` with i read by `.item()` (checked in range) is x.select(0, i), as eager."""
    monkeypatch.setattr(kiln.config, "capture_scalar_outputs", True)
    compiled, graphs = _compiled(_row_by_item)
    a = torch.arange(9.0).reshape(3, 3)
    assert_same(_row_by_item(a, torch.tensor(i)), compiled(a, torch.tensor(i)))
    assert len(graphs) == 1
