"""Lazy generators at a graph break or a return (Notes [Generators: drained at a break],
[Generators: closed when freed]): a suspended generator whose rest is pure is drained and
rebuilt; one whose rest writes outside state, or that eager would close at a point kiln does not
know, runs the frame in Python. Results always equal eager's."""

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln

LOG = []


def _pure(t):
    x = 0
    yield t.sin() + x
    x += 1
    yield t.cos() + x
    x += 1
    yield t.tan() + x


def break_with_a_pure_generator_suspended(t):
    gen = _pure(t)
    a = next(gen)
    kiln.graph_break()
    return a, list(gen)


def test_a_pure_suspended_generator_is_drained_at_the_break():
    run_and_compare(break_with_a_pure_generator_suspended, torch.randn(3))
    reasons = list(kiln.counters["graph_break"])
    assert not any("rebuilding" in r for r in reasons), reasons  # rebuilt at the break


def return_a_suspended_generator(t):
    gen = _pure(t)
    next(gen)
    return t.sin(), gen


def test_a_returned_suspended_generator_is_rebuilt():
    compiled = kiln.compile(return_a_suspended_generator, backend="eager", fullgraph=True)
    t = torch.randn(3)
    y, gen = compiled(t)
    _, want = return_a_suspended_generator(t)
    assert torch.equal(y, t.sin())
    got = list(gen)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


def _logs(t):
    LOG.append("first")
    yield t + 1
    LOG.append("second")  # an outside write in the rest: not drained
    yield t + 2


def break_with_an_impure_generator_suspended(t):
    LOG.clear()
    gen = _logs(t)
    a = next(gen)
    kiln.graph_break()
    LOG.append("after the break")
    return a, next(gen), list(LOG)


def test_an_impure_suspended_generator_runs_the_frame_in_python():
    run_and_compare(break_with_an_impure_generator_suspended, torch.randn(3))
    reasons = list(kiln.counters["graph_break"])
    assert any("whose rest writes state outside it" in r for r in reasons), reasons


def _breaks_inside(t):
    yield t + 1
    kiln.graph_break()
    yield t + 2


def break_inside_the_body(t):
    gen = _breaks_inside(t)
    s = next(gen)
    return s + next(gen)


def test_a_break_inside_the_body_matches_eager():
    run_and_compare(break_inside_the_body, torch.randn(3))


def _cleans_up(t):
    try:
        yield t + 1
        yield t + 2
    finally:
        LOG.append("closed")


def local_closed_at_return(t):
    LOG.clear()
    gen = _cleans_up(t)
    a = next(gen)
    LOG.append("returning")
    return a, LOG


def test_a_suspended_local_generator_is_closed_as_the_frame_returns():
    # eager closes `gen` as the frame's locals go: its finally runs after "returning"
    run_and_compare(local_closed_at_return, torch.randn(3), fullgraph=True)


def _helper(t):
    gen = _cleans_up(t)
    return next(gen)  # `gen` is freed (closed) as _helper returns


def closed_when_a_callee_returns(t):
    LOG.clear()
    a = _helper(t)
    LOG.append("after the call")
    return a, list(LOG)


def test_a_generator_local_to_a_callee_is_closed_as_it_returns():
    run_and_compare(closed_when_a_callee_returns, torch.randn(3), fullgraph=True)


def temporary_freed_at_once(t):
    LOG.clear()
    a = next(_cleans_up(t))  # closed right after next() returns
    LOG.append("after")
    return a, list(LOG)


def test_a_temporary_generator_with_cleanup_runs_the_frame_in_python():
    run_and_compare(temporary_freed_at_once, torch.randn(3))
    with pytest.raises(kiln.exc.Unsupported, match="freed before the frame returns"):
        kiln.compile(temporary_freed_at_once, backend="eager", fullgraph=True)(torch.randn(3))


def _yields_in_finally(t):
    try:
        yield t
    finally:
        yield t + 1  # close(): RuntimeError, printed as ignored by eager


def close_at_return_raises(t):
    gen = _yields_in_finally(t)
    return next(gen)


def test_a_close_at_return_that_raises_runs_the_frame_in_python():
    with pytest.raises(kiln.exc.Unsupported, match="as its frame returns raised RuntimeError"):
        kiln.compile(close_at_return_raises, backend="eager", fullgraph=True)(torch.randn(3))


def _send_used(t):
    x = yield t
    yield t * x


def break_with_a_generator_that_uses_sent_values(t):
    gen = _send_used(t)
    next(gen)
    kiln.graph_break()
    return gen.send(3)


def test_a_generator_whose_yields_use_sent_values_is_not_rebuilt_part_way():
    run_and_compare(break_with_a_generator_that_uses_sent_values, torch.randn(3))
    reasons = list(kiln.counters["graph_break"])
    assert any("whose value its code uses" in r for r in reasons), reasons


def _sub(t):
    yield t + 1
    yield t + 2


def _delegating(t):
    yield from _sub(t)
    yield t + 3


def return_suspended_in_yield_from(t):
    gen = _delegating(t)
    next(gen)
    return gen


def test_a_generator_suspended_in_yield_from_is_rebuilt():
    t = torch.randn(3)
    gen = kiln.compile(return_suspended_in_yield_from, backend="eager", fullgraph=True)(t)
    got = list(gen)
    assert all(torch.equal(a, b) for a, b in zip(got, [t + 2, t + 3], strict=True))


SCALE = [1.0]


def _reads_and_writes_globals(t):
    LOG.append("started")  # an outside write: a drain would not do
    for k in range(2):
        yield t * SCALE[0] + k


def return_a_new_generator(t):
    return t.cos(), _reads_and_writes_globals(t)


def test_a_new_generator_is_rebuilt_by_calling_its_function_again():
    t = torch.randn(3)
    LOG.clear()
    y, gen = kiln.compile(return_a_new_generator, backend="eager", fullgraph=True)(t)
    assert LOG == [] and gen.__name__ == "_reads_and_writes_globals"
    SCALE[0] = 3.0  # read when the items are asked for, as in eager
    try:
        got = list(gen)
    finally:
        SCALE[0] = 1.0
    assert LOG == ["started"] and torch.equal(y, t.cos())
    assert all(torch.equal(a, b) for a, b in zip(got, [t * 3.0, t * 3.0 + 1], strict=True))


def _key_that_breaks(v):
    kiln.graph_break()
    return -v


def _counts(n):
    for i in range(n):
        yield i * 10


def instruction_that_steps_then_breaks(t):
    gen = _counts(4)
    first = next(gen)
    # sorted() steps the generator to its end, then its key breaks: the instruction runs again
    # in Python, on the generator as it was before it (its steps undone, then drained: pure)
    rest = sorted(gen, key=_key_that_breaks)
    return t + first, rest


def test_steps_of_an_instruction_that_breaks_are_undone():
    run_and_compare(instruction_that_steps_then_breaks, torch.randn(3))
    reasons = list(kiln.counters["graph_break"])
    assert reasons == ["kiln.graph_break() called"], reasons  # a break at the call, resumed


def _adds_in_place(t):
    yield t + 1
    yield t.add_(1)  # in place: at the consumer's step in eager


def break_before_an_in_place_item(t):
    gen = _adds_in_place(t)
    a = next(gen)
    kiln.graph_break()
    before = t.clone()  # eager: t not yet changed
    return a, before, next(gen)


def test_a_generator_whose_rest_changes_a_tensor_in_place_writes_it_at_its_step():
    # the in-place op is run again by the rebuilt generator's step, not at the break
    run_and_compare(break_before_an_in_place_item, torch.zeros(3))
    reasons = list(kiln.counters["graph_break"])
    assert not any("rebuilding" in r for r in reasons), reasons
