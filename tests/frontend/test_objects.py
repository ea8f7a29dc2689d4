"""Objects of plain user classes and dataclasses created inside compiled frames."""

import dataclasses
import functools

import torch
from frontend_helpers import run_and_compare

import kiln


class Box:
    scale = 2

    def __init__(self, value, tag="box"):
        self.value = value
        self.tag = tag

    def doubled(self):
        return self.value * self.scale

    @property
    def size(self):
        return self.value.shape[0]


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    loss: torch.Tensor = None


@dataclasses.dataclass(frozen=True)
class Frozen:
    a: torch.Tensor
    b: int = 3


def make_box(x):
    b = Box(x * 2)
    b.extra = b.doubled() + b.size
    return b.extra, b.tag


def returns_object(x):
    b = Box(x.sin(), tag="out")
    return b


def dataclass_output(x):
    out = Output(logits=x * 2)
    out.loss = out.logits.sum()
    return out


def frozen_dataclass(x):
    f = Frozen(x + 1)
    return f.a * f.b, f


def same_object_twice(x):
    b = Box(x)
    return b, [b]


def test_object_used_inside():
    run_and_compare(make_box, torch.randn(3), expected_graphs=1, expected_breaks=0)


def _same_box(a, b):
    assert type(a) is type(b) and vars(a).keys() == vars(b).keys()
    for k in vars(a):
        va, vb = getattr(a, k), getattr(b, k)
        if isinstance(va, torch.Tensor):
            torch.testing.assert_close(va, vb)
        else:
            assert va == vb


def test_object_returned():
    import kiln

    kiln.reset()
    f = kiln.compile(returns_object, backend="eager")
    x = torch.randn(3)
    _same_box(f(x), returns_object(x))
    assert kiln.counters["stats"]["graph_breaks"] == 0


def test_dataclass_output():
    import kiln

    kiln.reset()
    f = kiln.compile(dataclass_output, backend="eager")
    x = torch.randn(3)
    got, want = f(x), dataclass_output(x)
    assert isinstance(got, Output)
    torch.testing.assert_close(got.loss, want.loss)
    torch.testing.assert_close(got.logits, want.logits)
    assert kiln.counters["stats"]["graph_breaks"] == 0


def test_frozen_dataclass_runs_correctly():
    import kiln

    kiln.reset()
    f = kiln.compile(frozen_dataclass, backend="eager")
    x = torch.randn(3)
    (a, fa), (b, fb) = f(x), frozen_dataclass(x)
    torch.testing.assert_close(a, b)
    assert torch.equal(fa.a, fb.a) and fa.b == fb.b


def test_object_identity_kept():
    import kiln

    kiln.reset()
    f = kiln.compile(same_object_twice, backend="eager")
    b, lst = f(torch.randn(2))
    assert lst[0] is b


class Registry(dict):
    def get(self, key):
        return super().get(str(key)) or {}

    def __contains__(self, key):
        return super().__contains__(str(key))


REGISTRY = Registry()
REGISTRY["a"] = {"scale": 3}


def reads_registry(x, key):
    cfg = REGISTRY.get(key)
    return x * cfg.get("scale", 1), key in REGISTRY


def test_dict_subclass_super_reads_are_guarded():
    import kiln

    kiln.reset()
    f = kiln.compile(reads_registry, backend="eager")
    x = torch.randn(2)
    for key in ("a", "b", "a"):
        got, want = f(x, key), reads_registry(x, key)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1]
    REGISTRY["b"] = {"scale": 5}  # the guard on the registry entry sees the change
    try:
        torch.testing.assert_close(f(x, "b")[0], x * 5)
    finally:
        del REGISTRY["b"]
    assert kiln.counters["stats"]["graph_breaks"] == 0


def test_is_between_functions():
    def helper(v):
        return v

    def f(x, fn):
        return x * 2 if fn is helper else x

    run_and_compare(f, torch.randn(2), helper, expected_graphs=1, expected_breaks=0)


class _Computed:
    """A non-data descriptor with a Python __get__ that counts its calls."""

    def __init__(self, get):
        self.get = get
        self.calls = 0

    def __get__(self, obj, owner=None):
        self.calls += 1
        return self.get(obj)


class _WithComputed:
    def __init__(self, n=0):
        self.n = n

    def _next(self):
        self.n += 1
        return self.n

    x = _Computed(_next)

    def scaled(self, k, t):
        return t * k + self.n

    triple = functools.partialmethod(scaled, 3)


def _computed_on_new_object(t):
    a = _WithComputed()
    return t + a.x, a.x, a.triple(t)


def _computed_on_input(t, a):
    return t + a.x, a.x, a.triple(t)


def test_descriptor_with_python_get_on_object_made_in_frame():
    # Note [Objects: descriptors with a Python __get__]: __get__(desc, obj, cls), not the descriptor
    vars(_WithComputed)["x"].calls = 0
    run_and_compare(_computed_on_new_object, torch.randn(3))
    assert vars(_WithComputed)["x"].calls == 6  # eager's two reads, and two per compiled call


def test_descriptor_with_python_get_on_input_object():
    # (the object is mutated by each call: a fresh one per call, not run_and_compare)
    x = torch.randn(3)
    expected = _computed_on_input(x, _WithComputed(5))
    compiled = kiln.compile(_computed_on_input, backend="eager")
    descriptor = vars(_WithComputed)["x"]
    for _ in range(2):
        descriptor.calls = 0
        a = _WithComputed(5)
        got = compiled(x, a)
        assert (
            descriptor.calls == 2 and a.n == 7
        )  # traced: never called while tracing or by a guard
        torch.testing.assert_close(got[0], expected[0])
        assert got[1] == expected[1]
        torch.testing.assert_close(got[2], expected[2])


class _WithHelper:
    def helper(self, x):
        return x + 1


def _calls_helper(o, x):
    return o.helper(x)


def test_instance_attribute_shadowing_a_method_is_guarded():
    # the second object's own `helper` wins over the class's method, as in eager
    compiled = kiln.compile(_calls_helper)
    plain, shadowed = _WithHelper(), _WithHelper()
    shadowed.helper = lambda x: x * 100
    x = torch.ones(2)
    for o in (plain, shadowed, plain):
        torch.testing.assert_close(compiled(o, x), _calls_helper(o, x))


class _Plain:
    pass


def _object_with_a_non_string_dict_key(x):
    f = _Plain()
    f.__dict__[1] = x + 1
    f.a = x * 2
    return f


def test_object_made_in_frame_with_a_non_string_dict_key():
    # the rebuilt object's dict holds the int key as eager's does (object.__setattr__ refused it)
    compiled = kiln.compile(_object_with_a_non_string_dict_key, fullgraph=True)
    x = torch.randn(3)
    got, expected = compiled(x), _object_with_a_non_string_dict_key(x)
    assert list(vars(got)) == list(vars(expected)) == [1, "a"]
    for k in (1, "a"):
        torch.testing.assert_close(vars(got)[k], vars(expected)[k])
