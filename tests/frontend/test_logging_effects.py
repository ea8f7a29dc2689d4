"""Logging and warnings inside compiled code: replayed after the graph in program order
(Note [Side effects: logging replayed after the graph]), no graph break, when the records reach
only logging's own handlers; a handler of the program's own makes the call run in Python."""

import functools
import io
import logging
import sys
import warnings

import torch
from frontend_helpers import run_and_compare

import kiln


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []
        self.exc_types = []

    def emit(self, record):
        self.records.append((record.levelname, record.getMessage()))
        if record.exc_info:
            self.exc_types.append(record.exc_info[0])


class OnceLogger(logging.Logger):
    """Like Hugging Face's Logger.warning_once: an lru_cache'd method."""

    @functools.lru_cache(None)  # noqa: B019 (what transformers does)
    def warning_once(self, *args):
        self.warning(*args)


log = OnceLogger("kiln.tests.logging_effects")
log.propagate = False
log.setLevel(logging.INFO)


def plain_handler():
    """A StreamHandler over a StringIO: logging's own classes, so calls are replayed."""
    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(logging.Formatter("%(levelname)s\t%(message)s"))
    return handler


def records_in(handler):
    lines = handler.stream.getvalue().splitlines()
    return [tuple(line.split("\t", 1)) for line in lines]


def records_of(fn, *args, **kw):
    handler = plain_handler()
    log.addHandler(handler)
    try:
        run_and_compare(fn, *args, **kw)
    finally:
        log.removeHandler(handler)
    return records_in(handler)


def levels(x):
    log.debug("not shown %d", 1)
    y = x * 2
    log.info("info %s %d", "a", y.shape[0])
    log.warning("warn %.1f", 2.5)
    log.log(logging.ERROR, "error %s", (1, 2))
    return y + 1


def test_logger_levels_replayed_in_order_without_a_break():
    records = records_of(levels, torch.randn(3), expected_graphs=1, expected_breaks=0)
    one = [("INFO", "info a 3"), ("WARNING", "warn 2.5"), ("ERROR", "error (1, 2)")]
    assert records == one * 3  # eager, then two compiled calls


def once(x):
    log.warning_once("deprecated path")
    return x.sin()


def test_warning_once_emits_once_like_eager():
    OnceLogger.warning_once.cache_clear()
    records = records_of(once, torch.randn(3), expected_graphs=1, expected_breaks=0)
    assert records == [("WARNING", "deprecated path")]


def with_print(x):
    log.info("before")
    y = x + 1
    print("between", 7)
    log.info("after")
    return y * 2


def test_order_with_a_print_break(capsys):
    handler = logging.StreamHandler(sys.stdout)
    log.addHandler(handler)
    try:
        run_and_compare(with_print, torch.randn(2), expected_graphs=2, expected_breaks=1)
    finally:
        log.removeHandler(handler)
    assert capsys.readouterr().out == "before\nbetween 7\nafter\n" * 3


def tensor_argument(x):
    log.info("value %s", x.sum())
    return x + 1


def test_tensor_argument_breaks_and_logs_the_value():
    records = records_of(tensor_argument, torch.ones(2), expected_breaks=1)
    assert records == [("INFO", "value tensor(2.)")] * 3


def in_try(x):
    try:
        log.info("in try")
    except ValueError:
        pass
    return x + 1


def test_inside_try_breaks():
    assert records_of(in_try, torch.ones(2)) == [("INFO", "in try")] * 3
    assert kiln.counters["stats"]["graph_breaks"] >= 1


def warns(x):
    warnings.warn("careful", FutureWarning, stacklevel=1)
    y = x.cos()
    warnings.warn("twice", stacklevel=2)
    return y


def test_warnings_warn_replayed():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_and_compare(warns, torch.randn(2), expected_breaks=0)
    got = [(w.category, str(w.message)) for w in caught]
    assert got == [(FutureWarning, "careful"), (UserWarning, "twice")] * 3


def no_tensor_ops(n):
    log.warning("count %d", n)
    return n + 1


def test_frame_without_tensor_ops_still_logs():
    records = records_of(no_tensor_ops, 3, expected_graphs=0, expected_breaks=0)
    assert records == [("WARNING", "count 3")] * 3


def exc_info(x):
    try:
        raise ValueError("inner")
    except ValueError:
        log.warning("caught", exc_info=True)
    return x + 1


def test_exc_info_is_not_replayed_outside_the_handler():
    handler = Records()
    log.addHandler(handler)
    try:
        kiln.reset()
        got = kiln.compile(exc_info, backend="eager")(torch.ones(2))
    finally:
        log.removeHandler(handler)
    torch.testing.assert_close(got, torch.ones(2) + 1)
    assert handler.records == [("WARNING", "caught")]
    assert handler.exc_types == [ValueError]  # the traceback of the exception being handled
    assert kiln.counters["stats"]["graph_breaks"] >= 1


def sizes(x):
    log.info("batch %d of %s", x.shape[0], tuple(x.shape))
    return x * 2


def test_symbolic_sizes_are_logged_with_their_values():
    handler = plain_handler()
    log.addHandler(handler)
    try:
        kiln.reset()
        compiled = kiln.compile(sizes, backend="eager", dynamic=True)
        for n in (3, 5):
            torch.testing.assert_close(compiled(torch.ones(n, 2)), torch.ones(n, 2) * 2)
    finally:
        log.removeHandler(handler)
    assert records_in(handler) == [("INFO", "batch 3 of (3, 2)"), ("INFO", "batch 5 of (5, 2)")]
    assert kiln.counters["stats"]["graph_breaks"] == 0
    assert kiln.counters["stats"]["unique_graphs"] == 1


def reads_its_records(x, seen):
    log.warning("first")
    n = len(seen)  # a handler of the program's own appended to it
    log.warning("second")
    return x + n, list(seen)


def test_a_handler_of_the_programs_own_runs_in_order():
    def run(fn):
        handler = Records()
        log.addHandler(handler)
        try:
            return fn(torch.ones(2), handler.records)
        finally:
            log.removeHandler(handler)

    kiln.reset()
    expected = run(reads_its_records)
    got = run(kiln.compile(reads_its_records, backend="eager"))
    torch.testing.assert_close(got[0], expected[0])
    assert got[1] == expected[1] == [("WARNING", "first"), ("WARNING", "second")]
    assert any("a handler, filter or record factory" in k for k in kiln.counters["graph_break"])


def test_a_handler_added_after_compiling_recompiles():
    handler = plain_handler()
    log.addHandler(handler)
    kiln.reset()
    compiled = kiln.compile(reads_its_records, backend="eager")
    try:
        compiled(torch.ones(2), [])
        assert sum(kiln.counters["graph_break"].values()) == 0
        own = Records()
        log.addHandler(own)
        try:
            got = compiled(torch.ones(2), own.records)
        finally:
            log.removeHandler(own)
    finally:
        log.removeHandler(handler)
    assert got[1] == [("WARNING", "first"), ("WARNING", "second")]
    torch.testing.assert_close(got[0], torch.ones(2) + 1)
