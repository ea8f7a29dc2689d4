"""`kiln.error_on_graph_break(flag)`: whether a graph break is an error, switched per region.

Note [Break policy: error_on_graph_break]
A compiled function makes graph breaks unless fullgraph=True, which makes every break an error
for the whole frame. `error_on_graph_break(True)` asks for that error in a region only, and
`error_on_graph_break(False)` allows breaks again inside it (torch.compile's setting of the same
name, default off). It is a context manager and a decorator, in Python or in compiled code:
- in Python it sets the process's setting for the block or call (`current()`); a frame that
  compiles then starts tracing with that setting (a resume function too: it compiles when it is
  first called, after Python has entered or left the blocks before it);
- traced (`with error_on_graph_break(v):` in the frame, or a call of a function it decorates)
  it sets the trace's setting for the block or call (a stack on the OutputGraph,
  `in_force(output)`); the setting of the innermost traced code at the break is noted on the
  Unsupported (translator `_annotate`, the first to see it) and decides (`raises(e)`): an error
  is raised to the caller as fullgraph's is (no graph is compiled for the frame), else the
  break is made as always. A traced block of it that breaks is rewound to its with statement
  (`resumable` False): Python enters it, so the frame resuming inside it compiles under its
  setting.
- fullgraph=True wins: its frame raises at every break, whatever the region says; and a
  function compiled with fullgraph=True called (traced) from another compiled frame raises at a
  break inside it (its call traced under `True`), as torch.compile does for nested compiles.
The setting is read when a frame compiles and is not guarded: an entry compiled with breaks
still runs when called later under error_on_graph_break(True) (as torch.compile's).
"""

import functools

from kiln.frontend.markers import owns_markers

_setting = [False]  # the process's setting (Python blocks and calls push, exit pops)


def current():
    """The setting Python code runs under now (what a frame compiled now starts with)."""
    return _setting[-1]


def in_force(output):
    """The setting of the traced code of `output`'s trace now."""
    stack = output.__dict__.get("break_errors")
    return stack[-1] if stack else current()


def push(output, value):
    """A traced region with setting `value` begins."""
    output.__dict__.setdefault("break_errors", []).append(value)


def pop(output):
    """The traced region last pushed ends."""
    output.__dict__["break_errors"].pop()


def note(e, output):
    """Note on the Unsupported `e` the setting in force where it was raised (first one wins)."""
    if getattr(e, "error_on_break", None) is None:
        e.error_on_break = in_force(output)


def raises(e):
    """Whether the graph break `e` is an error (Note [Break policy: error_on_graph_break])."""
    noted = getattr(e, "error_on_break", None)
    return current() if noted is None else noted


class error_on_graph_break:  # noqa: N801  (used like a function, as torch's is)
    """While it holds (a `with` block, or each call of a function it decorates) a graph break
    raises kiln.exc.Unsupported; `error_on_graph_break(False)` allows breaks again (Note [Break
    policy: error_on_graph_break])."""

    def __init__(self, error_on_graph_break):
        if not isinstance(error_on_graph_break, bool):
            raise TypeError(
                "error_on_graph_break expects a bool, got "
                f"{type(error_on_graph_break).__name__}: {error_on_graph_break!r}"
            )
        self.value = error_on_graph_break

    def __enter__(self):
        _setting.append(self.value)
        return self

    def __exit__(self, *exc):
        _setting.pop()
        return False

    def __call__(self, fn):
        """As a decorator: the setting holds during each call of `fn`."""
        value = self.value

        @functools.wraps(fn)
        def with_break_setting(*args, **kwargs):
            _setting.append(value)
            try:
                return fn(*args, **kwargs)
            finally:
                _setting.pop()

        for name in [k for k in vars(with_break_setting) if k.startswith("_kiln_")]:
            del vars(with_break_setting)[name]  # (kiln's marks of fn, copied by wraps)
        owns_markers(with_break_setting)  # Note [Markers: copied by functools.wraps]
        with_break_setting._kiln_traced_as = "error_on_graph_break"
        with_break_setting._kiln_break_setting = value
        return with_break_setting
