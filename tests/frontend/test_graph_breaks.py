"""Graph breaks with resume functions: graphs before and after, state rebuilt, eager results."""

import torch
import torch.nn as nn
from frontend_helpers import CountingBackend, LogCapture, run_and_compare

import kiln
from kiln import logs


def seed_002_fn(x):
    # 1st graph
    temp = x + 10
    kiln.graph_break()
    # 2nd graph
    temp = temp + 10
    kiln.graph_break()
    # 3rd graph
    return temp.sum()


def test_seed_002_two_breaks_three_graphs():
    x = torch.randn(10, 10, requires_grad=True)
    run_and_compare(seed_002_fn, x, expected_graphs=3, expected_frames=3, expected_breaks=2)
    kiln.reset()
    f = kiln.compile(seed_002_fn, backend="eager")
    loss = f(x)
    loss.backward()
    torch.testing.assert_close(x.grad, torch.ones_like(x))
    assert kiln.counters["stats"]["unique_graphs"] == 3


def seed_004_function(inputs):
    x = inputs["x"]
    y = inputs["y"]
    x = x.cos().cos()
    if x.mean() > 0.5:
        x = x / 1.1
    return x * y


def test_seed_004_data_dependent_branch():
    kiln.reset()
    backend = CountingBackend()
    f = kiln.compile(seed_004_function, backend=backend)
    for _ in range(3):
        inputs = {"x": torch.randn(10), "y": torch.randn(10)}
        torch.testing.assert_close(f(inputs), seed_004_function(inputs))
    # graph 1: cos, cos, mean, gt; then the taken side (cos(cos(x)) > 0.54 always: True)
    assert backend.calls == 2
    assert kiln.counters["stats"]["graph_breaks"] == 1
    assert kiln.counters["stats"]["recompiles"] == 0
    # the frame and its resume function (made per call with the call's cells) both compiled
    assert kiln.counters["frames"]["ok"] == 2 and kiln.counters["stats"]["unique_graphs"] == 2


def test_closure_made_per_call_does_not_recompile():
    def make(k):
        def scaled(v):
            return v * k

        return scaled

    def apply(fn, x):
        return fn(x) + 1

    kiln.reset()
    f = kiln.compile(apply, backend="eager")
    x = torch.randn(2)
    for _ in range(3):
        torch.testing.assert_close(f(make(2.0), x), x * 2.0 + 1)
    torch.testing.assert_close(f(make(3.0), x), x * 3.0 + 1)  # cell contents are guarded
    assert kiln.counters["stats"]["recompiles"] == 1


def branchy(x):
    y = x * 2
    if y.sum() > 0:
        out = y + 1
    else:
        out = y - 1
    return out.relu()


def test_data_dependent_branch_both_sides():
    kiln.reset()
    backend = CountingBackend()
    f = kiln.compile(branchy, backend=backend)
    for x in (torch.ones(4), -torch.ones(4), torch.ones(4), -torch.ones(4)):
        torch.testing.assert_close(f(x), branchy(x))
    assert backend.calls == 3  # before the branch; each side (with the relu after it)
    assert kiln.counters["stats"]["graph_breaks"] == 1


def break_in_loop(x):
    for i in range(3):
        x = x * 2 + i
        print("step", i)
    return x.sum()


def test_break_inside_loop_resumes_inside_the_loop(capsys):
    # Note [Resume: breaks in resume functions]: graphs before and after the print, per step
    kiln.reset()
    f = kiln.compile(break_in_loop, backend="eager")
    x = torch.randn(4)
    torch.testing.assert_close(f(x), break_in_loop(x))
    assert capsys.readouterr().out.count("step") == 6  # compiled + eager, 3 each
    assert kiln.counters["stats"]["unique_graphs"] >= 2
    assert kiln.counters["frames"]["ok"] >= 3  # the frame and its resume functions


def helper_with_print(a):
    b = a * 3
    print("inside helper")
    return b + 1


def calls_helper(x):
    y = x.sin()
    z = helper_with_print(y)
    return z.cos()


def _graphs_and_breaks_of_calls_helper():
    kiln.reset()
    backend = CountingBackend()
    f = kiln.compile(calls_helper, backend=backend)
    x = torch.randn(3)
    for _ in range(2):
        torch.testing.assert_close(f(x), calls_helper(x))
    assert kiln.counters["stats"]["recompiles"] == 0
    return backend.calls, kiln.counters["stats"]["graph_breaks"]


def test_break_inside_inlined_call_is_placed_in_the_callee():
    # sin, mul | the chain of resume functions: add, cos
    assert _graphs_and_breaks_of_calls_helper() == (2, 1)


def test_break_inside_inlined_call_compiles_callee_as_own_frame(monkeypatch):
    monkeypatch.setattr(kiln.config, "nested_graph_breaks", False)
    # calls_helper: sin | helper frame: mul | helper resume: add | calls_helper resume: cos
    assert _graphs_and_breaks_of_calls_helper() == (4, 2)


class Noisy(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        print("noisy", h.shape)
        return h.relu()


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = nn.Linear(4, 4)
        self.noisy = Noisy()

    def forward(self, x):
        return self.noisy(self.pre(x)) * 2


def test_break_inside_submodule_forward():
    kiln.reset()
    mod = Outer()
    backend = CountingBackend()
    opt = kiln.compile(mod, backend=backend)
    x = torch.randn(2, 4)
    for _ in range(2):
        torch.testing.assert_close(opt(x), mod(x))
    assert backend.calls == 2  # pre, lin | relu, *2 (Note [Nested breaks: placing the ...])
    assert kiln.counters["stats"]["recompiles"] == 0


def live_state(x, n):
    acc = [x]
    d = {"k": x * 2}
    y = x + n
    print("break")
    acc.append(y)
    return acc, d, y * n


def test_break_rebuilds_locals_of_every_kind():
    run_and_compare(live_state, torch.randn(3), 4, expected_breaks=1, expected_frames=2)


def shared_list(x):
    xs = [x]
    ys = xs
    print("break", len(xs))
    ys.append(x + 1)
    return xs


def test_break_keeps_aliasing_of_rebuilt_lists():
    run_and_compare(shared_list, torch.randn(2), expected_breaks=1)


def kw_call_break(x):
    y = x * 2
    print("a", "b", sep="-")
    return y


def test_break_at_keyword_call():
    run_and_compare(kw_call_break, torch.randn(2), expected_breaks=1, expected_graphs=1)


def test_graph_breaks_log_names_reason_and_line():
    logs.set_logs("graph_breaks")
    try:
        kiln.reset()
        with LogCapture("graph_breaks") as cap:
            kiln.compile(seed_002_fn, backend="eager")(torch.randn(2))
    finally:
        logs.set_logs("")
    msgs = cap.messages["graph_breaks"]
    assert len(msgs) == 2
    assert "kiln.graph_break() called" in msgs[0] and "test_graph_breaks.py:14" in msgs[0]


def test_explain_lists_graphs_and_breaks():
    out = kiln.explain(seed_002_fn)(torch.randn(3))
    assert out.graph_count == 3 and out.graph_break_count == 2
    assert all("kiln.graph_break()" in where for _, where in out.break_reasons)


def test_fullgraph_turns_break_into_error():
    import pytest

    from kiln.exc import Unsupported

    f = kiln.compile(seed_002_fn, backend="eager", fullgraph=True)
    with pytest.raises(Unsupported, match="graph_break"):
        f(torch.randn(2))


def test_break_in_closure_shares_cells():
    scale = [3.0]
    offset = torch.ones(2)

    def fn(x):
        y = x * scale[0]
        print("break")
        return y + offset

    kiln.reset()
    f = kiln.compile(fn, backend="eager")
    x = torch.randn(2)
    torch.testing.assert_close(f(x), fn(x))
    assert kiln.counters["stats"]["unique_graphs"] == 2
    scale[0] = 5.0  # the guard on the closure contents sees the change
    torch.testing.assert_close(f(x), fn(x))


def test_compiled_autograd_config_wraps_frames(monkeypatch):
    from kiln import config

    monkeypatch.setattr(config, "compiled_autograd", True)
    x = torch.randn(4, requires_grad=True)
    kiln.reset()
    f = kiln.compile(seed_002_fn, backend="eager")
    f(x).backward()
    torch.testing.assert_close(x.grad, torch.ones_like(x))
    src = f._kiln_cache.entry_info[0].guard_source
    assert "___kiln_config.compiled_autograd is True" in src


def test_graph_breaks_logged_once_per_location():
    logs.set_logs("graph_breaks")
    try:
        kiln.reset()
        f = kiln.compile(break_in_loop, backend="eager")
        g = kiln.compile(break_in_loop, backend="eager")  # a second wrapper, same location
        with LogCapture("graph_breaks") as cap:
            f(torch.randn(2))
            g(torch.randn(2))
    finally:
        logs.set_logs("")
    # one location (the print: the resume function traces on through the loop's iterator), logged
    # once for three iterations and two wrappers
    messages = cap.messages["graph_breaks"]
    assert len(messages) == 1 and "print" in messages[0]


def cells_and_break(x):
    w = x * 2

    def inner(v):
        return v + w

    y = inner(x)
    print("break")
    w = w + 1  # the resume function writes the shared cell
    return inner(y), w


def test_break_in_frame_with_cells():
    kiln.reset()
    f = kiln.compile(cells_and_break, backend="eager")
    for _ in range(3):
        x = torch.randn(2)
        got, want = f(x), cells_and_break(x)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b)
    assert kiln.counters["stats"]["graph_breaks"] == 1
    assert kiln.counters["stats"]["recompiles"] == 0


def test_object_rebuilt_for_both_ways_out_of_a_loop():
    """A break at the FOR_ITER of a resumed loop writes two continuations (next item, loop
    done); a set made in the frame and live in both is rebuilt in each (Note [Graph breaks: two
    continuations]): the second read a temp only the first stored (UnboundLocalError)."""

    def fn():
        out = []
        for a in (1, 2):
            for b in (3, 4):
                kiln.graph_break()
                s = set("ab")
                s.add(b + a)
                out.append(len(s))
        return out, sorted(map(str, s))

    kiln.reset()
    assert kiln.compile(fn, backend="eager")() == fn()


class _Settings:
    stack = None


SETTINGS = _Settings()


@torch.compiler.disable
def _push_level():
    SETTINGS.stack = [*SETTINGS.stack, len(SETTINGS.stack)]


def attribute_read_then_a_break_that_changes_it(x):
    old = SETTINGS.stack
    _push_level()  # a break: Python runs the call, which changes what `old` was read from
    return x + len(old), old, SETTINGS.stack


def test_local_read_from_state_keeps_its_value_across_the_break():
    # Note [Graph breaks: values read before the instruction]
    x = torch.randn(3)
    SETTINGS.stack = [0]
    expected = attribute_read_then_a_break_that_changes_it(x)
    SETTINGS.stack = [0]
    got = kiln.compile(attribute_read_then_a_break_that_changes_it, backend="eager")(x)
    torch.testing.assert_close(got[0], expected[0])
    assert got[1:] == expected[1:] == ([0], [0, 1])


def stdout_swapped_in_a_with_block():
    import contextlib
    import io
    import sys

    f = io.StringIO()
    orig = sys.stdout
    with contextlib.redirect_stdout(f):
        print("inside", file=sys.stdout)
    return sys.stdout is orig, f.getvalue()


def test_stream_read_before_redirect_stdout_is_the_original():
    # CPython's test_contextlib TestRedirectStdout: `orig` is read before the with block swaps
    expected = stdout_swapped_in_a_with_block()
    assert kiln.compile(stdout_swapped_in_a_with_block, backend="eager")() == expected


def test_break_before_tracing_is_placed_at_the_def_line():
    class Shifted(torch.nn.Module):
        def forward(self, x):
            return x - 1

    calls = []
    handle = torch.nn.modules.module.register_module_forward_pre_hook(
        lambda mod, args: calls.append(type(mod).__name__)
    )
    try:
        m = Shifted()
        x = torch.randn(3)
        out = kiln.explain(m)(x)
        torch.testing.assert_close(kiln.compile(m, backend="eager")(x), x - 1)
    finally:
        handle.remove()
    [(reason, where)] = out.break_reasons
    assert reason == "global module hooks"
    assert where is not None and "def forward(self, x):" in where
    assert calls == ["Shifted", "Shifted"]  # once per call, as eager runs the hook
