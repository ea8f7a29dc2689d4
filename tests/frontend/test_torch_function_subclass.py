"""Plain tensor subclasses with __torch_function__ as inputs: traced through their
__torch_function__, results of the subclass's type, side effects as eager has them."""

import pytest
import torch
import torch.nn.functional as F

import kiln


@pytest.fixture(autouse=True)
def _reset():
    kiln.reset()


class Counter:
    """A backend counting graphs and ops."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward

    @property
    def ops(self):
        return sum(n.op.startswith("call") for g in self.graphs for n in g.graph.nodes)


LOG = []


class Logged(torch.Tensor):
    """Records every torch call it sees, then does what Tensor does."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        LOG.append(1)
        return super().__torch_function__(func, types, args, kwargs)


class Shifted(torch.Tensor):
    """Adds 1 to every tensor result (its results stay Shifted)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs)
        if isinstance(out, torch.Tensor) and out.dim() > 0:
            with torch._C.DisableTorchFunctionSubclass():
                out = torch.add(out, 1)
            out = out.as_subclass(cls)
        return out


class Plain(torch.Tensor):
    """No __torch_function__ of its own: Tensor's makes results Plain."""


def _check(fn, *args, backend="eager", fullgraph=True):
    expected = fn(*args)
    LOG.clear()
    expected = fn(*args)
    eager_log = list(LOG)
    LOG.clear()
    got = kiln.compile(fn, backend=backend, fullgraph=fullgraph)(*args)
    assert LOG == eager_log
    pairs = zip(got, expected) if isinstance(expected, tuple) else [(got, expected)]
    for g, e in pairs:
        assert type(g) is type(e)
        torch.testing.assert_close(g.as_subclass(torch.Tensor), e.as_subclass(torch.Tensor))
    return got


def test_functions_and_methods_keep_the_subclass():
    def fn(x):
        x = F.sigmoid(x)
        x = torch.tanh(x)
        return x.relu().exp()

    counter = Counter()
    x = torch.randn(5).as_subclass(Plain)
    expected = fn(x)
    got = kiln.compile(fn, backend=counter, fullgraph=True)(x)
    assert type(got) is Plain
    torch.testing.assert_close(got.as_subclass(torch.Tensor), expected.as_subclass(torch.Tensor))
    assert len(counter.graphs) == 1 and counter.ops == 4


def test_user_torch_function_runs_once_per_call():
    def fn(x, y):
        return (x * 2 + y).sum(dim=0) - 1

    x = torch.randn(3, 4).as_subclass(Logged)
    y = torch.randn(4)
    _check(fn, x, y)
    LOG.clear()
    compiled = kiln.compile(fn, backend="eager", fullgraph=True)
    compiled(x, y)
    compiled(x, y)
    assert len(LOG) == 8  # four torch calls per call, none by kiln's guards


def test_reflected_operators_and_comparisons():
    def fn(x):
        return (1 - x) * (2 / (x.abs() + 1)), x > 0

    _check(fn, torch.randn(4).as_subclass(Logged))


def test_torch_function_changing_results():
    def fn(x):
        return torch.mul(x, 3).neg()

    got = _check(fn, torch.ones(3).as_subclass(Shifted), backend="aot_eager")
    assert got.as_subclass(torch.Tensor).tolist() == [-3.0, -3.0, -3.0]


def test_property_reads_go_through_torch_function():
    def fn(x):
        return x.reshape(x.shape[0], -1) * x.ndim

    _check(fn, torch.randn(2, 3).as_subclass(Logged))


def test_type_and_isinstance():
    def fn(x):
        return x + 1, isinstance(x, Logged), type(x) is Logged

    x = torch.randn(2).as_subclass(Logged)
    out, is_inst, is_type = kiln.compile(fn, backend="eager", fullgraph=True)(x)
    assert is_inst and is_type and type(out) is Logged


def test_graph_break_keeps_the_subclass():
    def fn(x):
        x = x.sin()
        print("", end="")
        return x.cos()

    _check(fn, torch.randn(3).as_subclass(Logged), fullgraph=False)


def test_kiln_backend():
    def fn(x, w):
        return F.linear(x, w).relu()

    _check(fn, torch.randn(4, 3).as_subclass(Logged), torch.randn(2, 3), backend="kiln")


def test_new_torch_function_recompiles():
    class Swappable(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return super().__torch_function__(func, types, args, kwargs)

    def fn(x):
        return x * 2

    compiled = kiln.compile(fn, backend="eager", fullgraph=True)
    x = torch.ones(2).as_subclass(Swappable)
    torch.testing.assert_close(compiled(x).as_subclass(torch.Tensor), torch.full((2,), 2.0))

    def plus_ten(cls, func, types, args=(), kwargs=None):
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **(kwargs or {}))
            return out + 10 if isinstance(out, torch.Tensor) else out

    Swappable.__torch_function__ = classmethod(plus_ten)
    torch.testing.assert_close(compiled(x), fn(x))


def _writes_in_place(x, y):
    a = x + 1
    a += 2
    a.mul_(y)
    x.add_(1)
    x[0] = 7  # (through __torch_function__ too: Tensor.__setitem__)
    b = x
    b -= 1
    return a, x, b is x


@pytest.mark.parametrize("cls", [Logged, Plain])
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
def test_in_place_on_the_subclass(cls, backend):
    x, y = torch.randn(3), torch.randn(3)
    x_eager, x_compiled = x.as_subclass(cls), x.clone().as_subclass(cls)
    expected = _writes_in_place(x_eager, y)
    LOG.clear()
    _writes_in_place(x.clone().as_subclass(cls), y)
    eager_log = list(LOG)
    LOG.clear()
    got = kiln.compile(_writes_in_place, backend=backend, fullgraph=True)(x_compiled, y)
    assert LOG == eager_log
    assert got[1] is x_compiled and got[2] is True
    for g, e in zip(got[:2], expected[:2]):
        assert type(g) is type(e)
        torch.testing.assert_close(g.as_subclass(torch.Tensor), e.as_subclass(torch.Tensor))
    torch.testing.assert_close(
        x_compiled.as_subclass(torch.Tensor), x_eager.as_subclass(torch.Tensor)
    )


def test_torch_function_given_to_a_plain_subclass_later_recompiles():
    class Later(torch.Tensor):
        pass

    def fn(x):
        return x * 2

    compiled = kiln.compile(fn, backend="eager", fullgraph=True)
    x = torch.ones(2).as_subclass(Later)
    assert type(compiled(x)) is Later

    def to_plain(cls, func, types, args=(), kwargs=None):
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))

    Later.__torch_function__ = classmethod(to_plain)
    assert type(fn(x)) is torch.Tensor
    assert type(compiled(x)) is torch.Tensor


def test_disable_torch_function_subclass_in_the_frame():
    def fn(x):
        with torch._C.DisableTorchFunctionSubclass():
            y = x + 1
        return y, x + 1

    x = torch.ones(2).as_subclass(Logged)
    LOG.clear()
    (y, z) = fn(x)
    n = len(LOG)
    LOG.clear()
    (cy, cz) = kiln.compile(fn, backend="eager", fullgraph=True)(x)
    assert len(LOG) == n
    assert (type(cy), type(cz)) == (type(y), type(z)) == (torch.Tensor, Logged)


class Tagged(torch.Tensor):
    """An __init__ of its own: `Tagged(t)` runs it on the alias Tensor's __new__ makes."""

    def __init__(self, *args):
        self.tag = "made"


class Scaled(torch.Tensor):
    """A __new__ of its own, through `super().__new__(cls, t)`, and an __init__."""

    def __new__(cls, x, scale):
        return super().__new__(cls, x * scale)

    def __init__(self, x, scale):
        self.scale = scale


class NotMine(torch.Tensor):
    """A __new__ that returns no instance of the class: __init__ does not run."""

    def __new__(cls, x):
        return x * 2

    def __init__(self, x):
        raise AssertionError("not run")


def test_calling_the_class_on_a_tensor_is_as_subclass():
    def fn(x):
        y = Logged(torch.add(x, 1.0)) * 2  # (Tensor's legacy constructor: an alias of class C)
        return y, Plain(x).exp()

    x = torch.randn(3, requires_grad=True)
    got = _check(fn, x)
    assert all(g.requires_grad and g.grad_fn is not None for g in got)
    sum(g.as_subclass(torch.Tensor).sum() for g in got).backward()
    x2 = x.detach().clone().requires_grad_()
    sum(e.as_subclass(torch.Tensor).sum() for e in fn(x2)).backward()
    torch.testing.assert_close(x.grad, x2.grad)


def test_classes_with_their_own_new_and_init():
    def fn(x):
        t = Tagged(x * 2)
        s = Scaled(x, 3.0)
        return t.tag, t + 1, s.scale, s * 2, NotMine(x)

    x = torch.randn(3)
    got = kiln.compile(fn, backend="eager", fullgraph=True)(x)
    expected = fn(x)
    assert got[0] == expected[0] and got[2] == expected[2]
    for g, e in zip(got[1::2], expected[1::2], strict=True):
        assert type(g) is type(e)
        torch.testing.assert_close(g.as_subclass(torch.Tensor), e.as_subclass(torch.Tensor))


def test_tensor_new_with_other_arguments_breaks():
    def fn(x):
        return Plain(2, 3).shape, x + 1

    with pytest.raises(kiln.exc.Unsupported, match="Tensor.__new__ of Plain with these arguments"):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.randn(3))
    got = kiln.compile(fn, backend="eager")(torch.randn(3))
    assert got[0] == (2, 3)


def _as_plain(x):
    y = x.as_subclass(Plain)
    z = y.as_subclass(torch.Tensor)
    return type(z).__name__, z is y, z is x, y is x


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.as_subclass(Plain),  # (a new object over the input, of the class)
        lambda x: Plain(x),
        lambda x: Scaled(x, 2.0),
        _as_plain,
        lambda x: Plain(x * 2).as_subclass(torch.Tensor),
    ],
)
def test_subclass_values_over_an_input_are_new_objects(fn):
    x = torch.randn(3)
    got = kiln.compile(fn, backend="eager", fullgraph=True)(x)
    expected = fn(x)
    if isinstance(expected, tuple):
        assert got == expected
        return
    assert type(got) is type(expected) and got is not x
    torch.testing.assert_close(got.as_subclass(torch.Tensor), expected.as_subclass(torch.Tensor))


class WithOwnAttrs(torch.Tensor):
    """A subclass with its own class constant, method and property (plain Python: torch calls
    no __torch_function__ for them)."""

    factor = 10

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        LOG.append(func.__name__)
        return super().__torch_function__(func, types, args, kwargs)

    def twice(self):
        return self * 2

    @property
    def tripled(self):
        return self * 3


class MoreOwnAttrs(WithOwnAttrs):
    factor = 4

    def twice(self):
        return self * 5


def _uses_own_attrs(x):
    y = x + 1  # (a value of the subclass the frame made)
    return x.twice() + y.tripled + x.factor, y.twice() * y.factor


@pytest.mark.parametrize("cls", [WithOwnAttrs, MoreOwnAttrs])
def test_the_subclass_own_attributes_methods_and_properties(cls):
    # (Note [Tensors: a subclass's own attributes])
    _check(_uses_own_attrs, torch.randn(3).as_subclass(cls))


def test_own_attributes_are_guarded():
    class Mine(WithOwnAttrs):
        pass

    def fn(x):
        return x.twice() + x.factor

    x = torch.ones(2).as_subclass(Mine)
    compiled = kiln.compile(fn, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(x), fn(x))
    Mine.factor = 20  # (a class attribute changed: a recompile)
    torch.testing.assert_close(compiled(x), fn(x))
    Mine.twice = lambda self: self * 7  # (a method replaced)
    torch.testing.assert_close(compiled(x), fn(x))
    x.factor = 1  # (an instance attribute shadows the class's)
    torch.testing.assert_close(compiled(x), fn(x))
    torch.testing.assert_close(compiled(x).as_subclass(torch.Tensor), torch.full((2,), 8.0))


class Named(torch.Tensor):
    """Logs the name of each func torch hands its __torch_function__."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        LOG.append(getattr(func, "__name__", func))
        return super().__torch_function__(func, types, args, kwargs)


def _operators(x, i):
    return (
        *(x + 2, x - 2, x * 2, x / 2, x // 2, x % 2, x**2, x @ x),
        *(i & 1, i | 1, i ^ 1, i << 1, i >> 1, 2 & i, ~i),
        *(x < 1, x <= 1, x > 1, x >= 1, x == 1, x != 1),
        *(-x, +x, abs(x), x[0]),
        *(2 + x, 2 - x, 2 * x, 2 / x, 2**x),
    )


def test_operators_hand_torch_function_the_func_torch_does():
    # (`x + 2` hands Tensor.add, `2 & i` Tensor.bitwise_and with i first: the mode probe's)
    x = torch.randn(3).as_subclass(Named)
    i = torch.arange(3).as_subclass(Named)
    _check(_operators, x, i)
    assert LOG[:4] == ["add", "sub", "mul", "div"]


class KeepsShape(torch.Tensor):
    """Overrides Tensor's `to` and `shape` in Python (diffusers' GGUF parameters do)."""

    def to(self, *args, **kwargs):
        new = super().to(*args, **kwargs)
        new.tensor_shape = getattr(self, "tensor_shape", new.data.shape)
        return new

    @property
    def shape(self):
        if not hasattr(self, "tensor_shape"):
            self.tensor_shape = self.size()
        return self.tensor_shape


def _overridden(x):
    x_shape = x.shape
    y = x.to("cpu")
    return x + 1, y + 2, x_shape, x.tensor_shape, y.tensor_shape


def test_tensor_methods_and_properties_the_subclass_overrides():
    # (Python reaches them by attribute, no __torch_function__; kiln's own Tensor calls on the
    # value stay Tensor's)
    x0 = torch.randn(2, 2).as_subclass(KeepsShape)
    x1 = x0.clone().as_subclass(KeepsShape)
    expected = _overridden(x0)
    got = kiln.compile(_overridden, backend="eager", fullgraph=True)(x1)
    for g, e in zip(got, expected):
        assert type(g) is type(e)
        torch.testing.assert_close(g, e)
    assert x1.tensor_shape == x0.tensor_shape


class NoTorchFunctionOverrides(torch.Tensor):
    ndim = 10

    def sigmoid(self):
        return None


def test_overrides_of_a_subclass_without_torch_function():
    def fn(x):
        return x.ndim, x.sigmoid(), x.dim(), torch.sigmoid(x)

    x = torch.ones(2).as_subclass(NoTorchFunctionOverrides)
    got = kiln.compile(fn, backend="eager", fullgraph=True)(x)
    expected = fn(x)
    assert got[:3] == expected[:3] and type(got[3]) is type(expected[3])
    torch.testing.assert_close(got[3], expected[3])


def test_a_result_that_may_be_its_operand_is_not_called_another_object():
    # (`x.to("cpu")` is x in eager: Note [Operators: tensor identity]; kiln said False)
    def fn(x):
        return x.to("cpu") is x

    x = torch.ones(2).as_subclass(Plain)
    assert kiln.compile(fn, backend="eager")(x) is True
    with pytest.raises(kiln.exc.Unsupported, match="`is` between"):
        kiln.compile(fn, backend="eager", fullgraph=True)(x)


class MadeBySubclassCall(torch.Tensor):
    def __new__(cls, elem):
        r = torch.Tensor._make_subclass(cls, torch.ones(0))
        r.elem = elem
        return r


def test_make_subclass_in_a_subclass_new():
    def fn(t):
        return MadeBySubclassCall(t.elem.clone())

    t = MadeBySubclassCall(torch.ones(2))
    got = kiln.compile(fn, backend="eager", fullgraph=True)(t)
    expected = fn(t)
    assert type(got) is type(expected) and got.shape == expected.shape
    torch.testing.assert_close(got.elem, expected.elem)


def test_make_subclass_is_a_detached_alias():
    def fn(x):
        y = torch.Tensor._make_subclass(Plain, x)
        z = torch.Tensor._make_subclass(torch.Tensor, x)
        x += 1
        z += 3  # (z shares x's storage)
        return y * 2, x * z, type(y), y.requires_grad, z.requires_grad, z is x

    x = torch.randn(3)
    got = kiln.compile(fn, backend="eager", fullgraph=True)(x.clone())
    expected = fn(x.clone())
    assert got[2:] == expected[2:]
    for g, e in zip(got[:2], expected[:2]):
        assert type(g) is type(e)
        torch.testing.assert_close(g.as_subclass(torch.Tensor), e.as_subclass(torch.Tensor))
    with pytest.raises(kiln.exc.Unsupported, match="leaf requiring grad"):
        kiln.compile(
            lambda x: torch.Tensor._make_subclass(Plain, x, True), backend="eager", fullgraph=True
        )(x)


def _iterates(x):
    a, b, c = x
    out = list(x)
    for e in x:
        out.append(e * 2)
    return a + b, *out, *tuple(x)


def test_iteration_calls_what_tensor_iter_calls():
    # (Tensor.__iter__: dim() and unbind(0) through __torch_function__; list() and tuple() then
    # ask __len__, as CPython's length hint does)
    _check(_iterates, torch.arange(3.0).as_subclass(Named))
    assert LOG[:5] == ["dim", "unbind", "dim", "unbind", "__len__"]


class Holder:
    """No tensor: a class whose __torch_function__ unwraps its instances (a duck-typed wrapper)."""

    def __init__(self, tensor):
        self.tensor = tensor

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        LOG.append(func.__name__)
        args = [a.tensor if isinstance(a, Holder) else a for a in args]
        if args and isinstance(args[0], list):
            args[0] = [a.tensor if isinstance(a, Holder) else a for a in args[0]]
        return func(*args, **(kwargs or {}))


def test_objects_with_torch_function_take_over_torch_calls():
    # (Note [Tensors: objects with __torch_function__])
    def fn(w, v):
        return torch.add(w, 1.0, alpha=2.0), torch.stack([w, v]), torch.mul(w, 3)

    w, v = Holder(torch.ones(2)), Holder(torch.arange(2.0))
    LOG.clear()
    expected = fn(w, v)
    eager_log = list(LOG)
    LOG.clear()
    got = kiln.compile(fn, backend="eager", fullgraph=True)(w, v)
    assert LOG == eager_log == ["add", "stack", "mul"]
    torch.testing.assert_close(got, expected)


class PlainMethodTorchFunction(torch.Tensor):
    """A __torch_function__ that is a plain method (deprecated): torch binds it to the argument."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        LOG.append((func.__name__, self is args[0]))
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


@pytest.mark.filterwarnings("ignore:Defining your `__torch_function__` as a plain method")
def test_a_torch_function_that_is_a_plain_method():
    _check(
        lambda x: (x + 1, (2 * x).sum()), torch.randn(2, 2).as_subclass(PlainMethodTorchFunction)
    )
    assert LOG == [("add", True), ("mul", True)]


class Quantized(torch.nn.Parameter):
    """A Parameter subclass carrying metadata through torch calls (quantized checkpoints do)."""

    def __new__(cls, data, requires_grad=False, kind=None):
        return torch.Tensor._make_subclass(cls, data, requires_grad)

    def __init__(self, data, requires_grad=False, kind=None):
        self.kind = kind

    def plain(self):
        return torch.Tensor._make_subclass(torch.Tensor, self, self.requires_grad)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs or {})  # (Parameter's: plain)
        kind = next((a.kind for a in args if isinstance(a, Quantized)), None)
        return cls(out, kind=kind) if isinstance(out, torch.Tensor) else out


def _dequantizes(x):
    y = x * 2
    y = y + y.kind
    return y.plain() * 3, type(y), y.kind


class ParameterLike(torch.nn.Parameter):
    pass


def test_parameter_subclasses_with_and_without_torch_function():
    x = Quantized(torch.ones(3), kind=5)
    got = kiln.compile(_dequantizes, backend="eager", fullgraph=True)(x)
    expected = _dequantizes(x)
    assert got[1:] == expected[1:] == (Quantized, 5)
    assert type(got[0]) is torch.Tensor
    torch.testing.assert_close(got[0], expected[0])
    p = torch.randn(2, 2).as_subclass(ParameterLike)  # (Parameter's __torch_function__: off)
    fn = lambda x: (x.t().T + 1, type(x.t()))  # noqa: E731
    got, expected = kiln.compile(fn, backend="eager", fullgraph=True)(p), fn(p)
    assert got[1] is expected[1] is torch.Tensor
    torch.testing.assert_close(got[0], expected[0])
