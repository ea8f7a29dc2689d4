"""kiln's exceptions: graph breaks (Unsupported), backend failures, misuse of the API."""


class KilnError(RuntimeError):
    """Base of every error kiln raises itself."""


class Unsupported(KilnError):
    """Something the frontend cannot put in a graph: a graph break, or an error under fullgraph."""

    def __init__(self, msg, *, user_location=None):
        super().__init__(msg)
        self.msg = msg
        self.user_location = (
            user_location  # "file:line: source text" of the user's code, once known
        )

    def __str__(self):
        text = f"{self.msg}\n  at {self.user_location}" if self.user_location else self.msg
        details = getattr(self, "kiln_details", None)  # kiln.frontend.user_errors.fullgraph_error
        return f"{text}\n{details}" if details else text


class CompiledAutogradCall(Unsupported):
    """`.backward()` under config.compiled_autograd: the frame splits there and compiled autograd
    captures the whole backward as one graph, so fullgraph=True allows it."""


def unimplemented(msg):
    """Stop tracing here: the caller turns this into a graph break (or an error under fullgraph)."""
    raise Unsupported(msg)


class BackendCompilerFailed(KilnError):
    """A backend raised while compiling a graph."""

    def __init__(self, backend_name, inner):
        super().__init__(f"backend {backend_name!r} failed: {type(inner).__name__}: {inner}")
        self.backend_name = backend_name
        self.inner = inner


class InternalError(KilnError):
    """A bug in kiln: an invariant did not hold."""
