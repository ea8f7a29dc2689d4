"""What happens when kiln's own code fails on a frame: Note [Faults: the crash contract]."""

import os

from kiln import config, logs

_KILN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def reraise(fullgraph):
    """Whether an internal error goes to the user instead of falling back (fullgraph, strict)."""
    return fullgraph or config.strict


def warn(fn, e, when):
    """The one warning of a frame kiln failed on: the function, where it is, the error."""
    code = fn.__code__
    logs.warn(
        "kiln: internal error %s %s (%s:%d): %s: %s; the function runs eagerly",
        when,
        fn.__qualname__,
        code.co_filename,
        code.co_firstlineno,
        type(e).__name__,
        e,
    )
    logs.counters["frames"]["internal_errors"] += 1


def raised_by_kiln(e):
    """Whether an exception from running compiled code came from kiln itself: its innermost
    frame is kiln's own code or a graph kiln generated (not the user's code, nor torch's)."""
    tb = e.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    filename = tb.tb_frame.f_code.co_filename
    if filename.startswith("<eval_with_key>"):
        return True  # an FX graph's generated forward
    return os.path.abspath(filename).startswith(_KILN_DIR + os.sep)
