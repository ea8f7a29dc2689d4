"""A generator run ahead of time and rebuilt at a break is in eager's state: not started,
suspended at a yield, or finished, with eager's return value (Note [Generators: rebuilt part
way]); a value sent into a yield whose code uses it is a break."""

import torch
from frontend_helpers import run_and_compare

import kiln


def send_after_a_break(x):
    def g():
        yield 1
        yield 2
        return 7

    gen = g()
    a = next(gen)
    kiln.graph_break()
    b = gen.send("dropped")  # suspended at `yield 1`: send resumes it
    try:
        gen.send(5)
    except StopIteration as e:
        v = e.value
    return x + 1, a, b, v, gen.__name__


def test_send_into_a_started_generator_rebuilt_at_a_break():
    run_and_compare(send_after_a_break, torch.ones(2))


def send_into_a_new_generator(x):
    def g():
        yield 1

    gen = g()
    kiln.graph_break()
    try:
        gen.send(3)
    except TypeError as e:
        return x + 1, str(e)


def test_send_into_a_generator_not_started_raises_as_eager():
    run_and_compare(send_into_a_new_generator, torch.ones(2))


def return_value_after_the_last_item(x):
    def g():
        yield 1
        return 4

    gen = g()
    a = next(gen)
    kiln.graph_break()
    try:
        next(gen)
    except StopIteration as e:
        return x + 1, a, e.value


def test_a_rebuilt_generator_returns_what_the_traced_one_returned():
    run_and_compare(return_value_after_the_last_item, torch.ones(2))


def send_into_a_finished_generator(x):
    def g():
        yield 1

    gen = g()
    out = list(gen)
    kiln.graph_break()
    try:
        gen.send(3)
    except StopIteration as e:
        return x + 1, out, e.value


def test_send_into_a_finished_generator_rebuilt_at_a_break():
    run_and_compare(send_into_a_finished_generator, torch.ones(2))


def send_reaches_the_generator_code(x):
    def g():
        return (yield 1)

    gen = g()
    a = next(gen)
    try:
        gen.send((2,))
    except StopIteration as e:
        return x + 1, a, e.value


def test_a_sent_value_the_generator_code_uses_reaches_it():
    run_and_compare(send_reaches_the_generator_code, torch.ones(2))


def throw_after_a_break(x):
    seen = []

    def g():
        try:
            yield 1
        except ValueError as e:
            seen.append(type(e).__name__)
            yield 2

    gen = g()
    next(gen)
    kiln.graph_break()
    got = gen.throw(ValueError)  # caught by g's handler: eager yields 2
    return x + got, seen


def test_throw_into_a_generator_suspended_inside_try_after_a_break():
    # not rebuilt (the rebuilt generator has no handler: throw() would raise ValueError)
    run_and_compare(throw_after_a_break, torch.ones(2))


def close_after_a_break(x):
    log = []

    def g():
        try:
            yield 1
            yield 2
        finally:
            log.append("closed")

    gen = g()
    next(gen)
    kiln.graph_break()
    gen.close()  # eager runs g's finally here
    return x + 1, log


def test_close_of_a_generator_suspended_inside_try_after_a_break():
    run_and_compare(close_after_a_break, torch.ones(2))
