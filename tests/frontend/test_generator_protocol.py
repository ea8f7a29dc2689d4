"""Generators made while tracing run to each yield as they are stepped (Note [Generators: lazy]):
send/throw/close, endless generators, bodies that write state the consumer reads, exceptions out
of next(), PEP 479 — all captured under fullgraph=True, with eager's results and effects."""

import itertools
import sys

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln

LOG = []


def _fullgraph(fn, *args):
    """Eager vs compiled (fullgraph=True: no break)."""
    run_and_compare(fn, *args, fullgraph=True, expected_breaks=0)


def _echo(t):
    got = yield t + 1
    while True:
        got = yield t * got


def send_values(t):
    g = _echo(t)
    first = next(g)
    return first, g.send(2), g.send(3)


def _returns(t):
    x = yield t
    return x * 2


def send_to_the_end(t):
    g = _returns(t)
    next(g)
    try:
        g.send(5)
    except StopIteration as e:
        return t + e.value


def send_to_a_new_generator(t):
    g = _returns(t)
    try:
        g.send(1)
    except TypeError as e:
        return t, str(e)


def _catches(t):
    try:
        yield t
    except ValueError as e:
        LOG.append(str(e))
        yield t + 10
    finally:
        LOG.append("finally")


def throw_caught(t):
    LOG.clear()
    g = _catches(t)
    a = next(g)
    b = g.throw(ValueError("boom"))
    g.close()
    return a + b, list(LOG)


def throw_uncaught(t):
    LOG.clear()
    g = _catches(t)
    next(g)
    try:
        g.throw(KeyError)
    except KeyError:
        return t, list(LOG)


def throw_into_a_new_generator(t):
    LOG.clear()
    try:
        _catches(t).throw(ValueError("7"))
    except ValueError as e:
        return t, str(e), list(LOG)


def _ignores_exit(t):
    try:
        yield t
    except GeneratorExit:
        yield t + 1  # RuntimeError in close(); suspended here (no cleanup left)


def close_ignored(t):
    g = _ignores_exit(t)
    next(g)
    try:
        g.close()
    except RuntimeError as e:
        return t, str(e)


def close_runs_finally(t):
    LOG.clear()
    g = _catches(t)
    next(g)
    LOG.append("before close")
    g.close()
    g.close()  # (closed: nothing)
    return t, list(LOG)


def _count():
    i = 0
    while True:
        yield i
        i += 1


def endless_by_next_zip_islice(t):
    g = _count()
    a = next(g) + next(g)
    pairs = list(zip(range(3), _count()))
    sliced = list(itertools.islice(_count(), 2, 5))
    return t + a, pairs, sliced


def _writes_the_list(out, n):
    for i in range(n):
        out.append(("gen", i))
        yield i


def body_writes_a_list_interleaved(t):
    out = []
    for i in _writes_the_list(out, 3):
        out.append(("loop", i))
    return t + len(out), out


COUNTER = [0]


def _bumps_global():
    for i in range(3):
        COUNTER[0] += 1
        yield i


def body_writes_a_global_stops_early(t):
    COUNTER[0] = 0
    found = any(i == 1 for i in _bumps_global())  # any() stops at 1: two bumps
    return t + COUNTER[0], found


class Box:
    def __init__(self):
        self.n = 0


def _bumps_attr(box):
    while True:
        box.n += 1
        yield box.n


def body_writes_an_attribute(t):
    box = Box()
    g = _bumps_attr(box)
    seen = [next(g), box.n, next(g), box.n]
    return t + box.n, seen


def _reads_the_list(out):
    for k in range(3):
        yield out[-1] + k


def generator_reads_what_the_consumer_writes(t):
    out = [1]
    for v in _reads_the_list(out):
        out.append(v)
    return t + out[-1], out


def _raises_stop():
    yield 1
    raise StopIteration("boom")


def pep479(t):
    try:
        list(_raises_stop())
    except RuntimeError as e:
        return t, str(e), type(e.__cause__).__name__


def _divides(n):
    yield 1
    yield 1 // n


def exception_out_of_next(t):
    g = _divides(0)
    next(g)
    try:
        next(g)
    except ZeroDivisionError:
        pass
    return t, list(g)  # finished after raising


def _inner(t):
    got = yield t
    LOG.append(("inner got", got))
    try:
        yield t + 1
    except KeyError:
        LOG.append("inner caught")
    return "inner done"


def _outer(t):
    r = yield from _inner(t)
    LOG.append(r)
    yield t + 2


def yield_from_delegates(t):
    LOG.clear()
    g = _outer(t)
    a = next(g)
    b = g.send("x")  # reaches the inner generator's yield
    c = g.throw(KeyError)  # the inner catches, returns: the outer goes on
    return a + b + c, list(LOG)


def _gives_back(t):
    yield t
    return 9


def return_value_via_next(t):
    g = _gives_back(t)
    next(g)
    try:
        next(g)
    except StopIteration as e:
        return t, e.value


def names_and_type(t):
    g = _count()
    return t, g.__name__, g.__qualname__, type(g).__name__, iter(g) is g, g.gi_running


@pytest.mark.parametrize(
    "fn",
    [
        send_values,
        send_to_the_end,
        send_to_a_new_generator,
        throw_caught,
        throw_uncaught,
        throw_into_a_new_generator,
        close_ignored,
        close_runs_finally,
        endless_by_next_zip_islice,
        body_writes_a_list_interleaved,
        body_writes_a_global_stops_early,
        body_writes_an_attribute,
        generator_reads_what_the_consumer_writes,
        pep479,
        exception_out_of_next,
        yield_from_delegates,
        return_value_via_next,
        names_and_type,
    ],
)
def test_generator_protocol_is_captured_as_eager(fn):
    _fullgraph(fn, torch.randn(3))


def test_an_exception_out_of_the_body_reaches_the_caller():
    def fn(t):
        return t + next(_divides(1)) + list(_divides(0))[0]

    with pytest.raises(kiln.exc.Unsupported, match="ZeroDivisionError raised and not caught"):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.ones(2))
    run_and_compare(fn, torch.ones(2))  # (eager raises it too)


def _inner_fails_to_close(t):
    try:
        yield t
    finally:
        raise KeyError("inner")


def _outer_catches(t):
    try:
        yield from _inner_fails_to_close(t)
    except KeyError as e:
        LOG.append(("outer caught", str(e)))


def close_through_yield_from(t):
    LOG.clear()
    g = _outer_catches(t)
    a = next(g)
    g.close()  # the inner's KeyError is raised in the outer at its yield from
    return a, list(LOG)


def test_close_through_yield_from_raises_the_inner_error_in_the_outer():
    _fullgraph(close_through_yield_from, torch.randn(3))


def _returns_on_exit(t):
    try:
        yield t.sin()
    except GeneratorExit:
        LOG.append("exit caught")
        return t.tan()  # noqa: B901 (close() returns it from Python 3.13 on, None before)
    finally:
        LOG.append("finally")


def close_of_a_generator_that_returns(t):
    LOG.clear()
    g = _returns_on_exit(t)
    a = next(g)
    b = g.close()
    return a, b, list(LOG)


def test_close_returns_what_this_python_returns():
    # eager is the oracle: on 3.11/3.12 close() drops the return value (torch.compile returns
    # it there too, as 3.13 does)
    _fullgraph(close_of_a_generator_that_returns, torch.randn(3))
    out = kiln.compile(close_of_a_generator_that_returns, backend="eager")(torch.ones(2))
    assert (out[1] is None) == (sys.version_info < (3, 13))


def _context_name(exc):
    return None if exc.__context__ is None else type(exc.__context__).__name__


def thrown_into_a_handler(x):
    def g():
        try:
            raise KeyError("a")
        except KeyError:
            try:
                yield x
            except ValueError as exc:  # its context: the KeyError handled around the yield
                yield _context_name(exc)

    gen = g()
    next(gen)
    return x + 1, gen.throw(ValueError)


def thrown_from_a_callers_handler(x):
    def g():
        try:
            yield x
        except ValueError as exc:  # its context: the IndexError the caller is handling
            yield _context_name(exc)

    gen = g()
    next(gen)
    try:
        raise IndexError
    except IndexError:
        got = gen.throw(ValueError)
    return x + 1, got


def thrown_with_nothing_handled(x):
    def g():
        try:
            yield x
        except ValueError as exc:
            yield _context_name(exc)

    gen = g()
    next(gen)
    return x + 1, gen.throw(ValueError)


def test_an_exception_thrown_into_a_generator_has_eagers_context():
    for fn in (thrown_into_a_handler, thrown_from_a_callers_handler, thrown_with_nothing_handled):
        run_and_compare(fn, torch.ones(2), fullgraph=True)
