"""More of the Python language inside compiled frames (sets, dict-subclass dataclasses made while
tracing, os.environ, inspect/dataclasses helpers, super() into object): eager vs compiled."""

import collections
import dataclasses
import inspect
import os

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln


def t(*shape):
    return torch.randn(*shape)


# --- sets -----------------------------------------------------------------------------------


def set_literal_and_ops(x):
    a = {1, 2, 3}
    b = {3, 4}
    c = a | b
    c |= {9}
    d = a & b
    e = a - b
    return x * len(c), 3 in d, 4 in e, sorted(c), a <= c, a ^ b == {1, 2, 4}


def set_comprehension(x):
    names = {n.upper() for n in ("a", "b", "a")}
    return x + len(names), "A" in names


def set_mutation(x):
    s = set()
    for i in range(4):
        s.add(i % 3)
    s.discard(0)
    s.update([7, 8])
    s.remove(8)
    return x * sum(s), frozenset(s)


def set_builtin(x):
    s = set([1, 2, 2, 3])
    f = frozenset((1, 2))
    return x * len(s), f.issubset(s), s.isdisjoint({9}), len(s.union(f))


# --- dict subclasses / dataclasses made while tracing --------------------------------------


class Output(collections.OrderedDict):
    """A ModelOutput-like class: a dataclass that is an OrderedDict of its non-None fields."""

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = self.__dict__.get(f.name)
            if v is not None:
                self[f.name] = v

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def __setattr__(self, name, value):
        if name in {f.name for f in dataclasses.fields(self)} and value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def __getitem__(self, k):
        if isinstance(k, str):
            return dict(self.items())[k]
        return self.to_tuple()[k]

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


@dataclasses.dataclass
class MyOutput(Output):
    logits: torch.Tensor = None
    hidden: torch.Tensor = None
    extra: int = None


def dict_dataclass_made(x):
    out = MyOutput(logits=x * 2, hidden=None)
    out.hidden = x + 1
    return out


def dict_dataclass_read(x):
    out = MyOutput(logits=x * 2, hidden=x - 1)
    keys = list(out.keys())
    return out[0] + out["hidden"] + out.logits, keys, len(out), "extra" in out, out.to_tuple()


@dataclasses.dataclass
class Plain:
    a: torch.Tensor
    b: int = 3


def plain_dataclass(x):
    p = Plain(x)
    p.b += 1
    names = [f.name for f in dataclasses.fields(p)]
    return p.a * p.b, names, dataclasses.is_dataclass(p)


class Base:
    def __init__(self):
        super().__init__()
        self.k = 2


class Child(Base):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale


def super_into_object(x):
    c = Child(3)
    return x * c.k * c.scale


class WithProperty:
    def __init__(self):
        self._v = 1

    @property
    def v(self):
        return self._v

    @v.setter
    def v(self, value):
        self._v = value * 10


def property_setter_on_new_object(x):
    o = WithProperty()
    o.v = 2
    return x * o.v, o._v


def object_dict_access(x):
    o = Child(2)
    d = o.__dict__
    return x * d["scale"], sorted(d), d.get("missing", 5)


# --- inspect ---------------------------------------------------------------------------------


def helper(a, b, c=1):
    return a + b * c


class Holder(torch.nn.Module):
    def chunk(self, h):
        return h * 2

    def forward(self, x):
        n = len(inspect.signature(self.chunk).parameters)
        m = len(inspect.signature(helper).parameters)
        names = list(inspect.signature(helper).parameters)
        fn = self.chunk.__func__
        return fn(self, x) * n + m, names


CASES = [
    ("set_literal_and_ops", set_literal_and_ops, (t(3),)),
    ("set_comprehension", set_comprehension, (t(3),)),
    ("set_mutation", set_mutation, (t(3),)),
    ("set_builtin", set_builtin, (t(3),)),
    ("dict_dataclass_made", dict_dataclass_made, (t(3),)),
    ("dict_dataclass_read", dict_dataclass_read, (t(3),)),
    ("plain_dataclass", plain_dataclass, (t(3),)),
    ("super_into_object", super_into_object, (t(3),)),
    ("property_setter_on_new_object", property_setter_on_new_object, (t(3),)),
    ("object_dict_access", object_dict_access, (t(3),)),
]


@pytest.mark.parametrize("name,fn,args", CASES, ids=[c[0] for c in CASES])
def test_language_feature(name, fn, args):
    run_and_compare(fn, *args, expected_graphs=1, expected_frames=1, expected_breaks=0)


def test_dict_dataclass_returned_is_real():
    kiln.reset()
    x = t(3)
    out = kiln.compile(dict_dataclass_made, backend="eager")(x)
    assert type(out) is MyOutput and list(out.keys()) == ["logits", "hidden"]
    assert out.extra is None and torch.equal(out["hidden"], x + 1)


def test_inspect_signature_of_method_and_function():
    run_and_compare(Holder(), t(3), expected_graphs=1, expected_breaks=0)


def test_os_environ_read_is_guarded(monkeypatch):
    def f(x):
        if os.environ.get("KILN_TEST_FLAG", "0") == "1":
            return x + 1
        if "KILN_TEST_OTHER" in os.environ:
            return x * int(os.environ["KILN_TEST_OTHER"])
        return x - 1

    monkeypatch.delenv("KILN_TEST_FLAG", raising=False)
    monkeypatch.delenv("KILN_TEST_OTHER", raising=False)
    kiln.reset()
    cf = kiln.compile(f, backend="eager")
    x = t(3)
    assert torch.equal(cf(x), x - 1)
    monkeypatch.setenv("KILN_TEST_FLAG", "1")
    assert torch.equal(cf(x), x + 1)
    monkeypatch.setenv("KILN_TEST_FLAG", "0")
    monkeypatch.setenv("KILN_TEST_OTHER", "3")
    assert torch.equal(cf(x), x * 3)
    assert kiln.counters["stats"]["graph_breaks"] == 0
    assert kiln.counters["stats"]["recompiles"] == 2


Pair = collections.namedtuple("Pair", ["a", "b"])


def namedtuple_methods(x):
    p = Pair(x, 2)
    q = p._replace(b=3)
    d = q._asdict()
    return q.a * q.b, q, d["b"], list(d)


@dataclasses.dataclass
class Config:
    width: int = 4
    scale: float = 1.0


def dataclass_replace(x):
    c = Config()
    c2 = dataclasses.replace(c, scale=2.5)
    return x * c2.scale + c2.width, c2.width


def dataclass_replace_of_input(x, cfg):
    c2 = dataclasses.replace(cfg, width=cfg.width + 1)
    return x * c2.width


def test_namedtuple_replace_and_asdict():
    run_and_compare(namedtuple_methods, t(3), expected_graphs=1, expected_breaks=0)


def test_dataclasses_replace():
    run_and_compare(dataclass_replace, t(3), expected_graphs=1, expected_breaks=0)
    run_and_compare(
        dataclass_replace_of_input, t(3), Config(), expected_graphs=1, expected_breaks=0
    )


def defaultdict_groups(x):
    groups = collections.defaultdict(list)
    for i, name in enumerate(["a", "b", "a"]):
        groups[name].append(x * i)
    counts = collections.defaultdict(int)
    counts["z"] += 2
    return {k: sum(v) for k, v in groups.items()}, dict(counts), groups


def test_defaultdict_made_while_tracing():
    run_and_compare(defaultdict_groups, t(3), expected_graphs=1, expected_breaks=0)


def yield_from_generators(x):
    def inner(n):
        for i in range(n):
            yield x * i
        return n * 10

    def outer():
        total = yield from inner(2)
        yield from [x + 1, x + 2]
        yield x * total

    return list(outer())


def test_yield_from():
    run_and_compare(yield_from_generators, t(3), expected_graphs=1, expected_breaks=0)


class View(collections.abc.Sized):
    """An instance of a collections.abc subclass (ABCMeta, empty __slots__) made while tracing."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def abc_subclass_instance(x):
    v = View(3)
    return x * len(v)


def test_instance_of_abc_subclass_made_while_tracing():
    run_and_compare(abc_subclass_instance, t(3), expected_graphs=1, expected_breaks=0)
