"""Context managers while tracing: grad mode, nullcontext, contextlib.suppress, generator-based
managers (@contextmanager), user classes with __enter__/__exit__, and the `with` exit slot."""

import contextlib
import functools
import inspect
import types

import torch

from kiln.bytecode import emit
from kiln.exc import Unsupported, unimplemented
from kiln.frontend import entered
from kiln.frontend.guards import GuardKind
from kiln.frontend.source import AttrSource
from kiln.frontend.variables import autocast, optim
from kiln.frontend.variables.base import (
    PythonValueVariable,
    VariableTracker,
    wrap_constant_like,
    wrap_value,
)
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.exceptions import make_exception
from kiln.frontend.variables.generator_ctx import (  # (_Yielded: generators.py imports it here)
    GeneratorContextVariable,
    _check_binds,
    _Yielded,  # noqa: F401
)
from kiln.frontend.variables.misc import OpaqueCallableVariable


class GradModeVariable(VariableTracker):
    """`torch.no_grad()` / `enable_grad()` / `set_grad_enabled(b)` used in a `with` statement.

    Entering records `torch._C._set_grad_enabled(mode)` in the graph and switches the mode while
    tracing (meta results see it); the exit records and switches back to the mode before.
    """

    def __init__(self, mode, cls, **kw):
        super().__init__(**kw)
        self.mode = mode
        self.cls = cls
        self.prev = None

    def python_type(self):
        return self.cls

    applied = False  # torch.set_grad_enabled(b): switched when made, entering does nothing

    def enter(self, tx):
        if self.applied:  # set_grad_enabled.__enter__ sets the mode again (its prev is kept)
            _set_grad(tx, self.mode)
            return ConstantVariable(None)
        self.prev = torch.is_grad_enabled()
        _set_grad(tx, self.mode)
        return ConstantVariable(None)

    def exit(self, tx):
        _set_grad(tx, self.prev)
        return ConstantVariable(None)

    def load_fresh(self, cg):
        """A new manager with the same enter/exit (Note [Graph breaks: with blocks])."""
        cg.load_object(torch.enable_grad if self.mode else torch.no_grad, push_null=True)
        cg.extend(emit.call(0))

    # Note [Blocks: breaks inside a user with block]: set for a break inside a user block
    kept_entered = False

    @property
    def stays_entered(self):
        return self.kept_entered

    def load_entered(self, cg):
        """What the resume function enters for this block, entered already."""
        entered.load_grad_restore(cg, self.prev)

    def load_around(self, cg, temp):
        """What the instruction at a break runs inside: the mode restored on an exception."""
        entered.load_exit_on_error(cg, None, temp, self.prev)

    def reconstruct(self, cg):
        """The manager as a live value after a graph break (Note [Ctx: grad-mode managers as
        values])."""
        if not self.applied:
            self.load_fresh(cg)
            return
        cg.load_object(rebuilt_set_grad_enabled, push_null=True)
        cg.load_object(self.mode)
        cg.load_object(self.prev)
        cg.extend(emit.call(2))

    def call_function(self, tx, args, kwargs):
        """`torch.no_grad()(fn)`, `@torch.set_grad_enabled(b)`: fn run under the mode."""
        if len(args) != 1 or kwargs or not callable_var(args[0]):
            unimplemented(f"calling a {self.cls.__name__} object with these arguments")
        if self.applied:  # set_grad_enabled(b) as a decorator restores the mode it switched
            _set_grad(tx, self.prev)
        return GradModeFunctionVariable(args[0], self.mode, self.cls)


def rebuilt_set_grad_enabled(mode, prev):
    """A `torch.set_grad_enabled` object with these fields, made without switching the mode."""
    cm = object.__new__(torch.set_grad_enabled)
    cm.mode, cm.prev = mode, prev
    return cm


# Note [Ctx: grad-mode managers as values]
# A grad-mode manager can outlive a graph break without being entered (`ctx =
# torch.set_grad_enabled(True)`, a break, then `with ctx:`; or the manager passed to a call whose
# arguments break). `torch.no_grad()` / `enable_grad()` objects hold nothing: a fresh one is
# rebuilt. A `set_grad_enabled(b)` object switched the mode when made (that switch is in the
# graph) and remembers the mode before it (`prev`), which its __exit__ restores: it is rebuilt
# with both fields set and no switch. A frame (a resume function, a callee) that meets such an
# object reads both fields through its source (guarded constants): __enter__ sets `mode`,
# __exit__ sets `prev`, as Python runs them.


def callable_var(var):
    """Whether a traced value is a function kiln can call (a decorator's argument)."""
    try:
        return callable(var.python_type()) and var.python_type() in _FUNCTION_TYPES
    except Exception:
        return False


_FUNCTION_TYPES = (types.FunctionType, types.MethodType, types.BuiltinFunctionType)


class GradModeFunctionVariable(VariableTracker):
    """A function decorated by a grad mode (`torch.no_grad()(fn)`): each call runs it inside
    that mode, as the decorator's `with` block does."""

    def __init__(self, fn, mode, cls, **kw):
        super().__init__(**kw)
        self.fn = fn
        self.mode = mode
        self.cls = cls

    def python_type(self):
        return types.FunctionType

    def call_function(self, tx, args, kwargs):
        cm = GradModeVariable(self.mode, self.cls)
        cm.enter(tx)
        try:
            return self.fn.call_function(tx, args, kwargs)
        except Unsupported as e:
            if e.nested and e.nested[-1].tx.parent is tx:  # (a break inside: the frame it
                e.grad_modes[id(e.nested[-1].tx)] = cm  # ran runs in the mode: nested_breaks)
            raise
        finally:
            cm.exit(tx)

    def reconstruct(self, cg):
        """The decorated function as a live value (a graph break inside it that is not placed
        there is placed at its call, which then runs it as its own frame): rebuilt as `no_grad()(fn)` or
        `enable_grad()(fn)` by its mode, what `set_grad_enabled(mode)(fn)` does when called,
        without switching the mode now."""
        if self.cls not in (torch.no_grad, torch.enable_grad, torch.set_grad_enabled):
            unimplemented(f"a function decorated by {self.cls.__name__} leaving the compiled frame")
        cg.load_object(decorated_by_grad_mode, push_null=True)
        cg.load_object(self.mode)
        cg.reconstruct(self.fn)
        cg.extend(emit.call(2))


def decorated_by_grad_mode(mode, fn):
    """`fn` decorated to run with grad mode `mode`, as torch's grad-mode decorators make it."""
    return (torch.enable_grad if mode else torch.no_grad)()(fn)


class NullContextVariable(VariableTracker):
    """`contextlib.nullcontext(enter_result)`: entering returns enter_result, nothing else."""

    def __init__(self, enter_result, **kw):
        super().__init__(**kw)
        self.enter_result = enter_result

    def python_type(self):
        return contextlib.nullcontext

    def enter(self, tx):
        return self.enter_result

    def exit(self, tx):
        return ConstantVariable(None)

    def reconstruct(self, cg):
        cg.load_object(contextlib.nullcontext, push_null=True)
        cg.reconstruct(self.enter_result)
        cg.extend(emit.call(1))

    load_fresh = reconstruct


def _set_grad(tx, mode):
    if torch.is_grad_enabled() != mode:
        record_grad_switch(tx, mode)


def record_grad_switch(tx, mode):
    """Record `torch._C._set_grad_enabled(mode)` in the graph and switch the mode while tracing."""
    node = tx.output.create_node("call_function", torch._C._set_grad_enabled, (mode,), {})
    node.meta["example_value"] = None
    torch._C._set_grad_enabled(mode)


# Note [Ctx: a bare _set_grad_enabled is recorded]
# The grad-mode managers (`no_grad`, `enable_grad`, `set_grad_enabled(b)`) record a switch only
# where the mode changes, as torch.compile coalesces them. A direct `torch._C._set_grad_enabled(b)`
# call (what user context managers' __enter__/__exit__ often do) is recorded every time, even when
# it sets the mode already in force, as torch.compile records it: the graphs (and their op
# counts) agree, and a no-op switch costs nothing.


class WithExitVariable(VariableTracker):
    """The `__exit__` BEFORE_WITH leaves on the stack for a traced context manager."""

    def __init__(self, cm, **kw):
        super().__init__(**kw)
        self.cm = cm

    def call_function(self, tx, args, kwargs):
        if not all(a.is_python_constant() and a.as_python_constant() is None for a in args):
            unimplemented("__exit__ with an exception")
        tx.exit_with(self)
        return self.cm.exit(tx)

    def exit_exception(self, tx, exc):
        """__exit__(type(exc), exc, tb) of a with block an exception leaves: whether it is
        suppressed (WITH_EXCEPT_START)."""
        tx.exit_with(self)
        exit_exception = getattr(self.cm, "exit_exception", None)
        if exit_exception is None:  # grad mode, nullcontext: restore, never suppress
            self.cm.exit(tx)
            return ConstantVariable(False)
        return exit_exception(tx, exc)


# Note [Blocks: context managers]
# BEFORE_WITH traces these managers (context_manager()): grad-mode managers and nullcontext
# (entering/leaving only sets state; a graph break inside their block leaves and re-enters them,
# Note [Graph breaks: with blocks]); contextlib.suppress; user classes whose __enter__/__exit__
# are Python functions (inlined, the exception path too: __exit__(type, exc, None) decides
# whether the exception is suppressed); contextlib.contextmanager generators (run up to their
# yield on enter, resumed on exit, the exception thrown in at the yield on an exceptional exit).
# A graph break inside the block of one of the last three cannot leave and re-enter the manager
# (their enter/exit are user code that must run exactly once each: `resumable` False): inside a
# user class's block it is placed where it happens with the manager left entered (Note [Blocks:
# breaks inside a user with block]); otherwise it is rewound to the with statement.
# Any other manager (C __enter__/__exit__: threading.Lock, RLock, inference_mode, files...) is a
# graph break at BEFORE_WITH: the graph so far runs, Python runs the BEFORE_WITH (enters the
# manager), and the resume function starts inside the block with the manager's __exit__ as a
# plain value in the block's stack slot (no guard: it is only ever called in Python). Its copied
# exception table keeps the block's cleanup, so an exception leaving the block calls __exit__ as
# in eager; the block's code is traced into the resume function's graph; the __exit__ call after
# the block is a break (Python calls it; for the kinds untraced_reason names, with the reason of
# the with statement: one cause, one reason) and another resume function continues after it. A
# break inside such a block cannot be placed (its cleanup is an untraced handler: the resume
# function runs eagerly), nor a graph op that may raise at run time: the graph call is outside
# the block's cleanup, and a lock would stay taken (Note [Blocks: ops inside try blocks]).
# Tracing lock.acquire()/release() as replayed side effects instead would not be sound: the
# graph's tensor reads and in-place updates inside the block would not run under the lock.


_FIELDS = ("mode", "prev")  # of a torch.set_grad_enabled object
PROFILERS = (torch.profiler.profile, torch.autograd.profiler.profile)
_STREAM_SWAPS = (contextlib.redirect_stdout, contextlib.redirect_stderr)


def untraced_reason(cls):
    """Why kiln leaves managers of class `cls` to Python, or None when it does not by type."""
    if issubclass(cls, PROFILERS):
        name = cls.__name__
        return f"a {name} profiler not in the plain `with {name}(<flags>):` form (Python runs it)"
    if issubclass(cls, _STREAM_SWAPS):
        return f"context manager {cls} not supported (it swaps a sys stream)"
    enter = inspect.getattr_static(cls, "__enter__", None)
    exit_ = inspect.getattr_static(cls, "__exit__", None)
    if enter is None or exit_ is None:
        return None  # not a context manager: Python's with statement raises
    if isinstance(enter, types.FunctionType) and isinstance(exit_, types.FunctionType):
        return None  # traced (UserContextVariable)
    return f"context manager {cls.__qualname__} without Python __enter__/__exit__ (Python runs it)"


class EnteredExitVariable(OpaqueCallableVariable):
    """The __exit__ of a manager Python entered, on a resume function's stack: called in Python
    only (Note [Blocks: context managers]), a break for the reason its with statement was one."""

    def call_function(self, tx, args, kwargs):
        cls = type(self.value.__self__)
        reason = untraced_reason(cls)
        unimplemented(reason or f"__exit__ of {cls.__qualname__}, a manager Python entered")


def context_manager(tx, cm):
    """The traced manager BEFORE_WITH enters (Note [Blocks: context managers]), or a break."""
    from kiln.frontend.variables.user_defined import NewObjectVariable, UserDefinedObjectVariable

    if isinstance(cm, (NewObjectVariable, UserDefinedObjectVariable)) and issubclass(
        cm.python_type(), torch.overrides.TorchFunctionMode
    ):  # Note [Frames: tracing a user's torch function modes]
        from kiln.frontend.variables import function_modes

        return function_modes.entered_mode(tx, cm)
    if isinstance(cm, UserDefinedObjectVariable) and type(cm.value) in (
        torch.no_grad,
        torch.enable_grad,
    ):
        # a grad-mode manager passed in (a resume function re-entering a with block): its type
        # is guarded, and its enter/exit only set and restore the mode
        return GradModeVariable(type(cm.value) is torch.enable_grad, type(cm.value))
    if isinstance(cm, UserDefinedObjectVariable) and type(cm.value) is torch.set_grad_enabled:
        # Note [Ctx: grad-mode managers as values]
        fields = [wrap_value(tx, getattr(cm.value, f), AttrSource(cm.source, f)) for f in _FIELDS]
        if not all(f.is_python_constant() for f in fields):
            unimplemented("a torch.set_grad_enabled object whose mode is not a constant")
        mode, prev = (bool(f.as_python_constant()) for f in fields)
        var = GradModeVariable(mode, torch.set_grad_enabled)
        var.applied, var.prev = True, prev
        return var
    if isinstance(cm, UserDefinedObjectVariable) and type(cm.value) is contextlib.nullcontext:
        result = wrap_value(tx, cm.value.enter_result, AttrSource(cm.source, "enter_result"))
        return NullContextVariable(result)
    if isinstance(cm, (GradModeVariable, NullContextVariable, SuppressVariable)):
        return cm
    if getattr(cm, "traced_manager", False):  # a family's own manager (its enter/exit traced)
        return cm
    if isinstance(cm, DisableSavedHooksVariable):
        return cm
    if isinstance(cm, UserDefinedObjectVariable) and is_disable_saved_hooks(cm.value):
        return passed_disable_saved_hooks(tx, cm)  # Note [Ctx: disable_saved_tensors_hooks]
    if isinstance(cm, (autocast.AutocastVariable, optim.ProfilerRangeVariable)):
        return cm
    if isinstance(cm, UserDefinedObjectVariable) and isinstance(
        cm.value, autocast.AUTOCAST_CLASSES
    ):
        return autocast.guarded_autocast(tx, cm)
    if isinstance(cm, GeneratorContextVariable):
        return cm
    if isinstance(cm, UserDefinedObjectVariable) and isinstance(cm.value, PROFILERS):
        # (a profiler bound by `with profile() as p`: Note [Torch: profilers in a with])
        unimplemented(untraced_reason(type(cm.value)))
    if isinstance(cm, (NewObjectVariable, UserDefinedObjectVariable)):
        cls = cm.python_type()
        if issubclass(cls, _STREAM_SWAPS):
            # its __enter__ swaps sys.stdout/stderr (a module attribute kiln does not replay):
            # Python runs the with statement, the block resumes in a graph of its own
            unimplemented(untraced_reason(cls))
        enter = inspect.getattr_static(cls, "__enter__", None)
        exit_ = inspect.getattr_static(cls, "__exit__", None)
        if isinstance(enter, types.FunctionType) and isinstance(exit_, types.FunctionType):
            return UserContextVariable(cm)
        unimplemented(untraced_reason(cls) or f"with statement over a {cls.__qualname__} object")
    unimplemented(f"with statement over {cm} (context manager)")


class UserContextVariable(VariableTracker):
    """A user object whose __enter__/__exit__ are Python functions: both are inlined."""

    resumable = False

    def __init__(self, obj, **kw):
        super().__init__(**kw)
        self.obj = obj

    def enter(self, tx):
        return self.obj.call_method(tx, "__enter__", [], {})

    def exit(self, tx):
        none = ConstantVariable(None)
        return self.obj.call_method(tx, "__exit__", [none, none, none], {})

    def exit_exception(self, tx, exc):
        cls = wrap_constant_like(tx, exc.cls)
        return self.obj.call_method(tx, "__exit__", [cls, exc, ConstantVariable(None)], {})

    @property
    def stays_entered(self):
        """Note [Blocks: breaks inside a user with block]: a break inside the block leaves the
        manager entered when its object can be rebuilt there."""
        from kiln.frontend.variables.user_defined import (
            NewObjectVariable,
            UserDefinedObjectVariable,
        )

        obj = self.obj
        return isinstance(obj, NewObjectVariable) or (
            isinstance(obj, UserDefinedObjectVariable) and obj.source is not None
        )

    def load_entered(self, cg):
        """What the resume function enters: the manager, entered already."""
        entered.load_entered(cg, self.obj)

    def load_around(self, cg, temp):
        """What the instruction at a break runs inside: the manager's exit on an exception."""
        entered.load_exit_on_error(cg, self.obj, temp)


class SuppressVariable(VariableTracker):
    """`contextlib.suppress(*types)`: an exception of one of the types leaving the block is
    swallowed."""

    resumable = False

    def __init__(self, types, **kw):
        super().__init__(**kw)
        self.types = types

    def python_type(self):
        return contextlib.suppress

    def enter(self, tx):
        return ConstantVariable(None)

    def exit(self, tx):
        return ConstantVariable(None)

    def exit_exception(self, tx, exc):
        return ConstantVariable(issubclass(exc.cls, self.types))

    def reconstruct(self, cg):
        cg.load_object(contextlib.suppress, push_null=True)
        for t in self.types:
            cg.load_object(t)
        cg.extend(emit.call(len(self.types)))


def special_instance(tx, cls, args, kwargs):
    """Instances of exception classes and of contextlib's managers made while tracing, or None."""
    if issubclass(cls, BaseException):
        return make_exception(tx, cls, args, kwargs)
    if cls is contextlib.suppress and not kwargs:
        types = tuple(a.as_python_constant() for a in args)
        if not all(isinstance(t, type) and issubclass(t, BaseException) for t in types):
            unimplemented("contextlib.suppress of non-exception types")
        return SuppressVariable(types)
    if cls is contextlib._GeneratorContextManager and len(args) == 3 and not kwargs:
        fn, fargs, fkwargs = args
        fargs, fkwargs = fargs.unpack_var_sequence(tx), dict(getattr(fkwargs, "items", {}))
        _check_binds(fn, fargs, fkwargs)
        return GeneratorContextVariable(fn, fargs, fkwargs)
    return None


# --- torch.autograd.graph.disable_saved_tensors_hooks ---------------------------------------------
# Note [Ctx: disable_saved_tensors_hooks]
# `with disable_saved_tensors_hooks(msg):` (or the decorator form) makes registering saved-tensor
# hooks inside the block raise RuntimeError(msg), and entering it raises that error at once when
# hooks are registered already; it changes no op. Entering is guarded on no saved-tensor hooks
# being registered (a STATE_QUERY guard; with hooks registered the with statement is a graph
# break and Python raises) and on the message disabled before it (what its exit restores). The
# graph records the switches as eager runs them, as torch.compile does:
# `_saved_tensors_hooks_disable(msg)` on entry, and on exit `_saved_tensors_hooks_enable()` or
# `_saved_tensors_hooks_disable(prev)`; the message in force is tracked while tracing
# (`output.saved_hooks_message`), so nested blocks restore their outer one. A graph break inside
# the block leaves and re-enters it (Note [Graph breaks: with blocks]): the graph ends with the
# exit, the instruction runs in Python inside a fresh manager with the same message (a hook
# registration there raises as eagerly), and the resume function enters the manager it is passed
# (a `_GeneratorContextManager` over this function, its message a guarded constant) again.
DISABLE_SAVED_HOOKS = torch.autograd.graph.disable_saved_tensors_hooks
_HOOKS = torch._C._autograd
_UNREAD = object()
SAVED_HOOKS_SWITCHES = (_HOOKS._saved_tensors_hooks_disable, _HOOKS._saved_tensors_hooks_enable)


def saved_hooks_registered():
    """Whether saved-tensor hooks are registered now (entering the manager raises then)."""
    return _HOOKS._top_saved_tensors_default_hooks(False) is not None


@functools.lru_cache(None)
def _message_query(msg):
    """A guard query: whether the disabled-hooks message in force is `msg` (None: enabled)."""

    def saved_hooks_message_is():
        return _HOOKS._saved_tensors_hooks_get_disabled_error_message() == msg

    return saved_hooks_message_is


def _record_hooks_switch(tx, msg):
    """Record `_saved_tensors_hooks_disable(msg)` (`_enable()` for None) in the graph."""
    if msg is None:
        node = tx.output.create_node("call_function", _HOOKS._saved_tensors_hooks_enable, (), {})
    else:
        fn = _HOOKS._saved_tensors_hooks_disable
        node = tx.output.create_node("call_function", fn, (msg,), {})
    node.meta["example_value"] = None
    tx.output.saved_hooks_message = msg


def fresh_disable_saved_hooks(msg):
    """A new `disable_saved_tensors_hooks(msg)` manager for a resume function to re-enter."""
    cm = DISABLE_SAVED_HOOKS(msg)
    cm.kiln_resume_slot = True
    return cm


def is_disable_saved_hooks(value):
    """Whether a live object is a manager made by fresh_disable_saved_hooks, not yet entered.
    (One made by the user is entered in Python: entering consumes it, which a trace would
    not do.)"""
    return (
        type(value) is contextlib._GeneratorContextManager
        and getattr(value, "kiln_resume_slot", False)
        and getattr(value, "func", None) is getattr(DISABLE_SAVED_HOOKS, "__wrapped__", None)
    )


def passed_disable_saved_hooks(tx, cm):
    """A `disable_saved_tensors_hooks(msg)` object passed in (a resume function re-entering the
    block): its message read as a guarded constant."""
    args = wrap_value(tx, cm.value.args, AttrSource(cm.source, "args"))
    items = args.unpack_var_sequence(tx) if hasattr(args, "unpack_var_sequence") else None
    if not items or len(items) != 1 or not items[0].is_python_constant():
        unimplemented("a disable_saved_tensors_hooks object whose message is not a constant")
    msg = items[0].as_python_constant()
    if not isinstance(msg, str) or cm.value.kwds:
        unimplemented("a disable_saved_tensors_hooks object whose message is not a constant str")
    return DisableSavedHooksVariable(msg)


class DisableSavedHooksFnVariable(PythonValueVariable):
    """`torch.autograd.graph.disable_saved_tensors_hooks` before it is called."""

    def call_function(self, tx, args, kwargs):
        msg = args[0].as_python_constant() if len(args) == 1 and args[0].is_python_constant() else 0
        if kwargs or not isinstance(msg, str):
            unimplemented("disable_saved_tensors_hooks with an argument other than a constant str")
        return DisableSavedHooksVariable(msg)

    def reconstruct(self, cg):
        cg.load_object(self.value)


class DisableSavedHooksVariable(VariableTracker):
    """`disable_saved_tensors_hooks(msg)` (Note [Ctx: disable_saved_tensors_hooks])."""

    def __init__(self, msg, **kw):
        super().__init__(**kw)
        self.msg = msg
        self.prev = None

    def python_type(self):
        return contextlib._GeneratorContextManager

    def enter(self, tx):
        tx.output.guards.add(GuardKind.STATE_QUERY, None, (saved_hooks_registered, False))
        if saved_hooks_registered():
            unimplemented("disable_saved_tensors_hooks with saved-tensor hooks registered (raises)")
        prev = getattr(tx.output, "saved_hooks_message", _UNREAD)
        if prev is _UNREAD:  # the state the frame starts in
            prev = _HOOKS._saved_tensors_hooks_get_disabled_error_message()
            tx.output.guards.add(GuardKind.STATE_QUERY, None, (_message_query(prev), True))
        self.prev = prev
        _record_hooks_switch(tx, self.msg)
        return ConstantVariable(None)

    def exit(self, tx):
        _record_hooks_switch(tx, self.prev)
        return ConstantVariable(None)

    def call_function(self, tx, args, kwargs):
        """`@disable_saved_tensors_hooks(msg)` on a function: each call runs inside the block."""
        if len(args) != 1 or kwargs or not callable_var(args[0]):
            unimplemented("calling a disable_saved_tensors_hooks object with these arguments")
        return DisableSavedHooksFunctionVariable(args[0], self.msg)

    def reconstruct(self, cg):
        cg.load_object(DISABLE_SAVED_HOOKS, push_null=True)
        cg.extend(emit.load_const(self.msg))
        cg.extend(emit.call(1))

    def load_fresh(self, cg):
        """The manager a resume function re-enters (Note [Graph breaks: with blocks])."""
        cg.load_object(fresh_disable_saved_hooks, push_null=True)
        cg.extend(emit.load_const(self.msg))
        cg.extend(emit.call(1))


class DisableSavedHooksFunctionVariable(VariableTracker):
    """A function decorated by `disable_saved_tensors_hooks(msg)`."""

    def __init__(self, fn, msg, **kw):
        super().__init__(**kw)
        self.fn, self.msg = fn, msg

    def python_type(self):
        return types.FunctionType

    def call_function(self, tx, args, kwargs):
        cm = DisableSavedHooksVariable(self.msg)
        cm.enter(tx)
        try:
            return self.fn.call_function(tx, args, kwargs)
        finally:
            cm.exit(tx)

    def reconstruct(self, cg):
        unimplemented("a function decorated by disable_saved_tensors_hooks leaving the frame")
