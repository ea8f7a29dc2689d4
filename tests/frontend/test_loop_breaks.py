"""A break inside a loop of a frame whose own code made no tensor op: the frame runs in Python
and its callees compile as their own frames, as torch.compile does (Note [Graph breaks: a loop
that only calls]); a frame whose own code made one keeps its resume functions."""

import torch
from frontend_helpers import CountingBackend, assert_same, run_and_compare

import kiln


def _sin(x):
    return torch.sin(x)


def test_while_loop_that_only_calls():
    # PyTorch's test_while_loop_graph_break (tacotron2): one graph, the callee's
    def fn(x):
        i = 20
        while i > 10:
            x = _sin(x)
            i -= 1
            kiln.graph_break()
        return x

    run_and_compare(fn, torch.randn(4), expected_graphs=1)


def test_for_loop_that_only_calls():
    # PyTorch's test_for_loop_graph_break: 100 passes, one graph
    def fn(x):
        for _ in range(100):
            _sin(x)
            kiln.graph_break()
        return x

    run_and_compare(fn, torch.randn(4), expected_graphs=1)


def test_callee_results_and_side_effects_as_eager():
    class State:
        last = None

    state = State()

    def block(x, k):
        state.last = k
        return x * 2 + k

    def fn(x):
        out = []
        for k in range(4):
            x = block(x, k)
            out.append(x)
            kiln.graph_break()
        return out, state.last

    expected = fn(torch.ones(3))
    state.last = None
    kiln.reset()
    backend = CountingBackend()
    got = kiln.compile(fn, backend=backend)(torch.ones(3))
    assert_same(expected, got)
    assert state.last == 3
    # block's own frame, traced for k = 0 and then with k dynamic (torch's count too)
    assert backend.calls == 2


def test_own_tensor_op_keeps_the_resume_functions():
    # the frame's own `x * 2` is captured (torch.compile runs this frame eagerly: no graph)
    def fn(x):
        for _ in range(3):
            x = x * 2
            kiln.graph_break()
        return x

    kiln.reset()
    backend = CountingBackend()
    x = torch.randn(4)
    assert_same(fn(x), kiln.compile(fn, backend=backend)(x))
    targets = [n.target for gm in backend.graphs for n in gm.graph.nodes]
    assert backend.calls >= 2 and any("mul" in str(t) for t in targets)


def test_own_op_before_the_loop_keeps_the_resume_functions():
    def fn(x):
        x = x + 1
        for _ in range(3):
            x = _sin(x)
            kiln.graph_break()
        return x

    kiln.reset()
    backend = CountingBackend()
    x = torch.randn(4)
    assert_same(fn(x), kiln.compile(fn, backend=backend)(x))
    targets = [str(n.target) for gm in backend.graphs for n in gm.graph.nodes]
    assert any("add" in t for t in targets)


def test_break_before_the_loop_is_not_in_it():
    # PyTorch's test_for_loop_graph_break_before: the loop after the break is one graph
    def fn(x):
        kiln.graph_break()
        for _ in range(100):
            _sin(x)
        return x

    run_and_compare(fn, torch.randn(4), expected_graphs=1)


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.full((4,), 0.5))

    def forward(self, x):
        return torch.tanh(x * self.scale)


def test_loop_over_user_modules_compiles_each_forward():
    # a user module's forward is compiled as its own frame by the router (the first block's
    # entry, then one for any block): the loop runs in Python
    blocks = torch.nn.ModuleList([_Block() for _ in range(5)])

    def fn(x):
        for b in blocks:
            x = b(x)
            kiln.graph_break()
        return x

    kiln.reset()
    backend = CountingBackend()
    x = torch.randn(2, 4)
    assert_same(fn(x), kiln.compile(fn, backend=backend)(x))
    assert backend.calls == 2
    assert any("runs in Python" in reason for reason in kiln.counters["graph_break"])


def test_loop_over_torch_modules_keeps_the_resume_functions():
    # torch.nn's own forwards are not routed: running the frame in Python would run them eagerly
    layers = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4))

    def fn(x):
        for m in layers:
            x = m(x)
            kiln.graph_break()
        return x

    kiln.reset()
    backend = CountingBackend()
    x = torch.randn(2, 4)
    assert_same(fn(x), kiln.compile(fn, backend=backend)(x))
    targets = [str(n.target) for gm in backend.graphs for n in gm.graph.nodes]
    assert any("linear" in t for t in targets)
