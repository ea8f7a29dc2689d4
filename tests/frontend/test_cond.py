"""torch.cond in compiled code: one graph, each branch a subgraph, exactly one branch run
(Note [Control flow: tracing torch.cond]); eager torch.cond is the oracle."""

import pytest
import torch

import kiln
from kiln.exc import Unsupported
from kiln.symbolic import control_ops
from tests.frontend.frontend_helpers import CountingBackend, assert_same, run_and_compare

BACKENDS = ["eager", "aot_eager", "kiln"]


def _cond_nodes(gm):
    return [n for n in gm.graph.nodes if n.target is control_ops.COND]


def _compiled(fn, backend):
    kiln.reset()
    return kiln.compile(fn, backend=backend, fullgraph=True)


def _sin_or_cos(x):
    return torch.cond(x.sum() > 0, lambda a: a.sin(), lambda a: a.cos(), (x,)) * 2


def test_data_dependent_pred_is_one_graph():
    backend = CountingBackend()
    compiled = run_and_compare(_sin_or_cos, torch.ones(4), backend=backend, expected_graphs=1)
    assert len(_cond_nodes(backend.graphs[0])) == 1
    # the other branch, same graph (no recompile: the predicate is data)
    assert_same(_sin_or_cos(-torch.ones(4)), compiled(-torch.ones(4)))
    assert kiln.counters["stats"]["unique_graphs"] == 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_both_branches_every_backend(backend, sign):
    w = torch.randn(5)
    b = torch.nn.Linear(5, 5)

    def yes(a):
        return b(a) * w  # a module's parameters and a closed-over tensor: lifted

    def no(a):
        return a.exp() - w

    def fn(x):
        return torch.cond(x.mean() > 0, yes, no, (x,)) + 1

    x = sign * torch.rand(3, 5)
    compiled = _compiled(fn, backend)
    torch.testing.assert_close(compiled(x), fn(x))
    torch.testing.assert_close(compiled(-x), fn(-x))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_gradients_equal_eager(backend, sign):
    w = torch.randn(4, requires_grad=True)

    def yes(a, c):
        return (a * c).sin() * w

    def fn(x, y):
        return torch.cond(x.sum() > 0, yes, lambda a, c: a.exp() + c, (x, y)).sum()

    compiled = _compiled(fn, backend)
    grads = []
    for f in (fn, compiled):
        x = (sign * torch.arange(1.0, 5.0)).requires_grad_()
        y = torch.linspace(-1, 1, 4).requires_grad_()
        w.grad = None
        f(x, y).backward()
        grads.append((x.grad, y.grad, w.grad))
    assert_same(grads[0], grads[1])


@pytest.mark.parametrize("backend", ["aot_eager", "kiln"])
def test_branches_are_compiled_by_the_backend(backend):
    def fn(x):
        return torch.cond(x.sum() > 0, lambda a: a.sin() + 1, lambda a: a.cos() - 1, (x,))

    compiled = _compiled(fn, backend)
    x = torch.randn(8)
    for v in (x.abs(), -x.abs()):
        torch.testing.assert_close(compiled(v), fn(v))
    (entry,) = [
        b for b in control_ops._BRANCHES.values() if b.true_fn.code.count("sin") and b.compiler
    ][-1:]
    assert len(entry.compiled) == 2
    assert not any(isinstance(f, torch.fx.GraphModule) for f in entry.compiled.values())


def _halves(a):
    return a.sum(0) / 2


def _doubles(a):
    return a.sum(0) * 2


def test_same_branches_on_other_shapes_are_other_entries():
    def fn(x):
        return torch.cond(x.sum() > 0, _halves, _doubles, (x,))

    kiln.reset()
    compiled = kiln.compile(fn, backend="kiln", fullgraph=True, dynamic=False)
    for rows in (3, 5):  # the same branch code; each shape its own compiled branch
        x = torch.rand(rows, 4)
        torch.testing.assert_close(compiled(x), fn(x))
        torch.testing.assert_close(compiled(x.t()), fn(x.t()))


@pytest.mark.parametrize("backend", BACKENDS)
def test_only_one_branch_runs(backend):
    bad_index = torch.tensor([100])

    def out_of_range(a):
        return a.index_select(0, bad_index)  # raises if it ever runs

    def fine(a):
        return a[:1] * 2

    def fn(x):
        return torch.cond(x.sum() < -1000, out_of_range, fine, (x,))

    x = torch.randn(6)
    torch.testing.assert_close(_compiled(fn, backend)(x), fn(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_nan_of_the_other_branch_does_not_leak_into_gradients(backend):
    def fn(x):
        return torch.cond(x.min() > 0, lambda a: a.sqrt(), lambda a: a * 3, (x,)).sum()

    compiled = _compiled(fn, backend)
    x = -torch.rand(5).requires_grad_()  # (sqrt of a negative: NaN, and a NaN gradient)
    x = x.detach().requires_grad_()
    compiled(x).backward()
    assert torch.equal(x.grad, torch.full((5,), 3.0))


@pytest.mark.parametrize("backend", BACKENDS)
def test_tuple_and_list_outputs(backend):
    def fn(x):
        t = torch.cond(x.sum() > 0, lambda a: (a + 1, a * 2), lambda a: (a - 1, a / 2), (x,))
        lst = torch.cond(x.sum() > 0, lambda a: [a.sum()], lambda a: [a.prod()], (x,))
        return t, lst

    x = torch.randn(3)
    compiled = _compiled(fn, backend)
    for v in (x, -x):
        assert_same(fn(v), compiled(v))


def test_branch_returning_its_operand_breaks():
    def fn(x):
        return torch.cond(x.sum() > 0, lambda a: a, lambda a: a + 1, (x,))

    _breaks_with(fn, torch.ones(3), match="returns an alias of its input")


def test_branch_returning_a_view_of_a_closed_over_tensor_breaks():
    w = torch.randn(4)

    def view(a):
        return w[:2]

    def fn(x):
        return torch.cond(x.sum() > 0, view, lambda a: a * 2, (x,))

    kiln.reset()
    with pytest.raises(Unsupported, match="returns an alias of its input"):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.ones(2))


def test_nested_cond():
    def fn(x):
        def outer_true(a):
            return torch.cond(a.max() > 2, lambda b: b * 10, lambda b: b * 100, (a,))

        return torch.cond(x.sum() > 0, outer_true, lambda a: -a, (x,))

    for backend in BACKENDS:
        compiled = _compiled(fn, backend)
        for x in (torch.tensor([1.0, 3.0]), torch.tensor([1.0, 1.0]), torch.tensor([-1.0, 0.0])):
            torch.testing.assert_close(compiled(x), fn(x))


def test_python_bool_pred_is_inlined():
    def fn(x, flag):
        return torch.cond(flag, lambda a: a.sin(), lambda a: a.cos(), (x,))

    for flag in (True, False):
        backend = CountingBackend()
        run_and_compare(fn, torch.randn(3), flag, backend=backend, expected_graphs=1)
        assert not _cond_nodes(backend.graphs[0])


def test_symbolic_pred_is_guarded():
    def fn(x):
        return torch.cond(x.shape[0] > 4, lambda a: a.sin(), lambda a: a.cos(), (x,))

    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(fn, backend=backend, dynamic=True)
    for n in (6, 8, 3, 2):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x), fn(x))
    assert all(not _cond_nodes(gm) for gm in backend.graphs)


def test_one_element_int_pred():
    def fn(x, p):
        return torch.cond(p, lambda a: a + 1, lambda a: a - 1, (x,))

    for p in (torch.tensor(3), torch.tensor([0])):
        run_and_compare(fn, torch.randn(2), p, expected_graphs=1, fullgraph=True)


def _breaks_with(fn, *args, match):
    """fn breaks the graph with a reason matching `match`; the fallback equals eager."""
    kiln.reset()
    with pytest.raises(Unsupported, match=match):
        kiln.compile(fn, backend="eager", fullgraph=True)(*args)
    kiln.reset()
    compiled = kiln.compile(fn, backend="eager")
    try:
        expected = fn(*args)
    except Exception as e:
        with pytest.raises(type(e)):
            compiled(*args)
    else:
        assert_same(expected, compiled(*args))


def test_branches_of_different_shapes_break():
    def fn(x):
        return torch.cond(x.sum() > 0, lambda a: a.sum(), lambda a: a, (x,))

    _breaks_with(fn, torch.randn(3), match="output 0 differs between the branches")


def test_branch_with_side_effect_breaks():
    seen = []

    def noisy(a):
        seen.append(1)
        return a + 1

    def fn(x):
        return torch.cond(x.sum() > 0, noisy, lambda a: a - 1, (x,))

    _breaks_with(fn, torch.ones(3), match="true_fn has side effects")


def test_branch_mutating_its_operand_breaks():
    def fn(x):
        def mut(a):
            a.add_(1)
            return a.sin()

        return torch.cond(x.sum() > 0, mut, lambda a: a.cos(), (x,))

    kiln.reset()  # (torch.cond refuses the write in grad mode: Note [Control flow: a branch ...])
    with pytest.raises(Unsupported, match="writes a tensor it is given in grad mode"):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.ones(3))


def test_untraceable_branch_breaks_at_the_call():
    def fn(x):
        def reads(a):
            return a * round(a.sum().item())

        return torch.cond(x.sum() > 0, reads, lambda a: a, (x,))

    kiln.reset()
    with pytest.raises(Unsupported, match="torch.cond: true_fn is not traceable"):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.ones(3))


def test_non_tensor_operand_breaks():
    def fn(x):
        return torch.cond(x.sum() > 0, lambda a, n: a + n, lambda a, n: a - n, (x, 2))

    _breaks_with(fn, torch.ones(3), match="operand .* is not a tensor")


def test_while_loop_with_an_int_carried_value_is_a_named_break():
    def fn(x):
        return torch.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * 2), (0, x))

    kiln.reset()
    with pytest.raises(Unsupported, match="while_loop carried value .* is not a tensor"):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.ones(2))


@pytest.mark.parametrize("backend", BACKENDS)
def test_while_loop_runs_at_run_time(backend):
    limit = torch.tensor(50.0)

    def body(i, a):
        return i + 1, a * 2 + limit / 100

    def below(i, a):
        return a.sum() < limit

    def fn(x):
        i, a = torch.while_loop(below, body, (torch.zeros((), dtype=torch.int64), x))
        return i, a + 1

    compiled = _compiled(fn, backend)
    for x in (torch.ones(2), torch.full((2,), 0.1), torch.full((2,), 30.0)):  # 5, 8, 0 trips
        assert_same(fn(x), compiled(x))


def test_while_loop_needing_grad_is_a_named_break():
    def fn(x):
        return torch.while_loop(lambda a: a.sum() < 30, lambda a: (a * 2,), (x,))

    kiln.reset()
    with pytest.raises(Unsupported, match="require grad"):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.ones(2, requires_grad=True))


def test_double_backward_is_refused():
    def fn(x):
        return torch.cond(x.sum() > 0, lambda a: a**3, lambda a: a**2, (x,)).sum()

    compiled = _compiled(fn, "eager")
    x = torch.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="double backward through torch.cond"):
        torch.autograd.grad(compiled(x), x, create_graph=True)
    (g,) = torch.autograd.grad(compiled(x), x)  # a first-order gradient is fine
    assert torch.equal(g, torch.full((2,), 3.0))


def _raises(a):
    raise ValueError("no")


def test_branch_raising_breaks_and_eager_raises():
    def fn(x):
        return torch.cond(x.sum() > 0, _raises, lambda a: a - 1, (x,))

    kiln.reset()
    with pytest.raises(Unsupported, match="true_fn raises an exception"):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.ones(3))
    kiln.reset()
    with pytest.raises(Exception):  # (what eager torch.cond raises, from Python)
        kiln.compile(fn, backend="eager")(torch.ones(3))


def test_cond_in_a_frame_with_symbolic_sizes():
    def fn(x, y):
        z = x.sum(0)  # x has a dynamic first dim
        return z + torch.cond(y.sum() > 0, lambda a: a * 2, lambda a: a / 2, (y,))

    kiln.reset()
    compiled = kiln.compile(fn, backend="eager")
    y = torch.randn(4)
    for n in (3, 5, 7):
        x = torch.randn(n, 4)
        torch.testing.assert_close(compiled(x, y), fn(x, y))
        torch.testing.assert_close(compiled(x, -y), fn(x, -y))
    assert kiln.counters["stats"]["graph_breaks"] == 0


_COND_OP = torch.cond.__globals__["cond_op"]  # what eager torch.cond compiles a call of


def cond_operator_called_directly(x):
    return _COND_OP(x.sum() > 0, lambda t: t + 1, lambda t: t - 1, (x * 2,))


def test_cond_operator_called_directly_is_one_graph():
    for x in (torch.ones(3), -torch.ones(3)):
        run_and_compare(cond_operator_called_directly, x, fullgraph=True, expected_graphs=1)
