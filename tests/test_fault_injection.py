"""The crash contract (Note [Faults: the crash contract]): a failure inside kiln at any stage
warns once, runs the function eagerly and leaves every global state as it was."""

import logging
import sys

import pytest
import torch

import kiln
from kiln import config, faults
from kiln.frontend import fallback

# the stages each backend reaches (a backend without code generation never lowers)
_BACKEND_STAGES = {
    "eager": ("translator", "guards", "bytecode", "first_run"),
    "aot_eager": ("translator", "guards", "bytecode", "aot", "first_run"),
    "kiln": faults.STAGES,
}
_CASES = [(b, s) for b, stages in _BACKEND_STAGES.items() for s in stages]


def user_function(x, w):
    y = torch.sin(x) @ w
    return torch.relu(y).sum(0) + torch.rand(3) * 0


class _Warnings(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


class _Mode(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class _DispatchMode(torch.utils._python_dispatch.TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _global_state():
    return (
        torch.is_grad_enabled(),
        torch.is_autocast_enabled("cpu"),
        torch.get_autocast_dtype("cpu"),
        torch._C._len_torch_function_stack(),
        torch._C._len_torch_dispatch_stack(),
        sys.gettrace(),
        torch.get_rng_state(),
    )


def _messy_hit(stage):
    """The armed point changes every global state it can before it fails (a half-done trace)."""
    real = faults.hit

    def hit(name):
        if faults._armed == name:
            torch._C._set_grad_enabled(not torch.is_grad_enabled())
            torch.set_autocast_enabled("cpu", True)
            torch.set_autocast_dtype("cpu", torch.float16)
            torch._C._push_on_torch_function_stack(_Mode())
            torch._C._push_on_torch_dispatch_stack(_DispatchMode())
            torch.rand(100)
            sys.settrace(lambda *a: None)
        real(name)

    return hit


@pytest.fixture(autouse=True)
def _clean_global_state():
    """(A failing case must not leave autocast or a mode on for the next one.)"""
    saved = faults.GlobalState()
    yield
    sys.settrace(None)
    saved.restore()


@pytest.mark.parametrize("backend,stage", _CASES)
def test_internal_failure_warns_once_runs_eagerly_and_restores_state(
    backend, stage, monkeypatch, tmp_path
):
    monkeypatch.setattr(config, "strict", False)  # this test is about the fallback
    monkeypatch.setattr(config, "cache_dir", str(tmp_path))  # nothing compiled comes from disk
    monkeypatch.setattr(faults, "hit", _messy_hit(stage))
    from kiln.backend import codecache

    codecache.clear_memory_cache()
    kiln.reset()
    x, w = torch.randn(4, 3, requires_grad=True), torch.randn(3, 3)
    torch.manual_seed(0)
    expected = user_function(x, w)
    rng_after_eager = torch.get_rng_state()
    torch.manual_seed(0)
    before = _global_state()
    handler = _Warnings()
    logging.getLogger("kiln.warnings").addHandler(handler)
    try:
        with faults.inject(stage):
            got = kiln.compile(user_function, backend=backend)(x, w)
        after = _global_state()
    finally:
        sys.settrace(None)
        logging.getLogger("kiln.warnings").removeHandler(handler)
    torch.testing.assert_close(got, expected)
    assert before[:-1] == after[:-1]
    assert torch.equal(after[-1], rng_after_eager)  # the draws of one eager run, no more
    relevant = [m for m in handler.messages if "fault injected" in m]
    assert len(relevant) == 1, handler.messages
    line = user_function.__code__.co_firstlineno
    assert f"user_function ({__file__}:{line})" in relevant[0]
    assert f"fault injected into kiln's {stage} stage" in relevant[0]


@pytest.mark.parametrize("stage", ["translator", "guards", "bytecode", "first_run"])
def test_strict_and_fullgraph_reraise(stage, monkeypatch):
    x, w = torch.randn(4, 3), torch.randn(3, 3)
    for strict, fullgraph in ((True, False), (False, True)):
        monkeypatch.setattr(config, "strict", strict)
        kiln.reset()
        grad = torch.is_grad_enabled()
        with faults.inject(stage), pytest.raises(faults.InjectedFault):
            kiln.compile(user_function, backend="eager", fullgraph=fullgraph)(x, w)
        assert torch.is_grad_enabled() == grad


def test_user_exceptions_are_not_internal_errors(monkeypatch):
    monkeypatch.setattr(config, "strict", False)

    def raises(x):
        y = x + 1
        print("", end="")  # a graph break: the raise below runs in a resume function
        raise ValueError(f"user error {y.shape}")

    kiln.reset()
    with pytest.raises(ValueError, match="user error"):
        kiln.compile(raises, backend="eager")(torch.ones(2))
    assert kiln.counters["frames"]["internal_errors"] == 0
    try:
        raise ValueError("x")
    except ValueError as e:
        assert not fallback.raised_by_kiln(e)
