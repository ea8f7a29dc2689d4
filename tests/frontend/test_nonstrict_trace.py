"""kiln.nonstrict_trace: a call of the copy it makes is one opaque call in the graph over the
flattened arguments (Note [nonstrict_trace: one opaque call over flattened arguments]); results,
mutated inputs and gradients equal eager's, and what kiln cannot pass is a break naming why."""

import pytest
import torch
from frontend_helpers import CountingBackend, run_and_compare

import kiln


def _untraceable(x, d):
    kiln.graph_break()  # traced, this would end the graph
    return x * d["a"] + d["b"][0], len(x.shape)


scaled = kiln.nonstrict_trace(_untraceable)


def call_with_a_dict_of_constants(x):
    out, n = scaled(x, {"a": 2, "b": [0.5]})
    return out + n


def call_with_a_dict_built_in_the_frame(x, y):
    d = {}
    d["a"] = y + 1  # a tensor the graph made
    d["b"] = (x.cos(),)
    out, n = scaled(x, d)
    return out * n


def compiled_calls(fn, *args):
    kiln.reset()
    backend = CountingBackend()
    out = kiln.compile(fn, backend=backend, fullgraph=True)(*args)
    return out, backend


def test_a_dict_of_constants_is_passed_flattened():
    x = torch.randn(4)
    run_and_compare(call_with_a_dict_of_constants, x, fullgraph=True)
    _, backend = compiled_calls(call_with_a_dict_of_constants, x)
    assert backend.calls == 1


def test_tensors_the_graph_made_reach_the_call_and_gradients_flow():
    x = torch.randn(4, requires_grad=True)
    y = torch.randn(4, requires_grad=True)
    xe, ye = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
    out, backend = compiled_calls(call_with_a_dict_built_in_the_frame, x, y)
    want = call_with_a_dict_built_in_the_frame(xe, ye)
    torch.testing.assert_close(out, want)
    out.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(x.grad, xe.grad)
    torch.testing.assert_close(y.grad, ye.grad)
    assert backend.calls == 1


def plus_42(x):
    kiln.graph_break()
    return x + 42


def mark_inside(x):
    return kiln.nonstrict_trace(plus_42)(x) + 1


def test_nonstrict_trace_called_in_compiled_code():
    x = torch.randn(3)
    run_and_compare(mark_inside, x, fullgraph=True)
    _, backend = compiled_calls(mark_inside, x)
    assert backend.calls == 1


def test_the_function_itself_stays_traced():
    kiln.nonstrict_trace(plus_42)  # the copy is dropped: plus_42 is traced as before
    with pytest.raises(kiln.exc.Unsupported, match="graph_break"):
        kiln.compile(lambda x: plus_42(x) * 2, backend="eager", fullgraph=True)(torch.ones(2))


def mark_a_local(x):
    def local(x):
        return x + 1

    return kiln.nonstrict_trace(local)(x)


class Point:
    def __init__(self, x):
        self.x = x


point_x = kiln.nonstrict_trace(lambda p: p.x)
make_point = kiln.nonstrict_trace(lambda x: Point(x + 1))


class _Held:
    def __init__(self, t, owner):
        self.t, self.owner = t, owner


torch.utils._pytree.register_pytree_node(
    _Held,
    lambda h: ((h.t,), h.owner),  # (its context: an object, not a constant)
    lambda ts, owner: _Held(ts[0], owner),
    serialized_type_name="tests.frontend.test_nonstrict_trace._Held",
)
held_t = kiln.nonstrict_trace(lambda h: h.t * 2)


def pass_held(x):
    return held_t(_Held(x, Point(x)))


@pytest.mark.parametrize(
    "fn, why",
    [
        (mark_a_local, "defined outside `torch.compile` region"),
        (lambda x: point_x(Point(x)), "Invalid input type for nonstrict_trace-ed function"),
        (lambda x: make_point(x).x, "Unsupported output type for nonstrict_trace-ed function"),
        (pass_held, "Invalid use of pytree_flatten with nonstrict_trace-ed function"),
    ],
)
def test_what_kiln_cannot_pass_is_a_break_naming_it(fn, why):
    x = torch.randn(3)
    with pytest.raises(kiln.exc.Unsupported, match=why):
        kiln.compile(fn, backend="eager", fullgraph=True)(x)
    kiln.reset()
    assert torch.equal(kiln.compile(fn, backend="eager")(x), fn(x))  # the break runs it eagerly


@kiln.nonstrict_trace
def _through_layers(layers, x):
    kiln.graph_break()  # (never traced)
    second = layers["second"]
    return layers["first"](x).relu() + second.weight.sum() + second.bias.sum()


class _Layers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleDict(
            {"first": torch.nn.Linear(3, 3), "second": torch.nn.Linear(3, 2)}
        )

    def forward(self, x):
        return _through_layers(self.layers, x)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
def test_an_nn_module_argument_and_its_parameters_gradients(backend):
    """A module is passed as itself, its parameters inputs of the node swapped into it around the
    call (meta ones for the meta run): outputs and parameter gradients are eager's."""
    mod = _Layers()
    x = torch.randn(4, 3)
    mod(x).sum().backward()
    expected = [p.grad.clone() for p in mod.parameters()]
    mod.zero_grad()
    out = kiln.compile(mod, backend=backend, fullgraph=True)(x)
    out.sum().backward()
    torch.testing.assert_close(out, mod(x))
    torch.testing.assert_close([p.grad for p in mod.parameters()], expected)


_OFFSET = torch.ones(1)


@kiln.nonstrict_trace
def _with_a_closed_over_tensor(x, y):
    kiln.graph_break()  # (never traced)
    return x * y + _OFFSET + torch.ones(1)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
def test_a_tensor_the_body_reads_from_elsewhere(backend):
    """The meta run sees a real tensor the body closes over (or makes) as a meta one: it raised
    "Tensor on device cpu is not on the expected device meta" (a break)."""
    x, y = torch.randn(5, requires_grad=True), torch.randn(5)
    fn = lambda x, y: _with_a_closed_over_tensor(x, y).sin()  # noqa: E731
    ref = fn(x, y)
    ref.sum().backward()
    expected, x.grad = x.grad, None
    out = kiln.compile(fn, backend=backend, fullgraph=True)(x, y)
    out.sum().backward()
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(x.grad, expected)


class _Num:
    def __init__(self, n):
        self.n = n

    @kiln.nonstrict_trace
    def shift(self, t):
        kiln.graph_break()  # (never traced)
        return t + self.n


torch.utils._pytree.register_pytree_node(
    _Num,
    lambda num: ((num.n,), None),
    lambda n, _: _Num(n[0]),
    serialized_type_name="tests.frontend.test_nonstrict_trace._Num",
)


class _Scaler(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3))

    @kiln.nonstrict_trace
    def scale(self, x):
        kiln.graph_break()  # (never traced)
        return x * self.w

    def forward(self, x):
        return self.scale(x) + _Num(2).shift(x)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_nonstrict_methods_of_a_module_and_of_a_pytree_class(backend):
    """`self` is an argument of the opaque call (a module's parameters its inputs, a registered
    class flattened): the graph_break inside is never traced, under fullgraph."""
    mod = _Scaler()
    x = torch.randn(3)
    mod(x).sum().backward()
    expected, mod.w.grad = mod.w.grad, None
    out = kiln.compile(mod, backend=backend, fullgraph=True)(x)
    out.sum().backward()
    torch.testing.assert_close(out, mod(x))
    torch.testing.assert_close(mod.w.grad, expected)


@kiln.nonstrict_trace
def _sizes_only(x):
    kiln.graph_break()  # (not traced: the body runs as eager runs it)
    return len(x.shape), 0.5, [x.shape[0]]


def _uses_sizes_only(x):
    rank, half, (n,) = _sizes_only(x)
    return x * rank + half + n


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
def test_a_result_of_constants_only(backend):
    x = torch.randn(6)
    kiln.reset()
    compiled = kiln.compile(_uses_sizes_only, backend=backend, fullgraph=True)
    torch.testing.assert_close(compiled(x), _uses_sizes_only(x))


class _Scale(torch._opaque_base.OpaqueBase):
    """An opaque value type: compared by value, safe to treat as a constant."""

    def __init__(self, n):
        self.n = n

    def __eq__(self, other):
        return isinstance(other, _Scale) and self.n == other.n

    def __hash__(self):
        return hash(self.n)

    def __fx_repr__(self):
        return f"_Scale({self.n})", {"_Scale": _Scale}


torch._library.opaque_object.register_opaque_type(_Scale, typ="value")


@kiln.nonstrict_trace
def _scaled_by(x, s):
    return x * s.n


def test_an_opaque_value_object_is_a_guarded_constant():
    x = torch.randn(4)
    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(lambda x, s: _scaled_by(x, s), backend=backend, fullgraph=True)
    for n in (3, 3, 5):
        torch.testing.assert_close(compiled(x, _Scale(n)), _scaled_by(x, _Scale(n)))
    assert backend.calls == 2  # an equal object reuses the entry, another value compiles


def test_an_opaque_object_made_in_the_frame_is_a_break_that_says_so():
    def fn(x):
        return _scaled_by(x, _Scale(2))

    kiln.reset()
    with pytest.raises(kiln.exc.Unsupported, match="opaque object was created"):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.ones(2))
    kiln.reset()
    torch.testing.assert_close(kiln.compile(fn, backend="eager")(torch.ones(2)), fn(torch.ones(2)))


@kiln.nonstrict_trace
def _plus_one_and_size(x):
    kiln.graph_break()  # (never traced)
    return x + 1, x.size(0)


@kiln.nonstrict_trace
def _head_if_long(x):
    if x.size(0) > 5:  # (a branch on a symbolic size in the meta run: guarded)
        return x[:2] * 1
    return x * 1


def _uses_sizes(x):
    t, n = _plus_one_and_size(x)
    y = _head_if_long(t)
    return y * n + y.shape[0]


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
def test_calls_in_a_frame_with_symbolic_sizes(backend):
    kiln.reset()
    compiled = kiln.compile(_uses_sizes, backend=backend, dynamic=True, fullgraph=True)
    for n in (10, 3, 7, 4):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x), _uses_sizes(x))
