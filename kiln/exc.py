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
        # Set while the translators unwind (the graph-break path reads them):
        self.frames = []  # [(code, instruction index, line)] of the traced frames, innermost first
        self.no_resume = False  # no resume function can continue after this break
        self.eager_frame = False  # no graph break helps: the whole frame runs eagerly
        self.break_state = None  # kiln.contracts.BreakState, set by the root translator
        self.nested = []  # kiln.contracts.NestedState of each inlined frame, innermost first
        self.grad_modes = {}  # id(inlined translator) -> the GradModeVariable its call entered
        # Set under fullgraph=True by kiln.frontend.user_errors.fullgraph_error:
        self.kiln_details = None  # the user's frames and a hint, printed after the message
        self.kiln_trim = False  # the entry wrapper drops kiln's frames from the traceback

    @property
    def root_index(self):
        """The instruction index of the break in the root frame (BreakState.index)."""
        return None if self.break_state is None else self.break_state.index

    @property
    def root_stack(self):
        """The root frame's stack at the break (BreakState.stack)."""
        return None if self.break_state is None else self.break_state.stack

    @property
    def root_locals(self):
        """The root frame's locals at the break (BreakState.locals)."""
        return None if self.break_state is None else self.break_state.locals

    def __str__(self):
        text = f"{self.msg}\n  at {self.user_location}" if self.user_location else self.msg
        return f"{text}\n{self.kiln_details}" if self.kiln_details else text


class DataDependentOp(Unsupported):
    """A graph holds an op whose result depends on tensor data (`.item()`, `nonzero`): kiln's ATen
    tracer refuses it, so a backend built on it runs that graph as traced."""


class DataDependentError(Unsupported):
    """Python needs a value read from tensor data (`if y == 0:` on `y = t.item()`): a graph break,
    and under fullgraph=True an error the user's code must fix (torch raises its UserError)."""


class CompiledAutogradCall(Unsupported):
    """`.backward()` under config.compiled_autograd: the frame splits there and compiled autograd
    captures the whole backward as one graph, so fullgraph=True allows it."""


class RestartTrace(BaseException):
    """Trace the frame again from its start: tracing changed what it reads for good (a lazy
    module initialized, Note [Modules: lazy modules initialized while tracing]). A
    BaseException, so that no handler of traced code's exceptions takes it."""


def unimplemented(msg):
    """Stop tracing here: the caller turns this into a graph break (or an error under fullgraph)."""
    raise Unsupported(msg)


class BackendCompilerFailed(KilnError):
    """A backend raised while compiling a graph."""

    def __init__(self, backend_name, inner):
        super().__init__(f"backend {backend_name!r} failed: {type(inner).__name__}: {inner}")
        self.backend_name = backend_name
        self.inner = inner


class RecompileError(KilnError):
    """A compiled function would compile again under `config.error_on_recompile`."""


class UserError(KilnError):
    """The user's code asks for something kiln refuses: raised to the caller at compile time,
    never a graph break nor an eager fallback."""


class ConstraintViolation(UserError):
    """A dimension marked dynamic (kiln.mark_dynamic) was specialised by the traced code, or its
    size is outside its marked range (Note [Shapes: marked dims are a promise])."""


class ForbiddenInTrace(UserError, AssertionError):
    """Compiled code calls a function that only makes sense outside it (kiln.mark_dynamic marks
    inputs for the next compilation). An AssertionError too, as torch's error of that case."""


class LeafFunctionError(UserError):
    """A leaf function's real body disagrees with what kiln was told (its fake implementation, its
    mutates_args), or would lose gradients: raised to the caller, never an eager fallback."""


class LeafStructureError(LeafFunctionError, AssertionError):
    """The real body's output structure differs from the fake's (an AssertionError too, as
    torch's)."""


def kernel_index_error():
    """The IndexError of a compiled kernel that read an index out of range: the user's data, where
    eager raises IndexError too (marked: never taken for a failure of kiln's own)."""
    e = IndexError("index out of bounds in a kiln kernel (eager raises the same error)")
    e.kiln_users_data = True
    return e


class InternalError(KilnError):
    """A bug in kiln: an invariant did not hold."""
