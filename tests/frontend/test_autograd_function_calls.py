"""How `MyFn.apply` may be called inside compiled code: keyword arguments bound to forward's
names with defaults (Note [Autograd functions: keyword arguments]), `MyFn().apply` on a
deprecated instance (its DeprecationWarning replayed), enum members and lists of tensors as
arguments. Outputs, gradients and warnings equal eager under every backend."""

import dataclasses
import enum
import warnings

import pytest
import torch

import kiln

BACKENDS = ["eager", "aot_eager", "kiln"]


class ScaledSin(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, factor=2.0, shift=0.5):
        ctx.save_for_backward(x)
        ctx.factor = factor
        return factor * torch.sin(x) + shift

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * ctx.factor * torch.cos(x), None, None


class AddScaled(torch.autograd.Function):
    """setup_context style: forward has no ctx."""

    @staticmethod
    def forward(x, y, alpha=1.0):
        return x + alpha * y

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.alpha = inputs[2]

    @staticmethod
    def backward(ctx, g):
        return g, g * ctx.alpha, None


def keyword_calls(x, y):
    a = ScaledSin.apply(x, factor=2.0, shift=1.0)
    b = ScaledSin.apply(x, factor=3.0)  # shift keeps forward's default
    c = AddScaled.apply(y=y, x=x)
    d = AddScaled.apply(x, y, alpha=0.25)
    return a + b + c + d


def run(fn, *inputs, backend):
    """Eager and compiled on fresh leaves: outputs and gradients compared; the stats."""
    eager_in = [t.detach().clone().requires_grad_() for t in inputs]
    comp_in = [t.detach().clone().requires_grad_() for t in inputs]
    kiln.reset()
    expected = fn(*eager_in)
    got = kiln.compile(fn, backend=backend, fullgraph=True)(*comp_in)
    torch.testing.assert_close(got, expected)
    expected.sum().backward()
    got.sum().backward()
    for a, b in zip(eager_in, comp_in):
        torch.testing.assert_close(b.grad, a.grad)
    return kiln.counters["stats"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_keyword_arguments_bind_like_apply(backend):
    stats = run(keyword_calls, torch.randn(4), torch.randn(4), backend=backend)
    assert stats["graph_breaks"] == 0 and stats["unique_graphs"] == 1


def unknown_keyword(x):
    return ScaledSin.apply(x, scale=3.0)


def skips_a_parameter(x):
    return ScaledSin.apply(x, shift=1.0)  # without setup_context no default fills `factor`


@pytest.mark.parametrize("fn", [unknown_keyword, skips_a_parameter])
def test_keyword_that_does_not_bind_raises_like_eager(fn):
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(TypeError) as eager:
        fn(x)
    with pytest.raises(TypeError) as compiled:
        kiln.compile(fn, backend="eager")(x)  # a break: apply raises in Python
    assert str(compiled.value) == str(eager.value)


def via_instance(x):
    return ScaledSin().apply(x) * 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_instance_apply_warns_like_eager(backend):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        stats = run(via_instance, torch.randn(4), backend=backend)
    kinds = [w.category for w in seen if "should not be instantiated" in str(w.message)]
    assert kinds == [DeprecationWarning, DeprecationWarning]  # eager's, then the compiled one
    assert stats["graph_breaks"] == 0 and stats["unique_graphs"] == 1


class Mode(enum.Enum):
    SIN = 0
    COS = 1


class Wave(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, mode, parts):
        ctx.save_for_backward(x)
        ctx.mode = mode
        base = x.sin() if mode is Mode.SIN else x.cos()
        return base * (parts[0] + parts[1])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        d = x.cos() if ctx.mode is Mode.SIN else -x.sin()
        return g * d * 7.0, None, None


def wave(x, mode):
    return Wave.apply(x, mode, [torch.full((), 3.0), torch.full((), 4.0)])


@pytest.mark.parametrize("backend", BACKENDS)
def test_enum_and_tensor_list_arguments(backend):
    x0 = torch.randn(5)
    kiln.reset()
    compiled = kiln.compile(wave, backend=backend, fullgraph=True)
    for mode in (Mode.SIN, Mode.COS, Mode.SIN):
        xe, xc = x0.clone().requires_grad_(), x0.clone().requires_grad_()
        expected, got = wave(xe, mode), compiled(xc, mode)
        torch.testing.assert_close(got, expected)
        expected.sum().backward()
        got.sum().backward()
        torch.testing.assert_close(xc.grad, xe.grad)
    stats = kiln.counters["stats"]
    assert stats["graph_breaks"] == 0 and stats["unique_graphs"] == 2  # one per enum member


class WithSizes(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2, [1, 2, 3]

    @staticmethod
    def backward(ctx, g, _sizes):
        return g * 2


def with_sizes(x):
    out, sizes = WithSizes.apply(x)
    sizes.append(4)  # the caller's own new list
    return out * len(sizes), sizes


@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_returning_a_list_of_constants(backend):
    x0 = torch.randn(3)
    kiln.reset()
    compiled = kiln.compile(with_sizes, backend=backend, fullgraph=True)
    xe, xc = x0.clone().requires_grad_(), x0.clone().requires_grad_()
    (oe, se), (oc, sc) = with_sizes(xe), compiled(xc)
    assert sc == se == [1, 2, 3, 4]
    assert compiled(xc)[1] == [1, 2, 3, 4]  # a new list each call
    torch.testing.assert_close(oc, oe)
    oe.sum().backward()
    oc.sum().backward()
    torch.testing.assert_close(xc.grad, xe.grad)
    assert kiln.counters["stats"]["graph_breaks"] == 0


def _backward(ctx, g):
    result, w = ctx.saved_tensors
    gx = g * result.sin() * w if ctx.needs_input_grad[0] else None
    gw = g * result if ctx.needs_input_grad[1] else None
    return gx, gw


def _forward(ctx, x, w):
    result = x + x
    ctx.save_for_backward(result, w)
    return result * w


class EagerBackward(torch.autograd.Function):
    forward = staticmethod(_forward)
    backward = staticmethod(_backward)


class CompiledBackward(torch.autograd.Function):
    forward = staticmethod(_forward)
    backward = staticmethod(kiln.compile(_backward, backend="eager", fullgraph=True))


def test_compiled_backward_reads_saved_tensors_and_needs_input_grad():
    kiln.reset()
    for needs in [(True, False), (False, True), (True, True), (True, False)]:
        eager = [torch.randn(4, requires_grad=n) for n in needs]
        comp = [t.detach().clone().requires_grad_(t.requires_grad) for t in eager]
        EagerBackward.apply(*eager).sum().backward()
        CompiledBackward.apply(*comp).sum().backward()
        for a, b in zip(eager, comp):
            assert (a.grad is None) == (b.grad is None)
            if a.grad is not None:
                torch.testing.assert_close(b.grad, a.grad)
    stats = kiln.counters["stats"]
    assert stats["graph_breaks"] == 0 and stats["unique_graphs"] == 3  # one per needs pattern


@dataclasses.dataclass
class Scales:
    power: int
    a: torch.Tensor
    b: torch.Tensor


class Scaled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scales, z):
        ctx.save_for_backward(scales.a, scales.b)
        ctx.power = scales.power
        return x.clone() * scales.a * scales.b**scales.power + z

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return g * a * b**ctx.power, None, g * 2


def scaled(x, scales, z):
    return Scaled.apply(x, scales, z)


def scaled_made_here(x, z):
    return Scaled.apply(x, Scales(3, x.detach() * 2, z.detach() + 1), z)


@pytest.mark.parametrize("backend", BACKENDS)
def test_object_argument_passed_by_its_fields(backend):
    kiln.reset()
    compiled = kiln.compile(scaled, backend=backend, fullgraph=True)
    for power, a, b in ((2, 2.5, 3.5), (2, 1.5, 0.5)):
        grads = []
        for f in (scaled, compiled):
            x = torch.tensor([2.0, -1.0], requires_grad=True)
            z = torch.tensor(3.0, requires_grad=True)
            s = Scales(power, torch.tensor(a, requires_grad=True), torch.tensor(b))
            out = f(x, s, z)
            out.sum().backward()
            grads.append((out, x.grad, z.grad, s.a.grad))
        torch.testing.assert_close(grads[1][:3], grads[0][:3])
        assert grads[0][3] is None and grads[1][3] is None
    stats = kiln.counters["stats"]
    assert stats["graph_breaks"] == 0 and stats["unique_graphs"] == 1  # new tensors: one graph


@pytest.mark.parametrize("backend", BACKENDS)
def test_object_argument_made_in_the_frame(backend):
    kiln.reset()
    compiled = kiln.compile(scaled_made_here, backend=backend, fullgraph=True)
    x0 = torch.tensor([2.0, -1.0])
    xe, xc = x0.clone().requires_grad_(), x0.clone().requires_grad_()
    z = torch.tensor(3.0)
    expected, got = scaled_made_here(xe, z), compiled(xc, z)
    torch.testing.assert_close(got, expected)
    expected.sum().backward()
    got.sum().backward()
    torch.testing.assert_close(xc.grad, xe.grad)


class Counter:
    def __init__(self):
        self.n = 0
        self.scale = torch.tensor(2.0)


class Counting(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, counter):
        counter.n += 1  # a store on the argument: an effect outside ctx
        return x * counter.scale

    @staticmethod
    def backward(ctx, g):
        return g * 2, None


def test_object_argument_written_by_forward_breaks():
    def fn(x, counter):
        return Counting.apply(x, counter)

    kiln.reset()
    counter = Counter()
    with pytest.raises(kiln.exc.Unsupported, match="side effects outside ctx"):
        kiln.compile(fn, fullgraph=True)(torch.ones(2), counter)
    out = kiln.compile(fn)(torch.ones(2), counter)
    torch.testing.assert_close(out, torch.full((2,), 2.0))
    assert counter.n == 1


class Collecting(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, found):
        found.append(x.sin())  # made under no_grad: needs no grad
        found.append(x.cos() * 2)
        return x * 3, x.exp()

    @staticmethod
    def backward(ctx, g1, g2):
        return g1 * 3 + g2, None


def collect_into_new_list(x):
    found = []
    a, b = Collecting.apply(x, found)
    return a + b, found, len(found)


def collect_into_given_list(x, found):
    return Collecting.apply(x, found)[0] * 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_appends_to_a_list_argument(backend):
    kiln.reset()
    for fn, extra in ((collect_into_new_list, ()), (collect_into_given_list, ([torch.ones(3)],))):
        x0 = torch.randn(3)
        xe, xc = x0.clone().requires_grad_(), x0.clone().requires_grad_()
        extra_e = [list(e) for e in extra]
        extra_c = [list(e) for e in extra]
        expected = fn(xe, *extra_e)
        got = kiln.compile(fn, backend=backend, fullgraph=True)(xc, *extra_c)
        expected = expected if isinstance(expected, tuple) else (expected,)
        got = got if isinstance(got, tuple) else (got,)
        torch.testing.assert_close(got, expected)
        if len(got) > 1:  # the appended tensors need no grad, as in eager
            assert [t.requires_grad for t in got[1]] == [t.requires_grad for t in expected[1]]
        torch.testing.assert_close(extra_c, extra_e)  # the caller's list got the same items
        expected[0].sum().backward()
        got[0].sum().backward()
        torch.testing.assert_close(xc.grad, xe.grad)
    assert kiln.counters["stats"]["graph_breaks"] == 0


class Popping(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, found):
        found.pop()
        return x * 3

    @staticmethod
    def backward(ctx, g):
        return g * 3, None


def test_forward_changing_a_list_argument_otherwise_breaks():
    def fn(x, found):
        return Popping.apply(x, [*found])

    with pytest.raises(kiln.exc.Unsupported, match="other than by appending"):
        kiln.compile(fn, fullgraph=True)(torch.ones(2), [torch.ones(1)])
