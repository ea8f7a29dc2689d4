"""`@contextlib.contextmanager` managers while tracing: the generator run to its yield on enter and
on to its end on exit, in a with statement or by `__enter__()`/`__exit__()` calls, and rebuilt
after it exited (Note [Blocks: context managers])."""

import contextlib
import inspect
import types

from kiln.bytecode import emit
from kiln.exc import RestartTrace, unimplemented
from kiln.frontend.variables.base import VariableTracker, next_serial
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.exceptions import ExceptionVariable, ObservedException
from kiln.frontend.variables.functions import UserFunctionVariable, bind_args


class _Yielded(Exception):
    """A suspendable generator translator reached a yield."""

    def __init__(self, value):
        super().__init__()
        self.value = value


class GeneratorContextVariable(VariableTracker):
    """`@contextlib.contextmanager` called while tracing: the generator runs to its yield on
    enter and on from there on exit (Note [Blocks: context managers])."""

    resumable = False
    keeps_identity = True  # rebuilt once per transformed code (the local and `ctx.__enter__`)

    def __init__(self, fn, args, kwargs, **kw):
        super().__init__(**kw)
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.gen = None
        self.finished = False  # exited: its generator ran to its end
        self.entered_serial = self.finished_serial = None  # (next_serial() when it happened)
        self.called_enter = None  # RewindPoint of an explicit `cm.__enter__()` call

    def python_type(self):
        return contextlib._GeneratorContextManager

    @property
    def open_by_call(self):
        """Entered by an explicit `__enter__()` call and not exited (Note [Ctx: __enter__ and
        __exit__ called on a contextmanager])."""
        return self.called_enter is not None and self.gen is not None and not self.finished

    def call_method(self, tx, name, args, kwargs):
        """Note [Ctx: __enter__ and __exit__ called on a contextmanager]."""
        if (
            name == "__enter__"
            and not args
            and not kwargs
            and getattr(tx, "is_root", False)
            and _enter_call_key(tx, tx.current_inst.index) not in _restart_notes(tx)
        ):
            self.called_enter = tx.break_state(resume_here=False, where="__enter__ call")
            return self.enter(tx)
        if name == "__exit__" and len(args) == 3 and not kwargs and self.called_enter is not None:
            typ, exc, _ = args
            nones = all(a.is_python_constant() and a.as_python_constant() is None for a in args)
            thrown = (
                isinstance(exc, ExceptionVariable)
                and typ.is_python_constant()
                and typ.as_python_constant() is exc.cls
            )
            if not nones and not thrown:
                unimplemented("__exit__ of a contextmanager with these arguments")
            if self.finished:
                return ConstantVariable(False)  # (its generator has ended: eager's returns False)
            return self.exit(tx) if nones else self.exit_exception(tx, exc)
        return super().call_method(tx, name, args, kwargs)

    def rewound_to(self, serial):
        """Its state at an earlier point of the trace, a break moved there (Notes [Blocks:
        rewinding to a with statement], [Ctx: a finished contextmanager rebuilt])."""
        if self.entered_serial is not None and self.entered_serial > serial:
            self.gen, self.finished = None, False  # not entered yet there
        elif self.finished_serial is not None and self.finished_serial > serial:
            self.finished = False  # entered, not exited there: it cannot be rebuilt

    def _finish(self):
        self.finished, self.finished_serial = True, next_serial()

    def enter(self, tx):
        from kiln.frontend.translator import InliningTranslator

        fn_var = self.fn
        if type(fn_var).__name__ == "NestedUserFunctionVariable":
            # a generator function made in the frame: its code over the cells it closes over
            code = fn_var.code
            cells = tuple(types.CellType() for _ in code.co_freevars) or None
            fn = types.FunctionType(code, fn_var.globals, code.co_name, None, cells)
            if self.gen is not None:
                unimplemented(f"contextmanager {fn.__qualname__} entered twice")
            local_vars = bind_args(
                tx, fn, self.args, self.kwargs, None, fn_var.defaults, fn_var.kwdefaults
            )
            closure = dict(fn_var.closure)
        elif not isinstance(fn_var, UserFunctionVariable) or type(fn_var) is not (
            UserFunctionVariable
        ):
            unimplemented(f"contextmanager over {fn_var}")
        else:
            fn = fn_var.fn
            if self.gen is not None:
                unimplemented(f"contextmanager {fn.__qualname__} entered twice")
            local_vars = bind_args(tx, fn, self.args, self.kwargs, fn_var.source)
            closure = {
                name: (cell, fn_var.source, i)  # as inline_call reads them
                for i, (name, cell) in enumerate(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
            }
        self.gen = InliningTranslator(tx, fn, fn.__code__, local_vars, closure)
        self.gen.suspendable = True
        self.entered_serial = next_serial()
        root = tx
        while getattr(root, "parent", None) is not None:
            root = root.parent
        root.generator_managers.append(self)
        value = self._resume(None)
        if value is None:
            unimplemented(f"contextmanager {fn.__qualname__} did not yield (RuntimeError)")
        return value

    def _resume(self, exc):
        """Run the generator on to its next yield (its value) or its end (None); `exc` is thrown
        in at the yield."""
        gen = self.gen
        try:
            if exc is not None:
                gen.unwind(exc)
            elif gen.current_inst is not None and gen.current_inst.opname == "YIELD_VALUE":
                gen.push(ConstantVariable(None))
            gen.run_loop()
        except _Yielded as y:
            return y.value
        return None

    def reconstruct(self, cg):
        """A new manager over the same generator function and arguments: before it is entered
        (a break placed at its with statement, Note [Blocks: rewinding to a with statement]), or
        after it exited (Note [Ctx: a finished contextmanager rebuilt])."""
        if self.finished:
            if not _is_generator_function(self.fn):
                unimplemented(f"rebuilding a finished contextmanager over {self.fn}")
            cg.load_object(finished_generator_manager, push_null=True)
        elif self.gen is not None:
            unimplemented("rebuilding a contextmanager that was entered")
        else:
            cg.load_object(contextlib._GeneratorContextManager, push_null=True)
        cg.reconstruct(self.fn)
        for a in self.args:
            cg.reconstruct(a)
        cg.extend(emit.build_tuple(len(self.args)))
        for k, v in self.kwargs.items():
            cg.extend(emit.load_const(k))
            cg.reconstruct(v)
        cg.extend(emit.build_map(len(self.kwargs)))
        cg.extend(emit.call(3))

    def exit(self, tx):
        try:
            if self._resume(None) is not None:
                unimplemented("contextmanager generator yielded twice (RuntimeError)")
        except ObservedException:
            self._finish()  # (the generator ended by raising)
            raise
        self._finish()
        return ConstantVariable(False)

    def exit_exception(self, tx, exc):
        try:
            if self._resume(ObservedException(exc)) is not None:
                unimplemented("contextmanager generator yielded twice (RuntimeError)")
        except ObservedException as raised:
            self._finish()  # (the generator ended by raising)
            if raised.var is exc:
                return ConstantVariable(False)  # the generator let it through
            raise
        self._finish()
        return ConstantVariable(True)  # caught inside the generator: suppressed


# Note [Ctx: __enter__ and __exit__ called on a contextmanager]
# `cm = ctx(x); y = cm.__enter__(); ...; cm.__exit__(None, None, None)` in the root frame traces
# the generator as a with statement would: to its yield on the call of __enter__, on to its end on
# __exit__ (with an exception object of the given type: thrown in at the yield). While such a
# manager is entered, no break can be placed after the __enter__ call (its real generator cannot
# be made to stand at its yield without running its code again): like a break inside a with
# block, it is moved back to the __enter__ call (the RewindPoint kept in `called_enter`), where
# the manager was not entered; Python then makes that call and everything after it (a resume
# function). A frame that returns with such a manager still entered is the same break: eager's
# generator would run its cleanup when it is freed, which the traced one cannot. Elsewhere (an
# inlined function, no RewindPoint to go back to) the call stays a break, Python runs it.


# A break moved back to the call must not have to undo side effects made after it (the
# generator's own, or the block's, on objects that existed before: break_codegen refuses such a
# move and the whole frame would run in Python): then the frame is traced again with that call a
# break where it is (leave_enter_call_to_python), as if it were not traced at all.


def _restart_notes(tx):
    return tx.output.__dict__.get("restart_notes", ())


def _enter_call_key(tx, index):
    return ("__enter__ call left to Python", tx.code, index)


def leave_enter_call_to_python(tx, point):
    """Trace the frame again with the __enter__ call at `point` a break, when a break moved
    back to it would have to undo side effects (Note [Ctx: __enter__ and __exit__ called on a
    contextmanager])."""
    notes = tx.output.__dict__.get("restart_notes")
    key = _enter_call_key(tx, point.state.index)
    if tx.output.side_effects.version == point.state.effects_version or notes is None:
        return
    if key not in notes:
        notes.add(key)
        raise RestartTrace("a break moved back to an __enter__ call would undo side effects")


# Note [Ctx: a finished contextmanager rebuilt]
# A @contextmanager object made in the frame and kept in a local (`cm = ctx(x)`, `with cm:`) is
# still live after its with statement: a graph break or a return there must rebuild it. Its
# generator has run to its end, and eager's object has dropped `func`/`args`/`kwds` (its
# __enter__ deletes them). The rebuilt object is the same: a manager over the same generator
# function and arguments whose generator is closed before it ever started (no line of the
# user's generator runs: closing a generator that has not started only marks it finished), the
# three attributes deleted. Using it again behaves as eager's: __exit__ finds the generator
# finished, a second __enter__ raises AttributeError. Before, such a break had no resume (the
# whole frame ran in Python). A generator function is required: calling anything else would run
# user code at the break. A break moved to an earlier instruction (Notes [Blocks: rewinding to a
# with statement], [Blocks: rewinding to a try block]) rebuilds the manager as it was there: the
# root translator keeps the managers entered while tracing, and `rewound_to` compares when each
# was entered and exited with the point's serial (not entered there: a fresh manager; entered
# and not exited: not rebuildable, no resume).


def finished_generator_manager(func, args, kwds):
    """A contextmanager object after its with statement (Note [Ctx: a finished contextmanager
    rebuilt])."""
    cm = contextlib._GeneratorContextManager(func, args, kwds)
    cm.gen.close()
    del cm.args, cm.kwds, cm.func
    return cm


def _is_generator_function(fn_var):
    """Whether the traced function of a contextmanager is a plain generator function."""
    code = getattr(fn_var, "code", None) or getattr(getattr(fn_var, "fn", None), "__code__", None)
    flags = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
    return code is not None and code.co_flags & flags == inspect.CO_GENERATOR


def _check_binds(fn_var, args, kwargs):
    """Calling the generator function (in `_GeneratorContextManager.__init__`) raises TypeError
    when the arguments do not bind: a graph break, so that Python raises it."""
    fn = getattr(fn_var, "fn", None)
    if fn is None:
        return
    names = [k.as_python_constant() if hasattr(k, "as_python_constant") else k for k in kwargs]
    try:
        inspect.signature(fn).bind(*range(len(args)), **dict.fromkeys(names))
    except TypeError:
        unimplemented(f"contextmanager {fn.__qualname__} called with arguments that do not bind")
    except ValueError:  # no signature
        unimplemented(f"contextmanager over {fn!r}")
