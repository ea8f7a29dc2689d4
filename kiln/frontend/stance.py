"""The compiler's stance (`kiln.set_stance`): how compiled functions behave for a while.

Note [Stance: what each one does]
- "default": compiled functions compile on a miss and run their entries (kiln as always).
  `force_backend=` compiles (and runs) with that backend instead: a frame keeps its entries of
  each forced backend apart (`FrameCache.forced`), so code compiled by one never runs for another.
- "force_eager": compiled functions run as the plain Python they were made from.
- "eager_on_recompile": an entry whose guards pass still runs; a miss runs the frame in Python
  instead of compiling it.
- "fail_on_recompile": a miss raises RuntimeError instead of compiling (a frame kiln gave up on
  still runs in Python: it compiles nothing).
- "eager_then_compile", "aot_eager_then_compile": the first compile of a frame uses a stand-in
  backend, then the frame compiles with its own (Note [Stance: eager_then_compile]).
Only the wrapper users call looks at the stance on every call, and only for the two stances
that change what a hit runs (`state.active`); the other two act in `FrameCache.miss`.

Note [Stance: inside compiled code]
Traced code that sets a stance (`kiln.set_stance(...)` as a call or a `with`, or a call of a
function decorated with it) breaks the graph there, with a reason that says so
(`_kiln_break_reason`, kiln.frontend.markers.break_reason): the stance is set in Python, and
what runs after it sees it, as in eager. torch.compile refuses the same code with an error
(its documentation forbids set_stance inside a compiled region); kiln runs it correctly.
"""

import dataclasses
import functools

from kiln.frontend.guards import first_failure
from kiln.frontend.markers import owns_markers
from kiln.registry import resolve

# Note [Stance: eager_then_compile]
# The first call of a frame under "eager_then_compile" runs without the frame's backend: kiln
# traces it and runs the traced graph as it is (the "eager" backend: each op as eager runs it,
# nothing handed to a compiler); "aot_eager_then_compile" runs it through "aot_eager". That
# first entry records the call's sizes, so the next call with other sizes compiles with the
# frame's own backend and makes what changed dynamic (Note [Shapes: automatic dynamic]): a
# warm-up call then a second one decide the shapes, and the backend compiles once. The warm-up
# entry serves until the frame compiles for real, then it is dropped (`keep_warm`): from then
# on only entries of the frame's own backend run. Each frame of a graph break warms up alike.
_WARM_UP = {"eager_then_compile": "eager", "aot_eager_then_compile": "aot_eager"}

STANCES = ("default", "force_eager", "eager_on_recompile", "fail_on_recompile", *_WARM_UP)


class _State:
    """The stance in force: its name and the forced backend (a callable, or None)."""

    def __init__(self, name="default", backend=None, backend_name=None):
        self.name, self.backend, self.backend_name = name, backend, backend_name
        self.active = name == "force_eager" or backend is not None  # (wrappers check on a hit)


state = _State()


def _swap(new):
    global state
    old, state = state, new
    return old


_IN_GRAPH = (
    "kiln.set_stance inside compiled code: a stance changes how compiled functions run, so it "
    "is set in Python, between graphs"
)
_swap._kiln_break_reason = _IN_GRAPH  # (a `with` on a stance made outside compiled code)


def warmup_settings(cache):
    """The settings of a frame's first compile under a warm-up stance, else None."""
    name = _WARM_UP.get(state.name)
    if name is None or cache.entries:
        return None
    backend, backend_name = resolve(name)
    return dataclasses.replace(cache.settings, backend=backend, backend_name=backend_name)


def keep_warm(cache, entry, warm):
    """Note a warm-up entry of `cache`; a real one drops them (Note [Stance: eager_then_compile])."""
    kept = cache.__dict__.setdefault("warm_entries", [])
    if warm:
        kept.append(entry)
        return
    for old in kept:
        cache._drop(old)
    kept.clear()


def fail_on_recompile(
    fn, guards, args, kwargs, why="the 'fail_on_recompile' stance", error=RuntimeError
):
    """Raise the error of a miss of `fn` under the fail_on_recompile stance (or `why`)."""
    code = fn.__code__
    failures = [f"  entry {i}: {first_failure(g, args, kwargs)}" for i, g in enumerate(guards)]
    raise error(
        f"kiln: {fn.__qualname__} ({code.co_filename}:{code.co_firstlineno}) would compile under "
        f"{why}" + (", guards failed:\n" + "\n".join(failures) if failures else " (no entry yet)")
    )


class set_stance:  # noqa: N801  (used like a function, as torch.compiler.set_stance is)
    """Set the compiler's stance now; as a context manager or decorator, only for that block or
    call (Note [Stance: what each one does])."""

    _kiln_break_reason = _IN_GRAPH  # Note [Stance: inside compiled code]

    def __init__(self, stance="default", *, force_backend=None):
        if stance not in STANCES:
            raise ValueError(f"kiln.set_stance: unknown stance {stance!r}; one of {STANCES}")
        if force_backend is not None and stance != "default":
            raise RuntimeError("kiln.set_stance: force_backend needs the 'default' stance")
        backend = name = None
        if force_backend is not None:
            backend, name = resolve(force_backend)
        self.state = _State(stance, backend, name)
        self.prev = _swap(self.state)

    def __enter__(self):
        _swap(self.state)
        return self

    def __exit__(self, *exc):
        _swap(self.prev)
        return False

    def __call__(self, fn):
        """As a decorator: the stance holds during each call of `fn` (and not after decorating)."""
        _swap(self.prev)
        wanted = self.state

        @functools.wraps(fn)
        def with_stance(*args, **kwargs):
            prev = _swap(wanted)
            try:
                return fn(*args, **kwargs)
            finally:
                _swap(prev)

        owns_markers(with_stance)  # Note [Markers: copied by functools.wraps]
        with_stance._kiln_disabled = True  # (compiled code calling it breaks: it runs in Python)
        with_stance._kiln_break_reason = (
            f"call to {fn.__qualname__}, which runs in Python under "
            f"@kiln.set_stance({wanted.name!r})"
        )
        return with_stance
