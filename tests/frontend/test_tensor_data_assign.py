"""`x.data = y` and `.data` reads inside compiled frames: x takes y's storage and keeps its
autograd identity; the store is replayed after the graph in program order; while grads flow an op
on x is a graph break (Note [Tensors: attributes stored in the frame]). Eager is the oracle."""

import copy

import pytest
import torch

import kiln

BACKENDS = ["eager", "aot_eager", "kiln"]


@pytest.fixture(autouse=True)
def fresh():
    kiln.reset()


def assert_same(a, b):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor)
        torch.testing.assert_close(b, a)
        assert (a.dtype, a.requires_grad, type(a)) == (b.dtype, b.requires_grad, type(b))
    elif isinstance(a, tuple):
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    else:
        assert a == b


def shares(a, b):
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def compare(fn, make_args, backend="eager", breaks=0, calls=3, graphs=1):
    """fn eager and compiled (fullgraph unless breaks) on fresh args each call: outputs, args,
    which args share storage afterwards; `graphs` compiled graphs for every call."""
    compiled = kiln.compile(fn, backend=backend, fullgraph=not breaks)
    for _ in range(calls):
        eager_args, compiled_args = make_args(), make_args()
        assert_same(fn(*eager_args), compiled(*compiled_args))
        for a, b in zip(eager_args, compiled_args):
            assert_same(a, b)
        n = len(eager_args)
        for i in range(n):
            for j in range(i + 1, n):
                assert shares(eager_args[i], eager_args[j]) == shares(
                    compiled_args[i], compiled_args[j]
                )
    stats = kiln.counters["stats"]
    assert stats["graph_breaks"] == breaks and stats["unique_graphs"] == graphs
    return eager_args, compiled_args


def two(requires_grad=False):
    return lambda: (
        torch.ones(6, requires_grad=requires_grad),
        torch.arange(6.0).requires_grad_(requires_grad),
    )


def set_then_mutate(x, y):
    x.data = y
    x.add_(1)
    return x * 2


def set_then_replace_source(x, y):
    x.data = y
    x.mul_(3)
    y.data = torch.zeros(2)
    return x + 1, y + 1


def set_to_made_value(x, y):
    x.data = x * 2 + y
    return x.sum(), x.shape


def set_other_dtype(x, y):
    x.data = y.to(dtype=torch.bfloat16)
    return x.dtype, x + 1


def identity_kept(x, y):
    z = x
    x.data = y
    return torch.tensor(x is z), x.dtype


@pytest.mark.parametrize(
    "fn", [set_then_mutate, set_then_replace_source, set_to_made_value, set_other_dtype]
)
def test_data_assignment_without_grads(fn):
    compare(fn, two())


def set_and_return(x, y):
    x.data = y
    y.data = torch.zeros([0])
    return x


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [set_and_return, identity_kept])
def test_data_assignment_on_leaves_that_require_grad(fn, backend):
    eager_args, compiled_args = compare(fn, two(requires_grad=True), backend)
    g = torch.randn(6)
    eager_args[0].backward(g)
    compiled_args[0].backward(g)
    torch.testing.assert_close(compiled_args[0].grad, eager_args[0].grad)


def set_then_compute(x, y):
    x.data = y
    return (x * x).sum(), x.requires_grad


@pytest.mark.parametrize("backend", BACKENDS)
def test_op_after_data_assignment_with_grads_breaks(backend):
    """The op would record its gradient edge to y: it runs in Python, as eager does."""
    eager_args, compiled_args = compare(set_then_compute, two(requires_grad=True), backend, 1, 1)
    [(reason, _)] = kiln.explain(set_then_compute)(*two(requires_grad=True)()).break_reasons
    assert ".data was assigned while grads flow" in reason
    set_then_compute(*eager_args)[0].backward()
    kiln.compile(set_then_compute, backend=backend)(*compiled_args)[0].backward()
    torch.testing.assert_close(compiled_args[0].grad, eager_args[0].grad)
    assert compiled_args[1].grad is None and eager_args[1].grad is None


class Reset(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)

    def forward(self, x):
        self.lin.weight.data = x
        w = self.lin.weight
        return isinstance(w, torch.nn.Parameter), w.requires_grad, w.shape


@pytest.mark.parametrize("backend", BACKENDS)
def test_data_assignment_on_a_parameter(backend):
    m = Reset()
    mc = copy.deepcopy(m)
    x = torch.randn(2, 2)
    expected = m(x)
    got = kiln.compile(mc, backend=backend, fullgraph=True)(x.clone())
    assert got == expected
    assert type(mc.lin.weight) is torch.nn.Parameter and mc.lin.weight.requires_grad
    torch.testing.assert_close(mc.lin.weight, m.lin.weight)
    m.lin(torch.ones(1, 2)).sum().backward()
    mc.lin(torch.ones(1, 2)).sum().backward()
    torch.testing.assert_close(mc.lin.weight.grad, m.lin.weight.grad)


def write_through_data(x):
    x.data.mul_(2)
    d = x.data
    return x + 1, d is x


def test_data_read_without_grads_is_an_alias():
    compare(write_through_data, lambda: (torch.ones(3),))
