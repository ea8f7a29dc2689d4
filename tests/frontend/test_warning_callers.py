"""A warning names the frame eager's names: file, line and module's registry, at every
stacklevel, from the compiled frame, inlined helpers and resume functions (Note [Warnings: the
caller a warning names])."""

import gc
import io
import logging
import sys
import traceback
import warnings

import pytest
import torch

import kiln


def _warned(fn, *args):
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        fn(*args)
    return [(w.filename, w.lineno, str(w.message), w.category) for w in got]


def _same_warnings(fn, *args, breaks=None):
    kiln.reset()
    expected = _warned(fn, *args)
    assert expected, "the eager run warns"
    compiled = kiln.compile(fn, backend="eager")
    assert _warned(compiled, *args) == expected
    if breaks is not None:
        assert sum(kiln.counters["graph_break"].values()) == breaks, kiln.counters["graph_break"]


def helper(x, level):
    warnings.warn("from the helper", UserWarning, stacklevel=level)
    return x * 2


def calls_helper(x):
    y = helper(x, 1) + 1
    y = helper(y, 2) + 1
    return helper(y, 3) + 1  # level 3: the compiled function's caller


@pytest.mark.parametrize("level", [1, 2])
def test_in_the_compiled_frame(level):
    def fn(x):
        warnings.warn("here", DeprecationWarning, stacklevel=level)
        return x + 1

    _same_warnings(fn, torch.ones(2), breaks=0)


def test_inlined_helpers_at_each_level():
    _same_warnings(calls_helper, torch.ones(2), breaks=0)


def breaks_then_warns(x):
    gc.collect()  # a break: the rest runs in a resume function
    warnings.warn("after the break", UserWarning, stacklevel=2)
    return x * 2


def calls_a_breaking_helper(x):
    return breaks_then_warns(x) + 1


def test_a_resume_function_names_its_callers_line():
    _same_warnings(calls_a_breaking_helper, torch.ones(2))


def test_a_message_object_and_bad_category():
    def fn(x):
        warnings.warn(RuntimeWarning("an instance"), stacklevel=1)  # (breaks: Python runs it)
        return x + 1

    _same_warnings(fn, torch.ones(2))

    def bad(x):
        warnings.warn("m", 3, stacklevel=1)
        return x + 1

    with pytest.raises(TypeError, match="category must be a Warning subclass"):
        bad(torch.ones(2))
    with pytest.raises(TypeError, match="category must be a Warning subclass"):
        kiln.compile(bad, backend="eager")(torch.ones(2))


def twice(x):
    warnings.warn("same text", UserWarning, stacklevel=1)
    warnings.warn("same text", UserWarning, stacklevel=1)
    return x + 1


def test_default_filter_counts_each_line_once():
    # the "default" action shows a warning once per (text, category, line) in the module's
    # registry: two lines, two warnings, on every call
    def run(fn):
        sys.modules[__name__].__dict__.pop("__warningregistry__", None)
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("default")
            fn(torch.ones(2))
            fn(torch.ones(2))
        return [(w.lineno, str(w.message)) for w in got]

    kiln.reset()
    assert run(kiln.compile(twice, backend="eager")) == run(twice)


def raises_after_a_break(x):
    gc.collect()
    raise ValueError("boom")


def calls_one_that_raises(x):
    y = x + 1
    return raises_after_a_break(y)


def test_a_traceback_shows_the_line_of_a_call_at_a_break():
    def lines(fn):
        try:
            fn(torch.ones(2))
        except ValueError as e:
            tb = traceback.extract_tb(e.__traceback__)
            # (a set: the caller's resume function, a frame of its own, is at the same line)
            return {(f.name, f.lineno) for f in tb if f.name == "calls_one_that_raises"}
        raise AssertionError("no error")

    kiln.reset()
    assert lines(kiln.compile(calls_one_that_raises, backend="eager")) == lines(
        calls_one_that_raises
    )


# --- logging records name their caller as eager's do ---------------------------------------------

log = logging.getLogger("kiln.tests.callers")


def log_helper(x, level):
    log.warning("helper %s", "x", stacklevel=level)
    return x * 2


def logs_at_levels(x):
    log.info("in the frame %d", 3)
    y = log_helper(x, 1) + 1
    y = log_helper(y, 2)
    log.log(logging.ERROR, "by level")
    logging.warning("module-level")
    return y + 1


def logs_after_a_break(x):
    gc.collect()
    log.warning("after the break")
    return x + 1


def _records(fn, *args):
    # logging's own handler classes: the calls are replayed after the graph (a handler of the
    # program's own makes them run in Python: test_logging_effects.py)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(pathname)s|%(lineno)d|%(funcName)s|%(message)s"))
    old_level, old_propagate = log.level, log.propagate
    log.addHandler(handler)
    logging.root.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    try:
        fn(*args)
    finally:
        log.removeHandler(handler)
        logging.root.removeHandler(handler)
        log.setLevel(old_level)
        log.propagate = old_propagate
    return stream.getvalue().splitlines()


@pytest.mark.parametrize("fn", [logs_at_levels, logs_after_a_break])
def test_log_records_name_eagers_caller(fn):
    kiln.reset()
    expected = _records(fn, torch.ones(2))
    assert len(expected) >= 1
    assert _records(kiln.compile(fn, backend="eager"), torch.ones(2)) == expected
