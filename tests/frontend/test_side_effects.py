"""Side effects made while tracing are replayed after the graph, exactly as eager leaves them."""

import types

import pytest
import torch
import torch.nn as nn
from frontend_helpers import CountingBackend, run_and_compare

import kiln


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.steps = 0
        self.lin = nn.Linear(2, 2)
        self.last = None

    def forward(self, x):
        self.steps = self.steps + 1
        y = self.lin(x) * self.steps
        self.last = y
        return y + (self.last * 0)


def test_module_attribute_stores_replayed_and_read_back():
    kiln.reset()
    m, ref = Counter(), Counter()
    ref.load_state_dict(m.state_dict())
    opt = kiln.compile(m, backend="eager")
    x = torch.randn(2)
    for _ in range(3):
        torch.testing.assert_close(opt(x), ref(x))
    assert m.steps == ref.steps == 3
    torch.testing.assert_close(m.last, ref.last)
    assert kiln.counters["stats"]["graph_breaks"] == 0


def mutate_inputs(xs, d, x):
    xs.append(x * 2)
    d["new"] = x + 1
    xs.insert(0, 5)
    d.pop("a")
    return len(xs), xs


def test_input_list_and_dict_mutation():
    run_and_compare(
        mutate_inputs,
        [torch.ones(1)],
        {"a": 1},
        torch.ones(1),
        expected_graphs=1,
        expected_breaks=0,
    )


COUNT = 0


def bump_global(x):
    global COUNT
    COUNT = COUNT + 1
    return x * 2


def test_global_store():
    global COUNT
    COUNT = 0
    kiln.reset()
    f = kiln.compile(bump_global, backend="eager")
    f(torch.ones(1))
    f(torch.ones(1))
    assert COUNT == 2


def test_nonlocal_store():
    total = 0

    def add(x):
        nonlocal total
        total = total + 1
        return x + total

    kiln.reset()
    f = kiln.compile(add, backend="eager")
    assert f(torch.zeros(1)).item() == 1 and total == 1
    assert f(torch.zeros(1)).item() == 2 and total == 2


class Holder:
    pass


def store_then_break(h, x):
    h.value = x * 2
    print("break")
    return h.value + 1


def test_side_effect_before_a_break_is_visible_to_python():
    h1, h2 = Holder(), Holder()
    kiln.reset()
    f = kiln.compile(store_then_break, backend="eager")
    x = torch.randn(2)
    torch.testing.assert_close(f(h1, x), store_then_break(h2, x))
    torch.testing.assert_close(h1.value, h2.value)
    assert kiln.counters["stats"]["graph_breaks"] == 1


def appends_then_breaks(acc, x):
    acc.append(x)
    print("inside")
    return x


def caller(x):
    acc = []
    y = appends_then_breaks(acc, x * 2)
    return acc, y


def test_mutation_inside_a_call_that_breaks_is_not_repeated():
    # the callee mutated `acc` before breaking: no resume is placed there (it would append twice)
    run_and_compare(caller, torch.randn(2))


def test_setattr_on_submodule_and_recompile_on_value():
    class Wrap(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Counter()

        def forward(self, x):
            self.inner.flag = True
            return self.inner(x)

    kiln.reset()
    backend = CountingBackend()
    w = Wrap()
    opt = kiln.compile(w, backend=backend)
    opt(torch.randn(2))
    assert w.inner.flag is True and w.inner.steps == 1


def pops_kwargs(x, **kwargs):
    flag = kwargs.pop("flag", False)
    kwargs["seen"] = True
    return x * 2 if flag else x, kwargs


def test_kwargs_dict_mutation_reads_old_contents_first():
    run_and_compare(pops_kwargs, torch.randn(2), flag=True, other=torch.ones(2))


class Tracker:
    def __init__(self):
        self.calls = 0
        self.log = []


def callee_stores_then_breaks(t, x):
    t.calls = t.calls + 1
    print("break inside the callee")
    return x * t.calls


def outer_calls(t, x):
    y = x + 1
    return callee_stores_then_breaks(t, y) * 2


def test_store_made_by_a_call_that_breaks_is_made_once():
    t1, t2 = Tracker(), Tracker()
    kiln.reset()
    f = kiln.compile(outer_calls, backend="eager")
    x = torch.randn(2)
    for _ in range(2):
        torch.testing.assert_close(f(t1, x), outer_calls(t2, x))
    assert t1.calls == t2.calls == 2


def break_in_try_finally(t, x):
    t.log.append("start")
    try:
        y = x * 2
        print("break inside try/finally")
        y = y + 1
    finally:
        t.log.append("finally")
    return y


def test_break_inside_try_finally():
    t1, t2 = Tracker(), Tracker()
    kiln.reset()
    f = kiln.compile(break_in_try_finally, backend="eager")
    x = torch.randn(2)
    torch.testing.assert_close(f(t1, x), break_in_try_finally(t2, x))
    assert t1.log == t2.log == ["start", "finally"]
    assert kiln.counters["stats"]["graph_breaks"] == 1
    assert kiln.counters["stats"]["unique_graphs"] == 2


class Logged(types.ModuleType):
    """Logs its attribute reads, writes and deletions (a module subclass: its dict is a slot)."""

    def __getattribute__(self, name):
        LOGGED.append(("get", name))
        return types.ModuleType.__getattribute__(self, name)

    def __setattr__(self, name, value):
        LOGGED.append(("set", name))
        types.ModuleType.__setattr__(self, name, value)


class LoggedPlain:
    def __getattribute__(self, name):
        LOGGED.append(("get", name))
        return object.__getattribute__(self, name)

    def __setattr__(self, name, value):
        LOGGED.append(("set", name))
        object.__setattr__(self, name, value)


LOGGED = []


@pytest.mark.parametrize("cls", [Logged, LoggedPlain], ids=["module", "plain"])
def test_stores_read_no_attribute_through_the_objects_getattribute(cls):
    """Checking what a traced store replaces reads the object's dict itself: its class's
    __getattribute__ sees only the program's own reads (the module case failed on 3.13)."""

    def fn(x):
        obj = cls("m") if cls is Logged else cls()
        obj.foo = 12
        y = x + obj.foo
        return y

    LOGGED.clear()
    expected = fn(torch.ones(2))
    eager_log = list(LOGGED)
    LOGGED.clear()
    got = kiln.compile(fn, backend="eager")(torch.ones(2))
    torch.testing.assert_close(got, expected)
    assert LOGGED == eager_log
