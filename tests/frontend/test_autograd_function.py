"""torch.autograd.Function subclasses inside compiled code: one node calling `MyFn.apply`, the
forward traced (ATen under aot_eager/kiln), the user's backward kept; outputs and gradients equal
eager under every backend."""

import pytest
import torch
from frontend_helpers import CountingBackend, assert_same
from torch.autograd.function import once_differentiable

import kiln


class Sin(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x.cos()


class RoundSTE(torch.autograd.Function):
    """Straight-through rounding: the backward is NOT the forward's derivative (zero)."""

    @staticmethod
    def forward(ctx, x):
        return torch.round(x * 4) / 4

    @staticmethod
    def backward(ctx, g):
        return g * 1.5


class Scale(torch.autograd.Function):
    """Non-tensor arguments, attributes on ctx, needs_input_grad, set_materialize_grads."""

    @staticmethod
    def forward(ctx, x, y, alpha, name):
        ctx.alpha = alpha
        ctx.set_materialize_grads(True)
        ctx.save_for_backward(y)
        assert name == "scale"
        return x * y * alpha

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        gx = g * y * ctx.alpha if ctx.needs_input_grad[0] else None
        return gx, None, None, None


class MulSetup(torch.autograd.Function):
    """The setup_context style: forward without ctx."""

    @staticmethod
    def forward(x, y):
        return x * y

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, y = inputs
        ctx.save_for_backward(x, y)

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * y, g * x


class SortPair(torch.autograd.Function):
    """Two outputs, one of them non-differentiable (indices)."""

    @staticmethod
    def forward(ctx, x):
        values, idx = x.sort(dim=-1)
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(idx)
        return values, idx

    @staticmethod
    def backward(ctx, g, _gidx):
        (idx,) = ctx.saved_tensors
        return torch.zeros_like(g).scatter(-1, idx, g)


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3 * x * x


class ItemBackward(torch.autograd.Function):
    """A backward that reads data (cannot be traced at the ATen level)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 2 + float(x.sum().item() > 1e9)


BACKENDS = ["eager", "aot_eager", "kiln"]


def check(fn, *inputs, backend="eager", graphs=1, breaks=0, failures=0):
    """Compiled vs eager: outputs, input gradients, graph and break counts."""
    eager_in = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    comp_in = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    expected = fn(*eager_in)
    kiln.reset()
    compiled = kiln.compile(fn, backend=backend)
    got = compiled(*comp_in)
    assert_same(expected, got)
    outs = [o for o in (expected if isinstance(expected, tuple) else (expected,))]
    gots = [o for o in (got if isinstance(got, tuple) else (got,))]
    outs, gots = ([o for o in x if isinstance(o, torch.Tensor)] for x in (outs, gots))
    loss_e = sum(o.float().sum() for o in outs if o.requires_grad)
    if isinstance(loss_e, torch.Tensor):
        loss_e.backward()
        sum(o.float().sum() for o in gots if o.requires_grad).backward()
        for a, b in zip(eager_in, comp_in):
            assert_same(a.grad, b.grad, "grad")
    stats = kiln.counters["stats"]
    assert stats["graph_breaks"] == breaks, dict(kiln.counters["graph_break"])
    assert stats["unique_graphs"] == graphs, dict(stats)
    assert stats["backend_failures"] == failures, dict(stats)  # the ATen trace took it
    return compiled


def sin_after_mul(x):
    return Sin.apply(x * 2) + 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_apply_is_one_node_in_one_graph(backend):
    check(sin_after_mul, torch.randn(5, requires_grad=True), backend=backend)


def test_graph_holds_one_apply_node_and_no_forward_ops():
    backend = CountingBackend()
    kiln.reset()
    kiln.compile(sin_after_mul, backend=backend)(torch.randn(3, requires_grad=True))
    (gm,) = backend.graphs
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    applies = [t for t in targets if getattr(t, "autograd_function", None) is Sin]
    assert len(applies) == 1 and torch.sin not in targets
    assert "Sin_apply" in gm.code


def ste(x):
    return RoundSTE.apply(x.tanh()) * 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_user_backward_is_used_not_the_forward_derivative(backend):
    x = torch.randn(6, requires_grad=True)
    check(ste, x, backend=backend)
    kiln.reset()
    y = kiln.compile(ste, backend=backend)(x)
    y.sum().backward()
    torch.testing.assert_close(x.grad, 4.5 * (1 - x.detach().tanh() ** 2))


def scale(x, y):
    return Scale.apply(x + 1, y, 0.5, "scale") - 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_constant_arguments_ctx_attributes_needs_input_grad(backend):
    check(scale, torch.randn(4, requires_grad=True), torch.randn(4), backend=backend)


def mul_setup(x, y):
    return MulSetup.apply(x.exp(), y) * 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_setup_context_style(backend):
    check(
        mul_setup,
        torch.randn(3, requires_grad=True),
        torch.randn(3, requires_grad=True),
        backend=backend,
    )


def sort_pair(x):
    values, idx = SortPair.apply(x * 3)
    return values * 2, idx + 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_outputs_one_non_differentiable(backend):
    check(sort_pair, torch.randn(2, 5, requires_grad=True), backend=backend)


def cube(x):
    return Cube.apply(x - 1).sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_once_differentiable_backward(backend):
    check(cube, torch.randn(4, requires_grad=True), backend=backend)


def test_no_grad_input_gives_an_output_without_grad():
    check(sin_after_mul, torch.randn(3))
    with torch.no_grad():
        check(sin_after_mul, torch.randn(3, requires_grad=True))


class SinModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(Sin.apply(self.lin(x)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_apply_inside_a_module_forward(backend):
    torch.manual_seed(0)
    mod = SinModule()
    x = torch.randn(2, 4)
    expected = mod(x)
    expected.sum().backward()
    grads = [p.grad.clone() for p in mod.parameters()]
    mod.zero_grad()
    kiln.reset()
    got = kiln.compile(mod, backend=backend)(x)
    got.sum().backward()
    assert_same(expected, got)
    for g, p in zip(grads, mod.parameters()):
        torch.testing.assert_close(p.grad, g)
    assert kiln.counters["stats"]["unique_graphs"] == 1
    assert kiln.counters["stats"]["graph_breaks"] == 0


cube_op = Cube.apply  # the usual alias of a library op


def alias_call(x):
    return cube_op(x) + Sin.apply(x)


def test_apply_through_an_alias():
    check(alias_call, torch.randn(3, requires_grad=True))


LOG = []


class Noisy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        LOG.append("forward")  # an effect outside ctx: left to the real forward, or a break
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


def noisy(x):
    return Noisy.apply(x + 1) + 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_with_side_effects_breaks_at_apply(backend):
    """With the eager backend the node's real forward appends (Note [Autograd functions:
    containers the forward changes]); the tracing backends break at the apply."""
    LOG.clear()
    breaks = 0 if backend == "eager" else 1
    check(
        noisy, torch.randn(3, requires_grad=True), backend=backend, graphs=1 + breaks, breaks=breaks
    )
    assert LOG == ["forward", "forward"]  # eager, then compiled (once, at run time)


class InPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g * 2


class AddInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        x.add_(w)
        ctx.mark_dirty(x)
        return x, x * 3

    @staticmethod
    def backward(ctx, g, g3):
        return g + 3 * g3, (g + 3 * g3).sum(0)


def in_place(x):
    y = x + 1
    return InPlace.apply(y) + 1


def in_place_discarded(w):
    # the apply's result is dropped: y itself was changed, and its gradient goes through the
    # function's backward (PyTorch's test_mark_dirty_discarded_output_grad)
    y = torch.ones(2, 2) @ w
    InPlace.apply(y)
    return y.sum()


def in_place_identity(x):
    y = x * 2
    z = InPlace.apply(y)
    return z * 1, z is y, y + 0


def in_place_gains_grad(x, w):
    # y needs no grad; the function's other input does: y comes back requiring grad
    y = x * 2
    out, tripled = AddInPlace.apply(y, w)
    return out + 1, tripled, out is y, y.requires_grad


@pytest.mark.parametrize("backend", BACKENDS)
def test_mark_dirty_returns_the_input_changed_in_place(backend):
    """Note [Autograd functions: mark_dirty]: one graph; values, identity and gradients as eager."""
    check(in_place, torch.randn(3, requires_grad=True), backend=backend)
    check(in_place_discarded, torch.eye(2, requires_grad=True), backend=backend)
    check(in_place_identity, torch.randn(3, requires_grad=True), backend=backend)
    check(
        in_place_gains_grad, torch.randn(2, 3), torch.randn(3, requires_grad=True), backend=backend
    )
    with torch.no_grad():
        check(in_place_identity, torch.randn(3), backend=backend)


def in_place_on_input(x):
    return InPlace.apply(x) + 1


def in_place_on_view(x):
    return InPlace.apply(x.view_as(x)) + 1


def in_place_on_leaf():
    return InPlace.apply(torch.ones(3, requires_grad=True))


def test_mark_dirty_of_an_input_a_view_or_a_leaf_breaks():
    """The frame's own input is changed in Python; a view or a leaf that requires grad raises
    eager's error (run in Python, where eager raises it)."""
    check(in_place_on_input, torch.randn(3), graphs=1, breaks=1)
    for fn, x in ((in_place_on_view, torch.randn(3, requires_grad=True)), (in_place_on_leaf, None)):
        kiln.reset()
        args = [] if x is None else [x]
        with pytest.raises(RuntimeError) as want:
            fn(*[a.clone() for a in args]) if x is None else fn(x)
        with pytest.raises(RuntimeError) as got:
            kiln.compile(fn, backend="eager")(*args)
        assert str(got.value) == str(want.value)


def item_backward(x):
    return ItemBackward.apply(x.cos()) * 3


def test_untraceable_backward_still_right_under_eager():
    check(item_backward, torch.randn(3, requires_grad=True))


@pytest.mark.parametrize("backend", ["aot_eager", "kiln"])
def test_untraceable_backward_breaks_at_apply_for_aot_backends(backend):
    """The joint trace would run the backward once, at compile time: checked, it breaks."""
    check(item_backward, torch.randn(3, requires_grad=True), backend=backend, graphs=2, breaks=1)
    assert "ItemBackward.backward is not traceable" in str(dict(kiln.counters["graph_break"]))


class Talkative(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        LOG.append("backward")  # would happen once, while the joint graph is traced
        return g * 2


def talkative(x):
    return Talkative.apply(x.sin()).sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_backward_with_side_effects_runs_each_time(backend):
    LOG.clear()
    breaks = 0 if backend == "eager" else 1
    for _ in range(2):
        check(
            talkative,
            torch.randn(3, requires_grad=True),
            backend=backend,
            breaks=breaks,
            graphs=1 + breaks,
        )
    assert LOG == ["backward"] * 4


def test_fullgraph_accepts_apply():
    kiln.reset()
    x = torch.randn(3, requires_grad=True)
    got = kiln.compile(sin_after_mul, backend="eager", fullgraph=True)(x)
    assert_same(sin_after_mul(x), got)


@pytest.mark.parametrize("backend", ["eager", "kiln"])
def test_changing_sizes_recompile_once_symbolic(backend):
    kiln.reset()
    compiled = kiln.compile(sort_pair, backend=backend)
    for n in (3, 5, 7):
        x = torch.randn(2, n, requires_grad=True)
        got, expected = compiled(x), sort_pair(x)
        assert_same(expected, got)
        (g,) = torch.autograd.grad(got[0].sum(), x)
        (ge,) = torch.autograd.grad(expected[0].sum(), x)
        torch.testing.assert_close(g, ge)
    assert kiln.counters["stats"]["unique_graphs"] == 2  # static, then one symbolic graph


class AmpScale(torch.autograd.Function):
    """torch.amp.custom_fwd/custom_bwd, a default argument, None among saved and outputs."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu")
    def forward(ctx, x, scale=2.0):
        ctx.scale = scale
        ctx.shape = x.shape
        ctx.save_for_backward(x, None)
        return x * scale, None

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx, g, _none):
        x, _ = ctx.saved_tensors
        return g.reshape(ctx.shape) * ctx.scale, None


def amp_scale(x):
    y, none = AmpScale.apply(x.cos())
    return y + 1, none


@pytest.mark.parametrize("backend", BACKENDS)
def test_custom_fwd_decorated_forward_and_defaults(backend):
    check(amp_scale, torch.randn(2, 3, requires_grad=True), backend=backend)


class ViewOut(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x.clone()
        y.mul_(3)  # in place on a tensor of its own
        return y.view(-1), x.argmax()

    @staticmethod
    def backward(ctx, g, _gi):
        return g.view(2, 3) * 3


def view_out(x):
    y, i = ViewOut.apply(x * 1)
    return y * 2, i


@pytest.mark.parametrize("backend", BACKENDS)
def test_view_and_integer_outputs(backend):
    check(view_out, torch.randn(2, 3, requires_grad=True), backend=backend)


def test_backward_not_checked_without_grad():
    """No input needs grad: the backward never runs, so it does not matter (one graph)."""
    check(item_backward, torch.randn(3), backend="aot_eager")


class MyReLU(torch.autograd.Function):
    """The PyTorch tutorial's: a boolean-mask store in the backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad_input[x < 0] = 0
        return grad_input


class LinearFunction(torch.autograd.Function):
    """The extending-torch docs' linear: setup_context, needs_input_grad, an optional bias."""

    @staticmethod
    def forward(x, weight, bias):
        output = x.mm(weight.t())
        if bias is not None:
            output += bias.unsqueeze(0).expand_as(output)
        return output

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad_output):
        x, weight, bias = ctx.saved_tensors
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = grad_output.mm(weight)
        if ctx.needs_input_grad[1]:
            grad_weight = grad_output.t().mm(x)
        if bias is not None and ctx.needs_input_grad[2]:
            grad_bias = grad_output.sum(0)
        return grad_x, grad_weight, grad_bias


def tutorial(x, w, b):
    return MyReLU.apply(LinearFunction.apply(x, w, b)) + LinearFunction.apply(x, w, None)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tutorial_functions(backend):
    x, w, b = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5)
    check(tutorial, x, w.requires_grad_(), b.requires_grad_(), backend=backend)
