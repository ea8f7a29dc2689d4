"""A failure inside kiln in a compiled frame's first run: the frame runs eagerly only if nothing
of the compiled code ran (Note [Faults: no eager rerun after the compiled code ran])."""

import pytest
import torch

import kiln
from kiln import config, faults


def _fails_after_running(gm, example_inputs):
    """A backend whose compiled graph runs, then fails inside kiln's code."""

    def run(*args):
        out = gm(*args)
        with faults.inject("lowering"):
            faults.hit("lowering")  # (raised from kiln's own module: an internal error)
        return out

    return run


def test_graph_that_ran_is_not_run_again(monkeypatch):
    monkeypatch.setattr(config, "strict", False)
    kiln.reset()

    def f(x):
        x.add_(1)
        return x * 2

    x = torch.zeros(3)
    with pytest.raises(faults.InjectedFault) as info:
        kiln.compile(f, backend=_fails_after_running)(x)
    assert torch.equal(x, torch.ones(3))  # eager's one write, not two
    assert any("not run again eagerly" in n for n in info.value.__notes__)


def test_side_effect_after_a_failed_graph_is_not_doubled(monkeypatch):
    monkeypatch.setattr(config, "strict", False)
    kiln.reset()
    log = []

    def f(x):
        y = x.sin()
        log.append(1)
        return y + 1

    out = kiln.compile(f, backend=_fails_after_running)(torch.ones(2))
    # the graph writes nothing: it failed before the replayed append, so the frame ran eagerly
    # from the start, with its one append
    assert log == [1]
    torch.testing.assert_close(out, torch.ones(2).sin() + 1)


def test_graph_with_random_numbers_is_not_run_again(monkeypatch):
    monkeypatch.setattr(config, "strict", False)
    kiln.reset()

    def f(x):
        return x + torch.rand(3)

    torch.manual_seed(0)
    with pytest.raises(faults.InjectedFault):
        kiln.compile(f, backend=_fails_after_running)(torch.zeros(3))


def test_failure_before_the_graph_runs_eagerly(monkeypatch):
    monkeypatch.setattr(config, "strict", False)
    kiln.reset()
    log = []

    def f(x):
        x.add_(1)
        log.append(1)
        return x * 2

    x = torch.zeros(3)
    with faults.inject("first_run"):
        out = kiln.compile(f, backend="eager")(x)
    assert torch.equal(x, torch.ones(3)) and log == [1]
    assert torch.equal(out, torch.full((3,), 2.0))


def test_resume_function_that_ran_is_not_run_again(monkeypatch):
    monkeypatch.setattr(config, "strict", False)
    kiln.reset()
    log = []
    graphs = []

    def second_fails(gm, example_inputs):
        graphs.append(gm)
        return gm.forward if len(graphs) == 1 else _fails_after_running(gm, example_inputs)

    def f(x):
        x.add_(1)
        log.append(1)
        print("", end="")  # a break: the rest is a resume function with its own graph
        x.mul_(3)
        return x + 1

    x = torch.zeros(3)
    with pytest.raises(faults.InjectedFault) as info:
        kiln.compile(f, backend=second_fails)(x)
    assert torch.equal(x, torch.full((3,), 3.0)) and log == [1]  # each write once
    assert sum("not run again eagerly" in n for n in info.value.__notes__) == 1
