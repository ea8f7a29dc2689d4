"""Generators kiln cannot hand back at a return, and the ones it can: counters["unimplemented"]
counts the frames left to Python; a generator not started is made again, whatever its body
writes; close() returns what eager's close() returns on this Python."""

import sys

import torch
from frontend_helpers import CountingBackend, run_and_compare

import kiln


class Box:
    def __init__(self):
        self.n = 0


def _bumps_late(t, box):
    yield t.sin()
    yield t.cos()
    box.n += 1  # written by the rest: the generator cannot be drained at the return
    yield t.tan()


def return_started_generator_with_a_late_write(t, box):
    gen = _bumps_late(t, box)
    first = next(gen)
    return first, gen


def test_a_frame_left_to_python_counts_as_unimplemented():
    kiln.reset()
    compiled = kiln.compile(return_started_generator_with_a_late_write, backend="eager")
    t = torch.randn(3)
    box_eager, box_comp = Box(), Box()
    first_e, gen_e = return_started_generator_with_a_late_write(t, box_eager)
    first_c, gen_c = compiled(t, box_comp)
    assert torch.equal(first_e, first_c)
    assert box_comp.n == box_eager.n == 0  # nothing of the rest ran
    rest_e, rest_c = list(gen_e), list(gen_c)
    assert all(torch.equal(a, b) for a, b in zip(rest_e, rest_c, strict=True))
    assert box_comp.n == box_eager.n == 1
    reasons = list(kiln.counters["unimplemented"])
    assert len(reasons) == 1, reasons
    assert "rebuilding a suspended generator whose rest writes state outside it" in reasons[0]


def _counts_each_step(t, seen):
    for j in range(4):
        seen.append(j)  # a write the rest would make: the generator cannot be drained
        yield t + j


def return_started_generator(t, seen):
    gen = _counts_each_step(t, seen)
    first = next(gen)
    return gen, first + 1


def test_the_reason_names_the_mutation_as_torch_does():
    kiln.reset()
    compiled = kiln.compile(return_started_generator, backend="eager")
    t = torch.randn(3)
    seen_e, seen_c = [], []
    gen_e, y_e = return_started_generator(t, seen_e)
    gen_c, y_c = compiled(t, seen_c)
    assert torch.equal(y_e, y_c) and seen_c == seen_e == [0]
    rest_e, rest_c = list(gen_e), list(gen_c)
    assert all(torch.equal(a, b) for a, b in zip(rest_e, rest_c, strict=True))
    assert seen_c == seen_e == [0, 1, 2, 3]
    [reason] = kiln.counters["unimplemented"]
    assert "Cannot reconstruct a generator with variable mutations" in reason, reason
    assert "whose rest writes state outside it" in reason, reason


def test_the_break_at_the_return_names_the_return_line():
    out = kiln.explain(return_started_generator_with_a_late_write)(torch.randn(3), Box())
    [(reason, where)] = out.break_reasons
    assert "writes state outside it" in reason
    assert where is not None and where.endswith("return first, gen"), where


def break_and_resume(t):
    a = t + 1
    kiln.graph_break()
    return a * 2


def test_a_resumed_break_is_not_unimplemented():
    run_and_compare(break_and_resume, torch.randn(3))
    assert kiln.counters["graph_break"], dict(kiln.counters)
    assert not kiln.counters["unimplemented"], dict(kiln.counters["unimplemented"])


STEPS = []


def _counts(t):
    for j in range(3):
        STEPS.append(j)  # a write, but only once the consumer steps it
        yield t + j


def return_new_generator(t):
    return _counts(t), t.sin()


def test_a_new_generator_whose_body_writes_is_made_again():
    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(return_new_generator, backend=backend, fullgraph=True)
    t = torch.randn(3)
    STEPS.clear()
    gen_e, y_e = return_new_generator(t)
    assert STEPS == []
    want = list(gen_e)
    STEPS.clear()
    gen_c, y_c = compiled(t)
    assert STEPS == []  # not started, as in eager
    got = list(gen_c)
    assert STEPS == [0, 1, 2]
    assert torch.equal(y_e, y_c)
    assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))
    assert backend.calls == 1
    assert not kiln.counters["unimplemented"]


def _returns_on_exit(t):
    try:
        yield t.sin()
        yield t.cos()
    except GeneratorExit:
        return t.tan()  # noqa: B901 (close() returns it from 3.13 on, None before)


def close_returns(t):
    gen = _returns_on_exit(t)
    first = next(gen)
    return first, gen.close()


def test_close_returns_what_eager_returns():
    t = torch.randn(3)
    run_and_compare(close_returns, t, fullgraph=True)
    _, closed = kiln.compile(close_returns, backend="eager", fullgraph=True)(t)
    if sys.version_info >= (3, 13):
        assert torch.equal(closed, t.tan())
    else:
        assert closed is None
