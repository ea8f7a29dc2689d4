"""kiln.set_stance("eager_then_compile") and ("aot_eager_then_compile"): a frame's first call runs
on a stand-in backend, the next compiles once with the frame's own backend, dynamic where the two
calls differed (Note [Stance: eager_then_compile]); every result equals eager's."""

import pytest
import torch
from frontend_helpers import CountingBackend

import kiln

WARM_UP = ["eager_then_compile", "aot_eager_then_compile"]


@pytest.fixture(autouse=True)
def _default_stance():
    yield
    kiln.set_stance("default")


def scale_by_first(x, y, z):
    return x * y * z[0]


def break_between(x, y, z):
    y = torch.sin(y)
    kiln.graph_break()
    y = torch.cos(y)
    return x * y * z[0]


def _calls():
    return [(n, torch.randn(n), {0: torch.randn(n)}) for n in (1, 2, 3)]


@pytest.mark.parametrize("name", WARM_UP)
def test_the_backend_compiles_once_for_three_sizes(name):
    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(scale_by_first, backend=backend)
    with kiln.set_stance(name):
        for args in _calls():
            torch.testing.assert_close(compiled(*args), scale_by_first(*args))
    assert backend.calls == 1  # the second call's entry (dynamic) serves the third
    graph = backend.graphs[0]
    assert sum(n.op == "call_function" for n in graph.graph.nodes) == 2


@pytest.mark.parametrize("name", WARM_UP)
def test_each_frame_of_a_graph_break_warms_up(name):
    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(break_between, backend=backend)
    with kiln.set_stance(name):
        for args in _calls():
            torch.testing.assert_close(compiled(*args), break_between(*args))
    assert backend.calls == 2  # one graph on each side of the break


def test_the_warm_up_entry_is_dropped_once_the_frame_compiles():
    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(scale_by_first, backend=backend)
    with kiln.set_stance("eager_then_compile"):
        compiled(*_calls()[0])
        assert backend.calls == 0
        compiled(*_calls()[1])
    assert backend.calls == 1
    args = (4, torch.randn(4), {0: torch.randn(4)})
    torch.testing.assert_close(compiled(*args), scale_by_first(*args))
    assert backend.calls == 1
    args = _calls()[0]  # the warm-up call's sizes: compiled by the backend now
    torch.testing.assert_close(compiled(*args), scale_by_first(*args))
    assert backend.calls == 2
