"""A branch on tensor data whose one side only raises: the check in the graph, the frame run
again in Python when it fails (Note [Asserts: a branch that only raises]).

PYTEST_DONT_REWRITE: the traced functions' `assert` statements stay Python's own."""

import pytest
import torch
from torch.distributions import (
    AffineTransform,
    ComposeTransform,
    Normal,
    TanhTransform,
    TransformedDistribution,
)

import kiln
from tests.frontend.frontend_helpers import run_and_compare


def checked(x):
    y = x * 2
    if (y < 0).any():
        raise ValueError(f"negative values: {y}")
    return y + 1


def checked_not(x):
    if not torch.isfinite(x).all():
        raise ValueError("not finite")
    return x.exp()


def assert_with_computed_message(x):
    assert (x > 0).all(), f"bad sum {x.sum()}"
    return x.sqrt()


@pytest.mark.parametrize("fn", [checked, checked_not, assert_with_computed_message])
@pytest.mark.parametrize("backend", ["eager", "kiln"])
def test_check_is_one_graph_and_raises_eagers_error(fn, backend):
    good, bad = torch.ones(3), torch.tensor([1.0, -1.0, float("inf")])
    run_and_compare(fn, good, backend=backend, expected_breaks=0, expected_frames=1)
    assert "eager_reruns" not in kiln.counters["frames"]
    run_and_compare(fn, bad, backend=backend, expected_breaks=0, expected_frames=1)
    assert kiln.counters["frames"]["eager_reruns"] == 2  # (eager's message: run_and_compare)


def side_effect_then_check(x, log):
    log.append("called")
    if x.sum() > 10:
        raise RuntimeError("too big")
    return x * 3


def test_rerun_makes_side_effects_once():
    run_and_compare(side_effect_then_check, torch.ones(2), [], expected_breaks=0)
    run_and_compare(side_effect_then_check, torch.full((2,), 9.0), [], expected_breaks=0)


def writes_then_checks(x):
    x.mul_(2)
    if (x > 100).any():
        raise ValueError("too big")
    return x


def test_graph_that_writes_keeps_the_break():
    for x in (torch.ones(2), torch.full((2,), 60.0)):
        run_and_compare(writes_then_checks, x)
        assert kiln.counters["stats"]["graph_breaks"] >= 1
    assert "eager_reruns" not in kiln.counters["frames"]


def caught_check(x):
    try:
        if x.max() > 1:
            raise ValueError("big")
        y = x + 1
    except ValueError:
        y = x * 0
    return y


def test_raising_side_caught_in_the_frame():
    for x in (torch.zeros(2), torch.full((2,), 5.0)):
        run_and_compare(caught_check, x, expected_breaks=0, expected_graphs=1)


def generator_check(x):
    if (x < 0).any():
        raise ValueError("negative")
    yield x + 1


def test_generator_frame_keeps_the_break():
    def consume(x):
        return list(generator_check(x))

    for x in (torch.ones(2), -torch.ones(2)):
        run_and_compare(consume, x)


def both_sides_continue(x):
    if x.sum() > 0:
        x = x + 1
    return x


def test_branch_without_a_raise_stays_a_break():
    run_and_compare(both_sides_continue, torch.ones(2), expected_breaks=1)


@pytest.fixture
def validating():
    """Distribution argument checks on (torch._dynamo, once imported, turns them off globally)."""
    before = torch.distributions.Distribution._validate_args
    torch.distributions.Distribution.set_default_validate_args(True)
    yield
    torch.distributions.Distribution.set_default_validate_args(before)


def sample_log_prob(mu, sd):
    d = Normal(mu, sd)
    return d.log_prob(d.rsample((4,)))


def test_distribution_checks_compile_with_sampling(validating):
    kiln.reset()
    compiled = kiln.compile(sample_log_prob, backend="eager", fullgraph=True)
    mu = torch.zeros(3)
    for sd in (torch.ones(3), -torch.ones(3)):
        torch.manual_seed(0)
        try:
            expected, expected_error = sample_log_prob(mu, sd), None
        except ValueError as e:
            expected, expected_error = None, str(e)
        after = torch.rand(2)
        torch.manual_seed(0)
        if expected_error is None:
            torch.testing.assert_close(compiled(mu, sd), expected)
        else:
            with pytest.raises(ValueError) as info:
                compiled(mu, sd)
            assert str(info.value) == expected_error
        torch.testing.assert_close(torch.rand(2), after)  # (the same draws as eager)
    assert kiln.counters["stats"]["unique_graphs"] == 1


def transformed(a):
    d = TransformedDistribution(
        Normal(a, 1), ComposeTransform([TanhTransform(), AffineTransform(2, 2)])
    )
    return d.log_prob(d.rsample((10,)))


def test_transformed_distribution_fullgraph(validating):
    # PyTorch's test_modes.py test_expand
    kiln.reset()
    compiled = kiln.compile(transformed, backend="eager", fullgraph=True)
    torch.manual_seed(0)
    expected = transformed(torch.randn(3))
    torch.manual_seed(0)
    torch.testing.assert_close(compiled(torch.randn(3)), expected)
