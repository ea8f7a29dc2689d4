"""kiln.skip_frame() and kiln.step_unsupported() (Note [Markers: skip_frame and
step_unsupported]): results equal eager's, and the backend sees only the graphs they leave."""

import pytest
import torch
from frontend_helpers import CountingBackend

import kiln


def skipped(x):
    x = x + 1
    kiln.skip_frame()
    return x + 1


def skipped_after_a_break(x):
    x = x + 1
    kiln.graph_break()
    x = x * 2
    kiln.skip_frame()
    return x + 1


def stepped(x):
    x = x + 1 + 2
    kiln.step_unsupported()
    return x * 4


def _plus_one(x):
    return x + 1


def _steps_inside(x):
    x = x + 2
    kiln.step_unsupported()
    return _plus_one(x) + 4


def steps_in_a_callee(x):
    x = x + 8
    return _steps_inside(x) + 16


def _ops(graph):
    return sum(n.op == "call_function" for n in graph.graph.nodes)


@pytest.mark.parametrize(
    "fn, graphs, ops",
    [
        (skipped, 0, []),
        (skipped_after_a_break, 1, [1]),
        (stepped, 1, [2]),
        # (the callee's rest runs in Python, its own callee compiled; the caller's rest compiles)
        (steps_in_a_callee, 4, [1, 1, 1, 1]),
    ],
)
def test_the_backend_sees_only_what_the_markers_leave(fn, graphs, ops):
    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(fn, backend=backend)
    x = torch.randn(3)
    for _ in range(2):  # (the second call runs what the first made)
        torch.testing.assert_close(compiled(x), fn(x))
    assert backend.calls == graphs
    assert [_ops(g) for g in backend.graphs] == ops


def test_outside_compiled_code_the_markers_do_nothing():
    x = torch.randn(3)
    torch.testing.assert_close(skipped(x), x + 2)
    torch.testing.assert_close(stepped(x), (x + 3) * 4)


@pytest.mark.parametrize("fn", [skipped, stepped])
def test_under_fullgraph_a_marker_is_an_error_naming_it(fn):
    kiln.reset()
    with pytest.raises(kiln.exc.Unsupported, match="runs in Python"):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.randn(3))
