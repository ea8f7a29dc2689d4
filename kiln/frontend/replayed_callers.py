"""warnings.warn and logging calls replayed after the graph, naming the frame Python would name.

Note [Warnings: the caller a warning names]
`warnings.warn(msg, category, stacklevel=k)` attributes the warning to the k-th frame up from
its caller: that frame's file, line, module and `__warningregistry__` (which decides "default"
and "once" filters). kiln replays a traced warn after the graph (Note [Side effects: logging
replayed after the graph]) from the transformed code, whose frame, callers and line are not the
ones Python would see: an inlined helper's frames do not exist, a resume function is called by
kiln's code, and kiln's wrappers sit between a compiled frame and its caller. So the trace
records the frames it knows, innermost first (each inlined function's file, line of the call and
globals, down to the compiled frame's own), and the replay calls `warn_at`, which picks level k
from them; a level past them is found by walking the real stack above the compiled frame, one
user frame per level: kiln's own frames are skipped, and so is the frame a resume function was
called from (the same user frame, earlier in its code: `codec.MADE_FROM` says which code kiln
made from which). The warning is then issued with `warnings.warn_explicit`, as warn itself does.

A logging call is replayed the same way (`log_at`): logging's findCaller would name the
transformed frame (another line; the caller's callers include kiln's own frames), so
the record is made with the caller found here, at the call's `stacklevel`, and handled as
Logger._log does (the level checked first, the logger's own makeRecord and handle). Loggers whose
class overrides the method, `_log` or findCaller, and LoggerAdapters, are replayed by calling the
method (their caller may then differ, as Note [Side effects: logging replayed after the graph]
says).
"""

import logging
import os
import sys
import types
import warnings

from kiln.bytecode.codec import MADE_FROM

_KILN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def warn_at(known, message, category=None, stacklevel=1, source=None):
    """warnings.warn(message, category, stacklevel, source) from the frames `known` ((file,
    line, globals), the warn's caller first), then the real callers of the compiled frame."""
    if isinstance(message, Warning):
        category = message.__class__
    if category is None:
        category = UserWarning
    if not (isinstance(category, type) and issubclass(category, Warning)):
        raise TypeError(f"category must be a Warning subclass, not '{type(category).__name__}'")
    found = _frame_at(known, stacklevel, sys._getframe(1))
    filename, lineno, f_globals, _ = found or ("sys", 1, sys.__dict__, None)
    module = f_globals.get("__name__", "<string>")
    registry = f_globals.setdefault("__warningregistry__", {})
    warnings.warn_explicit(message, category, filename, lineno, module, registry, f_globals, source)


_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}
LOG_METHODS = frozenset((*_LEVELS, "log"))  # what log_at replays (Logger's own methods)
LOG_KWARGS = frozenset(("stacklevel", "extra"))


def plain_logger_method(logger, name):
    """Whether `logger.<name>(...)` runs Logger's own method, _log and findCaller."""
    cls = type(logger)
    return (
        isinstance(logger, logging.Logger)
        and name in LOG_METHODS
        and all(
            getattr(cls, n, None) is getattr(logging.Logger, n)
            for n in (name, "_log", "findCaller", "isEnabledFor")
        )
    )


_PLAIN_HANDLERS = frozenset(
    (logging.StreamHandler, logging.FileHandler, logging.NullHandler, type(logging.lastResort))
)


def plain_delivery(logger):
    """Whether a record logged on `logger` (a Logger, or a LoggerAdapter's) runs no user code:
    no filters, the stock record factory, and handlers of logging's own stream classes with a
    stock formatter writing to a stream whose write is C's. Then the frame cannot see a record
    arrive late (Note [Side effects: logging replayed after the graph]); a handler that keeps
    records in a list the frame reads could."""
    logger = getattr(logger, "logger", logger)  # (a LoggerAdapter's)
    if not isinstance(logger, logging.Logger) or logging.getLogRecordFactory() is not (
        logging.LogRecord
    ):
        return False
    handlers, c = [], logger
    while c is not None:
        if c.filters:
            return False
        handlers += c.handlers
        c = c.parent if c.propagate else None
    if not handlers and logging.lastResort is not None:
        handlers = [logging.lastResort]
    return all(plain_handler(h) for h in handlers)


def plain_handler(h):
    if type(h) not in _PLAIN_HANDLERS or h.filters:
        return False
    if h.formatter is not None and type(h.formatter) is not logging.Formatter:
        return False
    write = getattr(type(getattr(h, "stream", None)), "write", None)
    return not isinstance(write, types.FunctionType)  # (None: no stream yet, or a C write)


def log_at(known, logger, name, *args, stacklevel=1, extra=None):
    """logger.<name>(*args, stacklevel=, extra=) as Logger does it, the record's caller found
    from the frames `known` and then the compiled frame's real callers (logger None: the module
    function, on the root logger)."""
    if logger is None:
        if not logging.root.handlers:
            logging.basicConfig()
        logger = logging.root
    if name == "log":
        level, *args = args
        if not isinstance(level, int):
            if logging.raiseExceptions:
                raise TypeError("level must be an integer")
            return
    else:
        level = _LEVELS[name]
    msg, *args = args
    if not logger.isEnabledFor(level):
        return
    found = _frame_at(known, stacklevel, sys._getframe(1))
    filename, lineno, _, func = found or ("(unknown file)", 0, None, "(unknown function)")
    record = logger.makeRecord(
        logger.name, level, filename, lineno, msg, tuple(args), None, func, extra
    )
    logger.handle(record)


def _frame_at(known, stacklevel, compiled_frame):
    """(file, line, globals, function name) of the frame `stacklevel` up from the call: from
    the traced frames `known`, then the real callers of the compiled frame; None past them."""
    level = max(int(stacklevel), 1)
    if level <= len(known):
        return known[level - 1]
    frame = _user_caller(compiled_frame, level - len(known))
    if frame is None:
        return None
    code = frame.f_code
    return code.co_filename, frame.f_lineno, frame.f_globals, user_code(code).co_name


def _user_caller(frame, levels):
    """The user frame `levels` up from the compiled frame `frame`, or None past the stack."""
    while frame is not None:
        frame = _caller(frame)
        levels -= 1
        if levels == 0:
            return frame
    return None


def _caller(frame):
    """The user frame that called `frame` (a user frame, or kiln's code for one)."""
    resumed = _is_resume(frame.f_code)
    frame = frame.f_back
    while frame is not None:
        code = frame.f_code
        if code.co_filename.startswith(_KILN_DIR):
            frame = frame.f_back
        elif resumed:  # the frame the resume function continues: the same user frame
            resumed = _is_resume(code)
            frame = frame.f_back
        else:
            return frame
    return None


def user_code(code):
    """The user code kiln made `code` from (a resume function's: its function's), else code."""
    return MADE_FROM.get(code, code)


def _is_resume(code):
    return code in MADE_FROM and ".__resume_at_" in code.co_qualname
