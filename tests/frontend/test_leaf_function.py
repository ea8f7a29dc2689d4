"""kiln.leaf_function: one opaque kiln::leaf_call node whose real body runs at run time."""

import pytest
import torch

import kiln

CALLS = []


@kiln.leaf_function
def scale_and_sum(x, y, k):
    CALLS.append(1)
    return (x * y + k, x.sum())


@scale_and_sum.register_fake
def _scale_and_sum_fake(x, y, k):
    return (torch.empty_like(x), x.new_empty(()))


def use_leaf(x, y):
    a, b = scale_and_sum(x.sin(), y, 2)
    return a.cos() + b


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
def test_outputs_side_effects_and_gradients_match_eager(backend):
    x = torch.randn(3, requires_grad=True)
    y = torch.randn(3, requires_grad=True)
    ref = use_leaf(x, y)
    ref.sum().backward()
    grads = (x.grad, y.grad)
    x.grad = y.grad = None
    CALLS.clear()
    compiled = kiln.compile(use_leaf, backend=backend, fullgraph=True)
    out = compiled(x, y)
    assert len(CALLS) == 1  # the real body ran once, at run time
    out.sum().backward()
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close((x.grad, y.grad), grads)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, y), use_leaf(x, y))
    assert len(CALLS) == 3


@kiln.leaf_function
def no_fake(x):
    return (x + 1,)


def test_a_leaf_without_a_fake_raises_in_eager():
    with pytest.raises(ValueError, match="requires a fake implementation"):
        no_fake(torch.ones(2))


def test_mutates_args_must_name_a_parameter():
    with pytest.raises(ValueError, match="not a parameter"):
        kiln.leaf_function(lambda x: x, mutates_args={"buf"})


@kiln.leaf_function(mutates_args={"buf"})
def accumulate(x, buf):
    buf.add_(x)
    return {"double": x * 2, "total": x.sum()}


@accumulate.register_fake
def _accumulate_fake(x, buf):
    return {"double": torch.empty_like(x), "total": x.new_empty(())}


def uses_accumulate(x, buf):
    out = accumulate(x.cos(), buf)
    return out["double"] + out["total"], buf * 1


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
def test_mutated_argument_and_dict_output_match_eager(backend):
    x = torch.randn(3)
    expected_buf, got_buf = torch.zeros(3), torch.zeros(3)
    expected = uses_accumulate(x, expected_buf)
    got = kiln.compile(uses_accumulate, backend=backend, fullgraph=True)(x, got_buf)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got_buf, expected_buf)  # the mutation reached the caller's tensor


def test_leaf_and_nonstrict_exclude_each_other():
    with pytest.raises(ValueError, match="both marked as @leaf_function and @nonstrict_trace"):
        kiln.leaf_function(kiln.nonstrict_trace(lambda x: x))
    with pytest.raises(ValueError, match="both marked as @leaf_function and @nonstrict_trace"):
        kiln.nonstrict_trace(kiln.leaf_function(lambda x: x))


@kiln.leaf_function
def _returns_a_dict(x):
    return {"a": x, "b": x * 2}


@_returns_a_dict.register_fake
def _returns_a_tuple_fake(x):
    return (x, x * 2)


@kiln.leaf_function
def _returns_double(x):
    return (x.double(),)


@_returns_double.register_fake
def _returns_float_fake(x):
    return (torch.empty_like(x),)


@pytest.mark.parametrize(
    "leaf, error, match",
    [
        (_returns_a_dict, AssertionError, "output structure mismatch"),
        (_returns_double, RuntimeError, "Dtype mismatch in output 0"),
    ],
)
def test_a_real_output_unlike_the_fake_raises(leaf, error, match):
    """A user's mistake, raised to the caller: it was taken for kiln's own failure in the first
    run, so the frame ran eagerly with a warning."""
    compiled = kiln.compile(lambda x: leaf(x), backend="eager", fullgraph=True)
    for _ in range(2):
        with pytest.raises(error, match=match):
            compiled(torch.randn(3))


@kiln.leaf_function
def _adds_in_place(x):
    x.add_(1)
    return (x,)


@_adds_in_place.register_fake
def _adds_in_place_fake(x):
    return (torch.empty_like(x),)


def test_an_undeclared_in_place_change_raises_in_eager():
    """Traced calls copy back only what mutates_args names, so the eager call checks it too."""
    with pytest.raises(RuntimeError, match="Undeclared in-place mutation"):
        _adds_in_place(torch.zeros(2))


_WEIGHT = torch.randn(3, 3, requires_grad=True)
_BASE = torch.randn(3, 4, requires_grad=True)
_DERIVED = _BASE * 3  # (not a leaf: made before the call, requires grad)


@kiln.leaf_function
def _uses_closures(x):
    return (x @ _WEIGHT, x @ _DERIVED)


@_uses_closures.register_fake
def _uses_closures_fake(x):
    return (x.new_empty(x.shape[0], 3), x.new_empty(x.shape[0], 4))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_gradients_the_body_would_lose_raise(backend):
    """Note [leaf_function: escaped gradients]: called eagerly, _WEIGHT and _BASE get gradients;
    through the opaque op they would silently not."""
    compiled = kiln.compile(lambda x: _uses_closures(x), backend=backend, fullgraph=True)
    x = torch.randn(2, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"2 tensor\(s\).*shape=\[3, 3\], dtype=torch.float32"):
        compiled(x)
    out = compiled(x.detach())  # (nothing differentiated: nothing to lose)
    torch.testing.assert_close(out, _uses_closures(x.detach()))
    kiln.config.leaf_function_check_escaped_gradients, before = False, True
    try:
        assert compiled(x)[0].shape == (2, 3)
    finally:
        kiln.config.leaf_function_check_escaped_gradients = before


BODY_RUNS = []


@kiln.leaf_function
def _module_forward(mod, inputs):
    BODY_RUNS.append(1)
    if inputs["x"].sum() > 0:  # (data-dependent: no trace could take it)
        return (mod.linear(inputs["x"]), inputs["y"] + 1)
    return (mod.linear(inputs["x"]) + inputs["y"], inputs["y"] - 1)


@_module_forward.register_fake
def _module_forward_fake(mod, inputs):
    return (mod.linear(inputs["x"]), torch.empty_like(inputs["y"]))


class _LeafModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 3)

    def forward(self, inputs):
        return _module_forward(self, inputs)


def _grads(mod, x, y):
    out = [mod.linear.weight.grad, mod.linear.bias.grad, x.grad, y.grad]
    mod.zero_grad()
    x.grad = y.grad = None
    return out


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
def test_an_nn_module_argument_and_its_parameters_gradients(backend):
    """A module argument is passed as itself; its parameters are the op's inputs (meta ones in
    the fake, detached ones in the body), so their gradients come back as eager's do."""
    mod = _LeafModule()
    compiled = kiln.compile(mod, backend=backend, fullgraph=True)
    for sign in (1.0, -1.0):
        x = (torch.rand(3, 3) * sign).requires_grad_()
        y = torch.randn(3, 3, requires_grad=True)
        ref = mod({"x": x, "y": y})
        (ref[0].sum() + ref[1].sum()).backward()
        expected = _grads(mod, x, y)
        BODY_RUNS.clear()
        out = compiled({"x": x, "y": y})
        assert len(BODY_RUNS) == 1
        (out[0].sum() + out[1].sum()).backward()
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(_grads(mod, x, y), expected)


@kiln.leaf_function(mutates_args={"model.running_mean"})
def _update_stats(model, x):
    model.running_mean.add_(x.mean(dim=0))
    return (model.linear(x),)


@_update_stats.register_fake
def _update_stats_fake(model, x):
    model.running_mean.add_(x.mean(dim=0))
    return (model.linear(x),)


class _StatsModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("running_mean", torch.zeros(3))
        self.linear = torch.nn.Linear(3, 3)

    def forward(self, x):
        return _update_stats(self, x)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_module_buffer_named_in_mutates_args_is_written_back(backend):
    eager_mod = _StatsModule()
    compiled_mod = _StatsModule()
    compiled_mod.load_state_dict(eager_mod.state_dict())
    compiled = kiln.compile(compiled_mod, backend=backend, fullgraph=True)
    for _ in range(2):
        x = torch.randn(4, 3)
        torch.testing.assert_close(compiled(x), eager_mod(x))
        torch.testing.assert_close(compiled_mod.running_mean, eager_mod.running_mean)


@kiln.leaf_function(mutates_args={"model"})
def _names_a_module(x, model):
    model.running_mean.add_(1)
    return (x,)


@_names_a_module.register_fake
def _names_a_module_fake(x, model):
    return (x,)


class _NamesAModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("running_mean", torch.zeros(3))

    def forward(self, x):
        return _names_a_module(x, self)


def test_mutates_args_naming_no_tensor_is_the_users_error():
    compiled = kiln.compile(_NamesAModule(), backend="eager")  # (not fullgraph: still raised)
    with pytest.raises(kiln.exc.UserError, match="resolved to a non-leaf value"):
        compiled(torch.randn(3))


class _Point:
    def __init__(self, x, y):
        self.x, self.y = x, y


torch.utils._pytree.register_pytree_node(
    _Point,
    lambda p: ((p.x, p.y), None),
    lambda xy, _: _Point(xy[0], xy[1]),
    serialized_type_name="tests.frontend.test_leaf_function._Point",
)


@kiln.nonstrict_trace
def _point_product(p):
    kiln.graph_break()  # (never traced: the body runs as eager runs it)
    return p.x * p.y


@kiln.leaf_function
def _scaled_point(p, k):
    return _Point(p.x * k, p.y + k)


@_scaled_point.register_fake
def _scaled_point_fake(p, k):
    return _Point(torch.empty_like(p.x), torch.empty_like(p.y))


def _uses_points(p):
    q = _scaled_point(p, 2.0)
    return _point_product(p) + q.x.sum(), q.y


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_registered_pytree_nodes_in_and_out(backend):
    """Note [nonstrict_trace: registered pytree nodes]: an argument of a registered class is
    flattened by its own functions and rebuilt around the tensors; a leaf's result of one too."""
    p = _Point(torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True))
    ref = _uses_points(p)
    (ref[0].sum() + ref[1].sum()).backward()
    expected = (p.x.grad, p.y.grad)
    p.x.grad = p.y.grad = None
    out = kiln.compile(_uses_points, backend=backend, fullgraph=True)(p)
    (out[0].sum() + out[1].sum()).backward()
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close((p.x.grad, p.y.grad), expected)


@kiln.leaf_function
def _returns_wider(x):
    return (torch.cat([x, x], dim=-1),)


@_returns_wider.register_fake
def _returns_narrow_fake(x):
    return (torch.empty_like(x),)


def test_unvalidated_outputs_are_the_real_ones(monkeypatch):
    """With leaf_function_validate_outputs off, the real body's outputs are trusted: returned
    as eager returns them, no check against the fake's sizes."""
    x = torch.randn(3, 2)
    compiled = kiln.compile(lambda x: _returns_wider(x), backend="eager", fullgraph=True)
    with pytest.raises(RuntimeError, match="Shape mismatch in output 0"):
        compiled(x)
    monkeypatch.setattr(kiln.config, "leaf_function_validate_outputs", False)
    torch.testing.assert_close(compiled(x), _returns_wider(x))


@kiln.leaf_function
def _with_total(x, w):
    out = x @ w
    return (out, out.sum().item())


@_with_total.register_fake
def _with_total_fake(x, w):
    out = x @ w
    return (out, out.sum().item())  # (a stand-in on meta: the real number at run time)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
def test_a_number_read_from_tensor_data_is_an_output(backend):
    def fn(x, w):
        out, total = _with_total(x.sin(), w)
        return out * 2, total

    x = torch.randn(3, 3, requires_grad=True)
    w = torch.randn(3, 3, requires_grad=True)
    ref_out, ref_total = fn(x, w)
    ref_out.sum().backward()
    grads = (x.grad, w.grad)
    x.grad = w.grad = None
    out, total = kiln.compile(fn, backend=backend, fullgraph=True)(x, w)
    assert total == ref_total  # (the real body's number, read back from the op's output)
    out.sum().backward()
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close((x.grad, w.grad), grads)


@kiln.leaf_function
def _doubled_total(x):
    return (x * 1, x.sum().item() * 2)


@_doubled_total.register_fake
def _doubled_total_fake(x):
    return (torch.empty_like(x), x.sum().item() * 2)  # (computes with it: no value to use)


def test_a_fake_computing_with_a_number_read_from_tensor_data_is_a_break():
    def fn(x):
        return _doubled_total(x)

    x = torch.randn(3)
    with pytest.raises(kiln.exc.Unsupported, match="can only be returned"):
        kiln.compile(fn, backend="eager", fullgraph=True)(x)
    kiln.reset()
    out, total = kiln.compile(fn, backend="eager")(x)
    torch.testing.assert_close(out, x)
    assert total == fn(x)[1]
