"""Errors a user can act on: fullgraph errors, the graph-break warning, recompile lines, disable."""

import traceback

import numpy as np
import pytest
import torch

import kiln
from kiln import config, logs
from kiln.exc import Unsupported
from kiln.frontend.user_errors import HINTS, hint_for


def _inner(x):
    return round(x.sum().item())


def _outer(x):
    y = x * 2
    return _inner(y) + 1


def _internal_frames(e):
    return [f for f in traceback.extract_tb(e.__traceback__) if "/kiln/" in f.filename]


def test_fullgraph_error_shows_reason_user_frames_outermost_first_and_hint():
    f = kiln.compile(_outer, backend="eager", fullgraph=True)
    with pytest.raises(Unsupported) as info:
        f(torch.randn(3))
    text = str(info.value)
    assert "data-dependent" in text
    outer_at = text.index("return _inner(y) + 1")
    inner_at = text.index("return round(x.sum().item())", text.index("User code"))
    assert outer_at < inner_at  # the compiled function first, the breaking line last
    assert "in _outer" in text and "in _inner" in text
    assert "Hint: the value is read out of a tensor" in text
    # kiln's interpreter frames are gone: only the entry wrapper re-raising remains
    assert [f.name for f in _internal_frames(info.value)] == ["kiln_wrapper"]


def test_verbose_keeps_kiln_frames(monkeypatch):
    monkeypatch.setattr(config, "verbose", True)
    f = kiln.compile(_outer, backend="eager", fullgraph=True)
    with pytest.raises(Unsupported) as info:
        f(torch.randn(3))
    names = {f.name for f in _internal_frames(info.value)}
    assert "run_loop" in names and "miss" in names
    assert "KILN_VERBOSE" not in str(info.value)


@pytest.mark.parametrize(
    "fn,reason,hint",
    [
        (lambda x: x + 1 if x.sum() > 0 else x - 1, "data-dependent branch", "torch.where"),
        (lambda x: (print("x"), x + 1)[1], "builtin print", "logger.warning"),
        (lambda x: x.unique(), "data-dependent shape", "fixed-size"),
        (lambda x: np.fft.fft(x.numpy()), "numpy function np.fft is not traced", "torch ops"),
    ],
)
def test_each_common_reason_has_a_hint(fn, reason, hint):
    with pytest.raises(Unsupported) as info:
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.randn(3))
    assert reason in str(info.value) and hint in str(info.value)


def test_hint_table_matches_the_first_pattern():
    assert hint_for("kiln.graph_break() called") is not None
    assert hint_for("something new") is None
    assert all(isinstance(p, str) and h.endswith(".") for p, h in HINTS)


def _two_breaks(x):
    x = x + 1
    kiln.graph_break()
    x = x * 2
    kiln.graph_break()
    return x - 1


def test_first_graph_break_warns_once_with_the_count(capsys):
    kiln.reset()
    f = kiln.compile(_two_breaks, backend="eager")
    x = torch.randn(3)
    torch.testing.assert_close(f(x), _two_breaks(x))
    f(x)
    f(torch.randn(3, dtype=torch.float64))  # a recompile: no second warning
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "graph break" in line]
    assert len(lines) == 1, err
    assert "2 graph breaks in _two_breaks" in lines[0]
    assert "test_errors.py:" in lines[0]
    assert "KILN_LOGS=graph_breaks" in lines[0] and "kiln.explain(_two_breaks)" in lines[0]


def test_graph_break_warning_can_be_turned_off(capsys, monkeypatch):
    monkeypatch.setattr(config, "warn_graph_breaks", False)
    kiln.reset()
    kiln.compile(_two_breaks, backend="eager")(torch.randn(3))
    assert "graph break" not in capsys.readouterr().err


def _plain(x):
    return x * 3


def test_recompile_lines_carry_the_users_file_and_line(capsys):
    kiln.reset()
    logs.set_logs("recompiles")
    try:
        f = kiln.compile(_plain, backend="eager", dynamic=False)
        f(torch.randn(3))
        f(torch.randn(4))
    finally:
        logs.set_logs("")
    err = capsys.readouterr().err
    line = _plain.__code__.co_firstlineno
    assert f"recompiling _plain ({__file__}:{line})" in err, err


@torch.compiler.disable
def _disabled_compiler(x):
    return x + 1


@torch._dynamo.disable
def _disabled_dynamo(x):
    return x + 2


@pytest.mark.parametrize(
    "fn,decorator",
    [
        (_disabled_compiler, "@torch.compiler.disable"),
        (_disabled_dynamo, "@torch._dynamo.disable"),
    ],
)
def test_torch_disabled_functions(fn, decorator):
    assert kiln.compile(fn) is fn  # passed directly: stays uncompiled
    x = torch.randn(3)
    torch.testing.assert_close(kiln.compile(fn, backend="eager")(x), fn(x))

    def caller(x):
        return fn(x) * 2

    out = kiln.explain(caller)(x)
    assert out.graph_break_count == 1
    assert decorator in out.break_reasons[0][0], out.break_reasons
    assert "hint:" in str(out)


def _two_args(x, y):
    return x + y


def test_wrong_argument_count_names_the_function():
    f = kiln.compile(_two_args, backend="eager")
    with pytest.raises(TypeError) as compiled:
        f(torch.randn(2))
    with pytest.raises(TypeError) as eager:
        _two_args(torch.randn(2))
    assert str(compiled.value) == str(eager.value)
    assert "_two_args()" in str(compiled.value)
    with pytest.raises(TypeError, match=r"_two_args\(\) got an unexpected keyword argument 'z'"):
        f(torch.randn(2), torch.randn(2), z=1)


def test_an_endless_generator_under_fullgraph_names_the_likely_cause():
    def fn(x):
        def gen():
            while True:
                yield x

        return list(gen())

    with pytest.raises(Unsupported, match="infinite generator"):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.randn(2))


def test_a_tensor_in_an_if_under_fullgraph_says_data_dependent_branching():
    def fn(x):
        return x + 1 if x.sum() > 0 else x - 1

    with pytest.raises(Unsupported, match="Data-dependent branching"):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.randn(2))
