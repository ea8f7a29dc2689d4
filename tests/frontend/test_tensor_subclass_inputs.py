"""Tensor-subclass inputs: traceable wrapper subclasses are captured with a fake of the subclass
(Note [Tensors: wrapper subclass inputs]); what kiln does not model breaks with its reason; plain
subclasses are traced through their __torch_function__ (test_torch_function_subclass.py)."""

import pytest
import torch

import kiln
from kiln.exc import Unsupported
from tests.frontend.subclass_helpers import Pair, Scaled, halves, pair

BACKENDS = ["eager", "aot_eager", "kiln"]


def _graphs():
    return kiln.counters["stats"]["unique_graphs"]


def _same(got, want):
    assert type(got) is type(want)
    if isinstance(want, Scaled):
        assert got.scale == want.scale
    for g, w in zip(halves(got), halves(want), strict=True):
        torch.testing.assert_close(g, w)


def mixed(x, y):
    z = (x * 2 + y).sin()
    return z, type(z), isinstance(z, Pair), type(x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_pair_with_a_plain_input_is_one_graph(backend):
    x, y = pair(), torch.randn(4)
    kiln.reset()
    got, want = kiln.compile(mixed, backend=backend, fullgraph=True)(x, y), mixed(x, y)
    _same(got[0], want[0])
    assert got[1:] == want[1:] == (Pair, True, Pair)
    assert _graphs() == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_scaled_keeps_its_ctx_and_recompiles_when_it_changes(backend):
    def fn(x, y):
        return x * y + 1

    y = torch.randn(4)
    kiln.reset()
    compiled = kiln.compile(fn, backend=backend, fullgraph=True)
    a = Scaled(torch.randn(4), 2.0)
    _same(compiled(a, y), fn(a, y))
    b = Scaled(torch.randn(4), 2.0)  # new values, same ctx: no recompile
    _same(compiled(b, y), fn(b, y))
    assert _graphs() == 1
    c = Scaled(torch.randn(4), 3.0)  # the scale is in the ctx: a recompile, its own results
    out = compiled(c, y)
    _same(out, fn(c, y))
    assert out.scale == 3.0
    assert _graphs() == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_inner_dtype_change_recompiles(backend):
    def fn(x):
        return x.cos() * 3

    kiln.reset()
    compiled = kiln.compile(fn, backend=backend, fullgraph=True)
    a = pair()
    _same(compiled(a), fn(a))
    b = pair(dtype=torch.float64)
    out = compiled(b)
    _same(out, fn(b))
    assert out.left.dtype == torch.float64
    assert _graphs() == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_nested_pair(backend):
    def fn(x, y):
        return (x + y).exp() - x

    x, y = Pair(pair(), pair()), torch.randn(4)
    kiln.reset()
    got, want = kiln.compile(fn, backend=backend, fullgraph=True)(x, y), fn(x, y)
    assert type(got.left) is type(got.right) is Pair
    _same(got.left, want.left)
    _same(got.right, want.right)
    assert _graphs() == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_break_with_a_subclass_live_across_it(backend):
    def fn(x):
        y = x.sin() * 2
        kiln.graph_break()
        return y + x, type(y)

    x = pair()
    kiln.reset()
    got, want = kiln.compile(fn, backend=backend)(x), fn(x)
    _same(got[0], want[0])
    assert got[1] is Pair
    assert _graphs() == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_dispatch_keys_of_a_subclass_result_fold(backend):
    def fn(x):
        return torch._C._dispatch_keys(x.sin() + 1)

    x = pair()
    kiln.reset()
    got = kiln.compile(fn, backend=backend, fullgraph=True)(x)
    assert got.raw_repr() == fn(x).raw_repr()


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_reach_the_subclass_input(backend):
    def fn(x, w):
        return (x * w).cos()

    a, b = torch.randn(4), torch.randn(4)
    w = torch.randn(4, requires_grad=True)
    x = Pair(a, b, requires_grad=True)
    xe = Pair(a, b, requires_grad=True)
    we = w.detach().clone().requires_grad_()
    kiln.reset()
    got, want = kiln.compile(fn, backend=backend, fullgraph=True)(x, w), fn(xe, we)
    _same(got, want)
    g = Pair(torch.randn(4), torch.randn(4))
    got.backward(g)
    want.backward(g)
    _same(x.grad, xe.grad)
    torch.testing.assert_close(w.grad, we.grad)


class Tagged(torch.Tensor):
    """A subclass with torch's default __torch_function__: results are Tagged too."""


def kinds(x):
    y = x.sin() + 1
    return type(x), type(y), isinstance(y, Tagged), y


@pytest.mark.parametrize("backend", BACKENDS)
def test_plain_subclass_traced_with_eager_results(backend):
    x = torch.randn(3).as_subclass(Tagged)
    kiln.reset()
    got = kiln.compile(kinds, backend=backend)(x)
    want = kinds(x)
    assert got[:3] == want[:3] == (Tagged, Tagged, True)
    assert type(got[3]) is Tagged
    torch.testing.assert_close(got[3].as_subclass(torch.Tensor), want[3].as_subclass(torch.Tensor))


class PairWithTorchFunction(Pair):
    """A Pair whose own __torch_function__ doubles every result: not modelled."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs or {})
        return out * 2 if isinstance(out, torch.Tensor) else out

    @staticmethod
    def __tensor_unflatten__(inners, ctx, size, stride):
        return PairWithTorchFunction(inners["left"], inners["right"], size, stride)


def _reads_left(x):
    return x.left + 1


def _adds_in_place(x):
    x.add_(1)
    return x * 2


def _adds_with_operator(x):
    y = x * 2
    y += 1
    return y


@pytest.mark.parametrize(
    "fn, value, reason",
    [
        (kinds, PairWithTorchFunction(torch.ones(2), torch.ones(2)), "its own __torch_function__"),
        (_adds_in_place, pair(), "in-place Tensor.add_.. on a tensor subclass .Pair."),
        (_adds_with_operator, pair(), "writes into a tensor subclass value"),
    ],
)
def test_what_is_not_modelled_breaks_with_its_reason(fn, value, reason):
    kiln.reset()
    with pytest.raises(Unsupported, match=reason):
        kiln.compile(fn, backend="eager", fullgraph=True)(value)


def test_what_is_not_modelled_still_runs_as_eager():
    for fn in (_adds_with_operator,):
        kiln.reset()
        x = pair()
        _same(kiln.compile(fn, backend="eager")(x), fn(x))
    x, xe = pair(), None
    xe = Pair(x.left.clone(), x.right.clone())
    kiln.reset()
    _same(kiln.compile(_adds_in_place, backend="eager")(x), _adds_in_place(xe))
    _same(x, xe)


def test_symbolic_sizes_of_a_subclass_input_break():
    def fn(x):
        return x * 2

    x = pair(6)
    kiln.mark_dynamic(x, 0)
    kiln.reset()
    with pytest.raises(Unsupported, match="symbolic sizes of a tensor subclass input .Pair."):
        kiln.compile(fn, backend="eager", fullgraph=True)(x)


@pytest.mark.parametrize("dynamic", [None, True])
def test_subclass_inputs_of_changing_sizes_keep_static_sizes(dynamic):
    def fn(x, y):
        return x * x.size()[0] + y.sum()

    kiln.reset()
    compiled = kiln.compile(fn, backend="eager", fullgraph=True, dynamic=dynamic)
    for n in (3, 4, 5):
        x, y = pair(n), torch.randn(n)
        _same(compiled(x, y), fn(x, y))  # (the size read is each call's own)
    assert kiln.counters["stats"]["unique_graphs"] == 3


def test_plain_tensors_and_parameters_still_one_graph():
    p = torch.nn.Parameter(torch.randn(3))

    def fn(x):
        return x * p

    kiln.reset()
    out = kiln.compile(fn, backend="eager", fullgraph=True)(torch.randn(3))
    assert type(out) is torch.Tensor


class PairWithOwnAdd(Pair):
    """A Pair whose `+` is its own Python code: not modelled."""

    def __add__(self, other):
        return self * 10

    @staticmethod
    def __tensor_unflatten__(inners, ctx, size, stride):
        return PairWithOwnAdd(inners["left"], inners["right"], size, stride)


def test_a_subclass_overriding_a_tensor_method_breaks_and_runs_its_own_code():
    def fn(x):
        return x + 1

    x = PairWithOwnAdd(torch.randn(3), torch.randn(3))
    kiln.reset()
    with pytest.raises(Unsupported, match=r"PairWithOwnAdd\) overrides Tensor.__add__"):
        kiln.compile(fn, backend="eager", fullgraph=True)(x)
    kiln.reset()
    got, want = kiln.compile(fn, backend="eager")(x), fn(x)
    torch.testing.assert_close(got.left, want.left)
    torch.testing.assert_close(got.left, x.left * 10)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_parameter_of_a_subclass_is_an_instance_of_parameter(backend):
    # Note [Builtins: isinstance of Parameter and Buffer]: Parameter(pair) is a Pair flagged
    # `_is_param`, and isinstance(p, Parameter) is True for it (PyTorch's test_subclasses.py)
    weight = torch.nn.Parameter(pair())
    plain = torch.randn(4)
    assert type(weight) is not torch.nn.Parameter

    def f(w, t):
        a = w + 1 if isinstance(w, torch.nn.Parameter) else w + 2
        b = t * 3 if isinstance(t, (torch.nn.Parameter, torch.nn.Buffer)) else t * 4
        c = 5 if isinstance(w, torch.nn.Buffer) else 6
        return a, b, c

    kiln.reset()
    got = kiln.compile(f, backend=backend)(weight, plain)
    want = f(weight, plain)
    for g, w in zip(got[:2], want[:2]):
        torch.testing.assert_close(g, w)
    assert got[2] == want[2] == 6


def _reads_state(x):
    y = x * 2  # (a subclass value the graph made)
    return x.left + 1, y.right, x.left is x.left, x.left is x.right, x.left


def _reads_scale(x):
    return x.data_ * x.scale


@pytest.mark.parametrize("backend", BACKENDS)
def test_inner_tensors_and_ctx_attributes_are_read_in_the_graph(backend):
    # (Note [Tensors: a wrapper's own state])
    x = pair()
    kiln.reset()
    got = kiln.compile(_reads_state, backend=backend, fullgraph=True)(x)
    want = _reads_state(x)
    for g, w in zip(got[:2], want[:2]):
        torch.testing.assert_close(g, w)
    assert got[2:4] == want[2:4] == (True, False)
    assert got[4] is x.left  # (an input's inner tensor: the object itself)
    s = Scaled(torch.randn(3), 2.5)
    torch.testing.assert_close(
        kiln.compile(_reads_scale, backend=backend, fullgraph=True)(s), _reads_scale(s)
    )


def _writes_inner(x):
    x.left.add_(1)
    return x.right * 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_writes_into_an_inner_tensor_reach_the_input(backend):
    x = pair()
    xe = Pair(x.left.clone(), x.right.clone())
    kiln.reset()
    got = kiln.compile(_writes_inner, backend=backend, fullgraph=True)(x)
    torch.testing.assert_close(got, _writes_inner(xe))
    _same(x, xe)


def _makes_pairs(a, b):
    p = Pair(a * 2, b)  # (made in the frame: the constructor is one graph call)
    q = p + 1
    return q, q.left, Scaled(a, 3.0) * 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_wrappers_made_in_the_frame(backend):
    # (Note [Tensors: wrappers made in the frame])
    a, b = torch.randn(4), torch.randn(4)
    kiln.reset()
    got = kiln.compile(_makes_pairs, backend=backend, fullgraph=True)(a, b)
    want = _makes_pairs(a, b)
    _same(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])
    _same(got[2], want[2])
    assert _graphs() == 1
