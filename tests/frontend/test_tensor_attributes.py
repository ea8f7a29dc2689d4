"""Python attributes stored on tensors inside compiled frames (`x.foo = v`, `y.grad = g`): read
back in the frame, kept on the tensor after it, read from an input's own __dict__ (guarded)
(Note [Tensors: attributes stored in the frame]). Eager is the oracle."""

import copy

import pytest
import torch

import kiln

BACKENDS = ["eager", "aot_eager", "kiln"]


@pytest.fixture(autouse=True)
def fresh():
    kiln.reset()


def attrs(t):
    """A tensor's own attributes, tensors among them compared by value."""
    return {
        k: (v.detach().clone() if isinstance(v, torch.Tensor) else v) for k, v in vars(t).items()
    }


def assert_same_attrs(a, b):
    assert list(vars(a)) == list(vars(b))
    for (k, v), w in zip(attrs(a).items(), attrs(b).values()):
        if isinstance(v, torch.Tensor):
            torch.testing.assert_close(w, v, msg=k)
        else:
            assert v == w, k


def compare(fn, make_args, backend="eager", breaks=0):
    """fn eager and compiled (fullgraph unless breaks) on fresh args: outputs, args, attributes."""
    eager_args, compiled_args = make_args(), make_args()
    expected = fn(*eager_args)
    compiled = kiln.compile(fn, backend=backend, fullgraph=not breaks)
    got = compiled(*compiled_args)
    assert kiln.counters["stats"]["graph_breaks"] == breaks
    for a, b in zip(expected, got):
        if isinstance(a, torch.Tensor):
            torch.testing.assert_close(b, a)
            assert_same_attrs(a, b)
        else:
            assert a == b
    for a, b in zip(eager_args, compiled_args):
        if isinstance(a, torch.Tensor):
            torch.testing.assert_close(b, a)
            assert_same_attrs(a, b)
    return eager_args, compiled_args


def store_on_input(x, flag):
    x.offloading = flag
    return x + 1, x.offloading


def store_on_intermediate(x, flag):
    y = x + 1
    y.offloading = flag
    y.grad = x
    y.count = 1
    y.count = y.count + 1
    return y, y.grad * 2, hasattr(y, "count"), getattr(y, "missing", "dflt")


def store_then_break(x):
    x.scale = 3
    y = x * 2
    print("a graph break")
    return y * x.scale, x.scale


def store_tensor_value(x):
    y = x.sin()
    x.cached = y
    y.source_tensor = x
    return x.cached + 1, y


@pytest.mark.parametrize("fn", [store_on_input, store_on_intermediate])
def test_attribute_stored_in_the_frame_is_kept(fn):
    compare(fn, lambda: (torch.ones(5), True))


def test_attribute_holding_tensors():
    compare(store_tensor_value, lambda: (torch.arange(3.0),))


def test_attribute_stored_before_a_break():
    compare(store_then_break, lambda: (torch.ones(3),), breaks=1)


def scaled(x):
    return x * x.scale + hasattr(x, "scale")


def with_scale(value):
    t = torch.ones(2)
    t.scale = value
    return t


def test_attribute_of_an_input_is_read_and_guarded():
    compiled = kiln.compile(scaled, backend="eager", fullgraph=True)
    for value in (2, 3, 2.5, torch.tensor(4.0), 3):
        t = with_scale(value)
        torch.testing.assert_close(compiled(t), scaled(t))
    assert kiln.counters["stats"]["unique_graphs"] == 4  # 2, 3, 2.5, a tensor; 3 again is hit


def test_hasattr_of_an_input_follows_its_dict():
    def fn(x):
        return x + 2 if hasattr(x, "test") else x + 1

    compiled = kiln.compile(fn, backend="eager", fullgraph=True)
    plain = torch.ones(2)
    marked = torch.ones(2)
    marked.test = None
    for t in (plain, marked, plain):
        torch.testing.assert_close(compiled(t), fn(t))


add_one_param = torch.nn.Parameter(torch.ones(1))
add_one_param.add_one = lambda t: t + 1


def call_stored_function(x):
    return add_one_param.add_one(add_one_param) + x


def test_function_stored_on_a_parameter_is_called():
    compare(call_stored_function, lambda: (torch.ones(1),))


class Tagging(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.register_buffer("steps", torch.zeros(()))

    def forward(self, x):
        self.lin.weight.tag = "seen"
        self.steps.last_input = x
        return self.lin(x), self.lin.weight.tag


@pytest.mark.parametrize("backend", BACKENDS)
def test_attributes_on_module_tensors(backend):
    torch.manual_seed(0)
    m = Tagging()
    mc = copy.deepcopy(m)
    x = torch.randn(2, 3, requires_grad=True)
    xc = x.detach().clone().requires_grad_()
    expected = m(x)
    got = kiln.compile(mc, backend=backend, fullgraph=True)(xc)
    torch.testing.assert_close(got[0], expected[0])
    assert got[1] == expected[1] == mc.lin.weight.tag
    assert mc.steps.last_input is xc
    expected[0].sum().backward()
    got[0].sum().backward()
    torch.testing.assert_close(xc.grad, x.grad)
    torch.testing.assert_close(mc.lin.weight.grad, m.lin.weight.grad)


def grad_stored_on_a_leaf(x, w):
    x.grad = w * 2
    w._grad = None
    return x.grad + x, w.grad


@pytest.mark.parametrize("backend", BACKENDS)
def test_grad_stored_on_an_input(backend):
    def make():
        return torch.ones(3, requires_grad=True), torch.full((3,), 2.0, requires_grad=True)

    eager_args, compiled_args = make(), make()
    expected = grad_stored_on_a_leaf(*eager_args)
    got = kiln.compile(grad_stored_on_a_leaf, backend=backend, fullgraph=True)(*compiled_args)
    torch.testing.assert_close(got[0], expected[0])
    assert got[1] is None and expected[1] is None
    torch.testing.assert_close(compiled_args[0].grad, eager_args[0].grad)
    assert compiled_args[1].grad is None
    expected[0].sum().backward()
    got[0].sum().backward()
    torch.testing.assert_close(compiled_args[1].grad, eager_args[1].grad)
