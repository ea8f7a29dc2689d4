"""The mechanisms Hugging Face decoders need, in small eager-vs-compiled tests: classes whose
metaclass keeps type.__call__, a Python __getattribute__, `is None` of an object made in the
frame, a return value read through a dict the frame mutated, a decorated forward(*args)."""

import functools

import torch
from frontend_helpers import CountingBackend

import kiln


class KeepsCall(type):
    """A metaclass hooking class-level __setattr__ only (as transformers' ModelOutput's does)."""

    def __setattr__(cls, name, value):
        super().__setattr__(name, value)


class Out(metaclass=KeepsCall):
    def __init__(self, a, b=None):
        self.a = a
        self.b = b


class Counting(type):
    calls = 0

    def __call__(cls, *args, **kwargs):
        Counting.calls += 1
        return super().__call__(*args, **kwargs)


class Counted(metaclass=Counting):
    def __init__(self, a):
        self.a = a


def compiled(fn, backend=None):
    kiln.reset()
    return kiln.compile(fn, backend=backend or CountingBackend())


def test_metaclass_keeping_type_call_builds_in_the_graph():
    def f(x):
        o = Out(x + 1, b=x * 2)
        return o, o.a + o.b

    x = torch.randn(4)
    o, y = compiled(f)(x)
    eo, ey = f(x)
    assert type(o) is Out
    torch.testing.assert_close(o.a, eo.a)
    torch.testing.assert_close(o.b, eo.b)
    torch.testing.assert_close(y, ey)
    assert kiln.counters["stats"]["graph_breaks"] == 0
    assert kiln.counters["stats"]["unique_graphs"] == 1


def test_metaclass_with_its_own_call_is_not_inlined():
    def f(x):
        return Counted(x + 1).a * 2

    x = torch.randn(4)
    before = Counting.calls
    torch.testing.assert_close(compiled(f)(x), f(x))
    assert Counting.calls == before + 2  # the metaclass's __call__ ran in the compiled call too
    assert kiln.counters["stats"]["graph_breaks"] == 1


class Config:
    """attribute_map through a Python __getattribute__ (Hugging Face's PreTrainedConfig)."""

    attribute_map = {"num_layers": "n_layer"}

    def __init__(self):
        self.n_layer = 3

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)


def test_python_getattribute_is_inlined():
    def f(x, cfg):
        return x * cfg.num_layers + cfg.n_layer

    x, cfg = torch.randn(4), Config()
    fn = compiled(f)
    torch.testing.assert_close(fn(x, cfg), f(x, cfg))
    assert kiln.counters["stats"]["graph_breaks"] == 0
    cfg.n_layer = 5  # guarded: a recompile, never a stale constant
    torch.testing.assert_close(fn(x, cfg), f(x, cfg))


def test_python_getattribute_values_are_guarded_through_the_instance_dict():
    # Note [Objects: a Python __getattribute__]: the guard reads `cfg.__dict__['n_layer']`, not
    # `cfg.num_layers` through the Python hook on every call
    def f(x, cfg):
        return x * cfg.num_layers

    x, cfg = torch.randn(4), Config()
    fn = kiln.compile(f, backend="eager")
    torch.testing.assert_close(fn(x, cfg), f(x, cfg))
    guard = fn._kiln_cache.entry_info[0].guard_source
    assert "['n_layer']" in guard and ".num_layers" not in guard, guard
    cfg.n_layer = 7
    torch.testing.assert_close(fn(x, cfg), f(x, cfg))
    assert len(fn._kiln_cache.entry_info) == 2


class MappedWithFallback(Config):
    """A Python __getattribute__ and a __getattr__ called when it raises AttributeError."""

    def __getattribute__(self, key):
        if key == "sentinel":
            raise AttributeError(key)
        return super().__getattribute__(key)

    def __getattr__(self, key):
        if key == "sentinel":
            return 5
        raise AttributeError(key)


def test_python_getattribute_falls_back_to_getattr():
    # Note [Objects: a Python __getattribute__]: __getattr__ runs when the hook raises
    def f(x, cfg):
        return x * cfg.num_layers * cfg.sentinel, hasattr(cfg, "extra"), getattr(cfg, "k", 7)

    x, cfg = torch.randn(4), MappedWithFallback()
    fn = kiln.compile(f, backend="eager", fullgraph=True)
    got, expected = fn(x, cfg), f(x, cfg)
    torch.testing.assert_close(got[0], expected[0])
    assert got[1:] == expected[1:] == (False, 7)
    other = MappedWithFallback()
    other.extra, other.k = 1, 9  # the missing names were guarded absent: a recompile
    assert fn(x, other)[1:] == f(x, other)[1:] == (True, 9)


class Cache:
    def __init__(self):
        self.layers = []

    def update(self, k):
        if len(self.layers) == 0:
            self.layers.append(k)
        else:
            self.layers[0] = torch.cat([self.layers[0], k])
        return self.layers[0]


def test_is_none_of_an_object_made_in_the_frame():
    def f(x, cache=None):
        if cache is None:
            cache = Cache()
        y = cache.update(x) if cache is not None else x
        return y.sum(), cache

    x = torch.randn(3)
    got, cache = compiled(f)(x)
    torch.testing.assert_close(got, f(x)[0])
    assert type(cache) is Cache and len(cache.layers) == 1
    assert kiln.counters["stats"]["graph_breaks"] == 0


def test_return_value_read_through_a_renamed_kwarg():
    """The return value is loaded before the replayed stores: `kwargs` is cleared and refilled
    after the graph, yet the returned object is the one `kwargs["old"]` held on entry."""

    def f(x, **kwargs):
        if "old" in kwargs:
            kwargs["cache"] = kwargs.pop("old")
        kwargs["cache"].update(x)
        return x + 1, kwargs["cache"]

    x = torch.randn(3)
    ce, cg = Cache(), Cache()
    expected, got = f(x, old=ce), compiled(f)(x, old=cg)
    torch.testing.assert_close(got[0], expected[0])
    assert got[1] is cg and len(cg.layers) == 1
    torch.testing.assert_close(cg.layers[0], ce.layers[0])
    assert kiln.counters["stats"]["graph_breaks"] == 0


def renaming(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    @renaming
    def forward(self, x):
        return self.lin(x).relu()


def test_decorated_forward_guards_the_module_hooks_through_args():
    net = Net()
    fn = compiled(net)
    x = torch.randn(2, 4)
    for _ in range(3):
        torch.testing.assert_close(fn(x), net(x))
    assert kiln.counters["stats"]["unique_graphs"] == 1
    assert kiln.counters["stats"]["recompiles"] == 0
    seen = []
    net.register_forward_hook(lambda m, i, o: seen.append(1))
    torch.testing.assert_close(fn(x), net(x))
    assert len(seen) == 2
