"""kiln.error_on_graph_break: graph breaks are errors in a region, allowed again inside it
(Note [Break policy: error_on_graph_break]); results equal eager's where the code compiles."""

import pytest
import torch

import kiln
from tests.frontend.frontend_helpers import CountingBackend

X = torch.ones(3)


def _breaks_in_block(x):
    x = x + 1
    with kiln.error_on_graph_break(True):
        kiln.graph_break()
    return x + 2


def test_a_break_in_an_erroring_block_raises_before_any_graph():
    kiln.reset()
    backend = CountingBackend()
    with pytest.raises(kiln.exc.Unsupported, match="error_on_graph_break"):
        kiln.compile(_breaks_in_block, backend=backend)(X)
    assert backend.calls == 0
    assert torch.equal(_breaks_in_block(X), X + 3)  # (eager: the marks do nothing)


def _allows_twice(x):
    x = x + 1
    with kiln.error_on_graph_break(False):
        kiln.graph_break()
        x = x * 2
        kiln.graph_break()
    return x + 4


def test_an_allowing_block_inside_an_erroring_call_breaks_and_resumes():
    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.error_on_graph_break(True)(kiln.compile(_allows_twice, backend=backend))
    torch.testing.assert_close(compiled(X), _allows_twice(X))
    assert backend.calls == 3  # x + 1 | x * 2 | x + 4: each part compiled
    # the setting is the process's only during the call
    torch.testing.assert_close(kiln.compile(_breaks_after, backend=backend)(X), _breaks_after(X))


def _breaks_after(x):
    x = x.sin()
    kiln.graph_break()
    return x.cos()


def test_an_erroring_block_in_python_applies_to_frames_compiled_in_it():
    kiln.reset()
    compiled = kiln.compile(_breaks_after, backend="eager")
    with kiln.error_on_graph_break(True), pytest.raises(kiln.exc.Unsupported):
        compiled(X)
    kiln.reset()
    with kiln.error_on_graph_break(True), kiln.error_on_graph_break(False):
        torch.testing.assert_close(compiled(X), _breaks_after(X))


@kiln.error_on_graph_break(False)
def _allowed_inner(x):
    return _breaks_after(x) + 1


def _calls_allowed_inner(x):
    return _allowed_inner(x * 2) - 1


def test_a_decorated_function_traced_under_its_setting():
    kiln.reset()
    compiled = kiln.error_on_graph_break(True)(kiln.compile(_calls_allowed_inner, backend="eager"))
    torch.testing.assert_close(compiled(X), _calls_allowed_inner(X))


def test_a_fullgraph_function_called_from_compiled_code_raises_at_its_break():
    kiln.reset()
    inner = kiln.compile(_breaks_after, backend="eager", fullgraph=True)

    def outer(x):
        return inner(x) + 1

    with pytest.raises(kiln.exc.Unsupported):
        kiln.compile(outer, backend="eager")(X)

    # fullgraph=True is not undone by error_on_graph_break(False)
    def outer_allowing(x):
        with kiln.error_on_graph_break(False):
            return _breaks_after(x)

    with pytest.raises(kiln.exc.Unsupported):
        kiln.compile(outer_allowing, backend="eager", fullgraph=True)(X)


@pytest.mark.parametrize("args, kwargs", [((), {}), (("yes",), {}), ((), {"foo": True})])
def test_bad_arguments_raise_as_in_eager(args, kwargs):
    def fn(x):
        with kiln.error_on_graph_break(*args, **kwargs):
            return x + 1

    with pytest.raises(TypeError):
        fn(X)
    kiln.reset()
    with pytest.raises(TypeError):
        kiln.compile(fn, backend="eager")(X)


def test_compiling_a_decorated_function_keeps_its_setting():
    kiln.reset()
    allowing = kiln.compile(kiln.error_on_graph_break(False)(_breaks_after), backend="eager")
    with kiln.error_on_graph_break(True):
        torch.testing.assert_close(allowing(X), _breaks_after(X))
    kiln.reset()
    erroring = kiln.compile(kiln.error_on_graph_break(True)(_breaks_after), backend="eager")
    with pytest.raises(kiln.exc.Unsupported):
        erroring(X)
