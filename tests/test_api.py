"""The public API: compile() forms and argument errors, backends, reset, disable, explain."""

import functools

import pytest
import torch

import kiln
from kiln.exc import KilnError


@pytest.fixture(autouse=True)
def _reset():
    kiln.reset()


def counting():
    calls = []

    def backend(gm, example_inputs):
        calls.append(gm)
        return gm.forward

    return backend, calls


def test_decorator_without_arguments(monkeypatch):
    monkeypatch.setattr(
        kiln.api, "resolve_with_options", lambda b, m, o: (lambda gm, ex: gm.forward, "t")
    )

    @kiln.compile
    def f(x):
        return x + 1

    x = torch.randn(2)
    torch.testing.assert_close(f(x), x + 1)
    assert kiln.counters["stats"]["unique_graphs"] == 1
    assert f.__name__ == "f"


def test_decorator_with_arguments_and_backend_callable():
    backend, calls = counting()

    @kiln.compile(backend=backend, fullgraph=True)
    def f(x):
        return x * 2

    x = torch.randn(2)
    f(x)
    f(x)
    torch.testing.assert_close(f(x), x * 2)
    assert len(calls) == 1


def test_lambda_bound_method_and_callable_object():
    backend, calls = counting()
    g = kiln.compile(lambda x: x.exp(), backend=backend)
    x = torch.randn(3)
    torch.testing.assert_close(g(x), x.exp())

    class Thing:
        def __init__(self):
            self.k = 3

        def method(self, x):
            return x * self.k

        def __call__(self, x):
            return x - self.k

    thing = Thing()
    m = kiln.compile(thing.method, backend=backend)
    torch.testing.assert_close(m(x), x * 3)
    c = kiln.compile(thing, backend=backend)
    torch.testing.assert_close(c(x), x - 3)
    assert len(calls) == 3


def test_c_function_and_partial_compile_through_a_calling_frame():
    backend, calls = counting()
    x, y = torch.randn(3), torch.randn(3)
    s = kiln.compile(torch.sin, backend=backend, fullgraph=True)
    torch.testing.assert_close(s(x), torch.sin(x))
    add2 = kiln.compile(functools.partial(torch.add, alpha=2), backend=backend, fullgraph=True)
    torch.testing.assert_close(add2(x, y), torch.add(x, y, alpha=2))
    assert len(calls) == 2 and s.__name__ == "sin"
    with pytest.raises(TypeError, match="takes 1 positional argument"):
        kiln.compile(torch.sin, backend=backend)(x, x, x)  # eager's own error, after the break


def test_named_backends_eager():
    f = kiln.compile(lambda x: x.sin(), backend="eager")
    x = torch.randn(2)
    torch.testing.assert_close(f(x), x.sin())
    assert "eager" in kiln.list_backends()


def test_registered_backend_by_name():
    backend, calls = counting()
    kiln.register_backend("test_counting_backend", backend)
    f = kiln.compile(lambda x: x.cos(), backend="test_counting_backend")
    f(torch.randn(2))
    assert len(calls) == 1


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(backend="no_such_backend"), KilnError, "unknown backend 'no_such_backend'"),
        (dict(backend="eager", mode="fastest"), KilnError, "unknown mode 'fastest'"),
        (dict(backend="eager", options=[1]), TypeError, "options must be a dict"),
        (dict(backend="eager", fullgraph="yes"), TypeError, "fullgraph must be a bool"),
        (dict(backend="eager", dynamic="sometimes"), TypeError, "dynamic must be None"),
        (dict(backend=42), TypeError, "backend must be a name or a callable"),
    ],
)
def test_bad_arguments_raise_naming_the_cause(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        kiln.compile(lambda x: x, **kwargs)


def test_non_callable_raises():
    with pytest.raises(TypeError, match="expects a function or an nn.Module"):
        kiln.compile(3, backend="eager")


def test_reset_clears_entries_and_counters():
    backend, calls = counting()
    f = kiln.compile(lambda x: x + 1, backend=backend)
    x = torch.randn(2)
    f(x)
    assert kiln.counters["stats"]["unique_graphs"] == 1
    kiln.reset()
    assert not kiln.counters
    f(x)
    assert len(calls) == 2


def test_disable_keeps_function_out_of_capture():
    @kiln.disable
    def helper(x):
        return x * 10

    backend, calls = counting()
    f = kiln.compile(lambda x: helper(x) + 1, backend=backend)
    x = torch.randn(2)
    torch.testing.assert_close(f(x), x * 10 + 1)
    assert len(calls) == 1  # `+ 1`, after the break; helper ran in Python
    assert kiln.counters["stats"]["graph_breaks"] == 1
    assert helper(x).shape == x.shape
    # disabling a compiled function gives back the original
    g = kiln.compile(lambda x: x, backend="eager")
    d = kiln.disable(g)
    assert d._kiln_disabled and d.__wrapped__ is g._kiln_orig_fn
    assert kiln.compile(helper, backend="eager") is helper


def test_compile_disable_gives_the_function_back(monkeypatch):
    backend, calls = counting()

    def f(x):
        return x.cos() + 1

    assert kiln.compile(f, backend=backend, disable=True) is f
    assert kiln.compile(backend=backend, disable=True)(f) is f
    monkeypatch.setattr(kiln.config, "disable", True)
    g = kiln.compile(f, backend=backend)
    x = torch.randn(3)
    torch.testing.assert_close(g(x), f(x))
    assert g is f and calls == []
    monkeypatch.setattr(kiln.config, "disable", False)
    torch.testing.assert_close(kiln.compile(f, backend=backend)(x), f(x))
    assert len(calls) == 1


def test_graph_break_outside_compiled_code_is_a_no_op():
    assert kiln.graph_break() is None


def test_explain_reports_graphs_ops_and_guards():
    def f(x):
        return torch.relu(x) * 2

    out = kiln.explain(f)(torch.randn(3))
    assert out.graph_count == 1 and out.graph_break_count == 0
    assert [getattr(o, "__name__", o) for o in out.ops_per_graph[0]] == ["relu", "mul"]
    text = str(out)
    assert "Graph count: 1" in text and "def guard(x):" in text


def test_explain_reports_break_reason_and_user_line():
    def f(x):
        y = x + 1
        print("side effect")
        return y

    out = kiln.explain(f)(torch.randn(3))
    assert out.graph_break_count == 1 and out.graph_count == 1
    reason, where = out.break_reasons[0]
    assert "print" in reason
    assert "test_api.py" in where and 'print("side effect")' in where
    assert "Break reasons:" in str(out)


def test_counters_frames():
    f = kiln.compile(lambda x: x + 1, backend="eager")
    f(torch.randn(2))
    f(torch.randn(3))
    assert kiln.counters["frames"]["total"] == 2
    assert kiln.counters["frames"]["ok"] == 2
    assert kiln.counters["stats"]["calls_captured"] == 2


def test_compiled_module_truthiness_and_len_follow_the_module():
    empty, full = torch.nn.ModuleList(), torch.nn.ModuleList([torch.nn.ReLU(), torch.nn.Tanh()])
    assert not kiln.compile(empty)
    assert kiln.compile(full) and len(kiln.compile(full)) == 2
    assert bool(kiln.compile(torch.nn.Linear(2, 2)))  # no __len__: truthy, as the module
    with pytest.raises(TypeError):
        len(kiln.compile(torch.nn.Linear(2, 2)))
    assert not kiln.disable(empty) and len(kiln.disable(full)) == 2


def test_compile_callbacks_see_each_frame_compile():
    events = []
    kiln.reset()
    start = kiln.on_compile_start(lambda e: events.append(("start", e.name, e.compiled)))
    end = kiln.on_compile_end(lambda e: events.append(("end", e.name, e.compiled)))
    assert callable(start) and callable(end)

    def f(x):
        x = x + 1
        kiln.graph_break()
        return x.sin()

    def g(x):
        for _ in range(10):
            x = x + 1
        return x

    try:
        cf = kiln.compile(f, backend="eager")
        torch.testing.assert_close(cf(torch.ones(2)), f(torch.ones(2)))
        cf(torch.ones(2))  # a cache hit compiles nothing
        qual = f.__qualname__
        assert [(k, n.split(".__resume_at_")[0], c) for k, n, c in events] == [
            ("start", qual, None),
            ("end", qual, True),
            ("start", qual, None),
            ("end", qual, True),
        ]
        assert "__resume_at_" in events[2][1]
        events.clear()
        kiln.compile(g, backend="eager", fullgraph=True)(torch.ones(2))
        assert [k for k, _, _ in events] == ["start", "end"]
    finally:
        kiln.remove_compile_callbacks()
    events.clear()
    kiln.compile(g, backend="eager")(torch.ones(3, 3))
    assert events == []
    kiln.on_compile_start(lambda e: events.append(e.name))
    kiln.reset()  # (forgets them too, as torch._dynamo.reset)
    kiln.compile(g, backend="eager")(torch.ones(4))
    assert events == []
