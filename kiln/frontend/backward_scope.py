"""The scope compiled autograd puts around frames that may run `.backward()` (registered by
kiln.api: compiled autograd sits above the frontend)."""

import functools

# Note [Frontend: the backward scope]
# With `config.compiled_autograd` on, an eager run of a frame and transformed code (which may call
# `.backward()` after a graph break) run inside compiled autograd's scope for the frame's backend,
# so that the backward graph is captured whole. Compiled autograd sits above the frontend in the
# layer order (docs/ARCHITECTURE.md): its scope is registered here (by kiln.api), not imported.
_backward_scopes = []


def register_backward_scope(scope):
    """Register `scope(backend)`, a context manager around frames that may run `.backward()`."""
    _backward_scopes[:] = [scope]


def backward_scope(backend):
    """The registered backward scope for `backend` (Note [Frontend: the backward scope])."""
    return _backward_scopes[0](backend)


def with_backward_scope(fn, backend):
    """Run a transformed function inside the backward scope (compiled autograd's `maybe_enable`),
    so that a `.backward()` it runs (after a graph break) captures the whole backward graph."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        with backward_scope(backend):
            return fn(*args, **kwargs)

    return run
