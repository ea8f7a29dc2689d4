"""Named log channels (KILN_LOGS="guards,recompiles") and the global counters."""

import collections
import contextlib
import logging
import os
import sys

CHANNELS = (
    "graph_breaks",
    "recompiles",
    "guards",
    "graph_code",
    "bytecode",
    "aot_graphs",
    "output_code",
    "compiled_autograd",
    "compiled_autograd_verbose",
    "perf_hints",
    "cudagraphs",
)

# counters["stats"]["unique_graphs"], counters["frames"]["total"], ... (cleared by kiln.reset()).
# counters["graph_break"][reason] counts every break; counters["unimplemented"][reason] those
# that left a whole frame to run in Python (no resume).
counters = collections.defaultdict(collections.Counter)

_enabled: set[str] = set()


# Note [Logs: the stream a warning goes to]
# kiln's messages go to sys.stderr as it is when they are written, so that a redirect around a
# compiled call (pytest's capture, redirect_stderr) gets them, but not to a stream the compiled
# program itself swapped in: a warning written while a resume function compiles inside the
# user's `with redirect_stderr(buf):` would land in buf, output eager never wrote there. The
# user-facing wrapper records sys.stderr when a call that compiles starts (`stderr_at_call`);
# while it is set, messages go there.
stderr_at_call = None


class _StderrHandler(logging.StreamHandler):
    """Writes to sys.stderr as the compiled call found it, else as it is now (Note [Logs: the
    stream a warning goes to])."""

    @property
    def stream(self):
        return stderr_at_call if stderr_at_call is not None else sys.stderr

    @stream.setter
    def stream(self, value):
        pass


_handler = _StderrHandler()
_handler.setFormatter(logging.Formatter("[kiln:%(channel)s] %(message)s"))


def set_logs(spec):
    """Enable channels from a comma-separated spec ("all" enables every channel)."""
    names = {n.strip() for n in spec.split(",") if n.strip()}
    if "all" in names:
        names = set(CHANNELS)
    unknown = names - set(CHANNELS)
    if unknown:
        raise ValueError(
            f"unknown KILN_LOGS channel(s) {sorted(unknown)}; known: {', '.join(CHANNELS)}"
        )
    if "compiled_autograd_verbose" in names:
        names.add("compiled_autograd")
    _enabled.clear()
    _enabled.update(names)


def enabled(channel):
    """Whether a channel is on; call before building an expensive message."""
    return channel in _enabled


def get_logger(channel):
    """The logging.Logger of a channel ("kiln.<channel>"), at DEBUG when the channel is on."""
    logger = logging.getLogger(f"kiln.{channel}")
    if _handler not in logger.handlers:
        logger.addHandler(_handler)
        logger.propagate = False
    logger.setLevel(logging.DEBUG if channel in _enabled else logging.WARNING)
    return logger


def log(channel, msg, *args):
    """Print a message on a channel if it is enabled."""
    if channel in _enabled:
        get_logger(channel).debug(msg, *args, extra={"channel": channel})


class _Compiling:
    """`with logs.compiling("fn (file:line)"):` names the user function a backend's warnings
    are about (`logs.compiling.current`)."""

    current = None
    warned = False  # a backend warned about this frame already (one warning per frame)

    @contextlib.contextmanager
    def __call__(self, where):
        previous = self.current, self.warned
        self.current, self.warned = where, False
        try:
            yield
        finally:
            self.current, self.warned = previous


compiling = _Compiling()


def warn(msg, *args):
    """A warning every user sees (fallbacks, recompile limits)."""
    get_logger("warnings").warning(msg, *args, extra={"channel": "warning"})


set_logs(os.environ.get("KILN_LOGS", ""))
