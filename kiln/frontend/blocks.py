"""The translator's block stack: exceptions (raise, try/except/finally), `with`, local classes.

A mixin of InstructionTranslatorBase: the opcode handlers that open, leave and unwind blocks.

    def f(x):                          RAISE_VARARGS 1      -> ObservedException(ValueError('a'))
        try:                           (exception table)    -> unwind: stack to the entry's
            raise ValueError("a")                              depth, push the exception, jump
        except ValueError:             PUSH_EXC_INFO, CHECK_EXC_MATCH, POP_EXCEPT: traced as
            x = x + 1                  Python runs them; the graph holds x + 1, nothing else
        return x

Note [Blocks: exceptions while tracing]
An exception that traced code raises (RAISE_VARARGS, a failed CHECK_EXC_MATCH's RERAISE, a
modelled builtin, an inlined callee) is an `ObservedException` holding an ExceptionVariable.
The translator that was running the instruction unwinds with the 3.11+ exception table exactly as
CPython does: the entry covering the instruction gives the handler, the stack depth to cut back
to and whether to push the instruction's offset (`lasti`); no entry: the exception leaves the
frame, i.e. propagates out of `run_loop` into the caller's CALL, which unwinds in turn. So an
inlined callee that raises is caught by its caller's `except`, and the caller's graph goes on.
If the exception leaves the root frame, the frame raises it: a graph break at the instruction that
raised (the graph so far runs, the side effects are replayed, then Python runs the `raise` or the
call again and raises the real exception), or, where no break can be placed (inside an except or
finally handler, a RERAISE), the whole frame runs eagerly. Either way eager Python raises it.
Exceptions raised by torch ops on meta tensors (shape errors) are not modelled: they are breaks,
and a break inside a try block runs the frame eagerly, so its handler runs as in eager.

Note [Blocks: an exception on a path only compiled code takes]
Code may ask `torch.compiler.is_compiling()` (True while tracing) and take a path eager never
takes: transformers leaves `attention_mask` None "while compiling" and then indexes it. An
exception that leaves the root frame after such a question may exist only on that path, so the
break is not placed where it is raised (Python would raise it for real, with the compiled path's
values): the whole frame runs in Python, where the question is answered False, as eager does;
its callees are still compiled. torch.compile runs such a frame in Python too.

Note [Blocks: ops inside try blocks]
Code inside a try block is traced like any other code: when nothing raises while tracing, the
handler is never taken, and the graph holds the try body. The graph can still raise at run time
where eager raises for a reason tracing could not see: an op reading an integer tensor (an index
out of range), torch.linalg, checked sampling (`may_raise_at_run_time`). TorchDynamo drops the
handler then (the error leaves the compiled frame). kiln keeps it: when such an op lies in a try
block whose handler may catch its errors, the frame's entry is marked `rerun_on_error`, and an
exception leaving the compiled code before any of its effects (the graph writes nothing, its call
comes before any replayed side effect: Note [Faults: no eager rerun after the compiled code ran])
runs the whole frame again in Python, where the handler runs as in eager (fallback.eager_on_error;
a graph drawing random numbers from the default generators has their states saved before each
call and put back before the rerun, which so draws what eager draws). A graph that writes cannot
run twice: the frame is traced again (restart note NO_EAGER_RERUN) and breaks at the start of the
try block instead, as do frames whose rerun kiln cannot make (a generator, a closure compiled by
its code). A graph break inside
a try/except block cannot be placed (the handler would be lost): the frame runs eagerly
(codegen._check_handlers).
"""

import builtins
import dataclasses
import inspect
import sys
from types import ModuleType

import torch

from kiln.contracts import BreakState
from kiln.exc import Unsupported, unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.resume import origin
from kiln.frontend.variables.base import next_serial
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.ctx_managers import (
    SuppressVariable,
    WithExitVariable,
    context_manager,
)
from kiln.frontend.variables.exceptions import (
    ExceptionVariable,
    ObservedException,
    make_exception,
)
from kiln.frontend.variables.lists import ListIteratorVariable, undo_iterators
from kiln.frontend.variables.torch_queries import no_active_exception
from kiln.frontend.variables.user_defined import UserDefinedClassVariable
from kiln.symbolic import assert_ops
from kiln.symbolic import autocast_state as amp

PY311 = sys.version_info[:2] == (3, 11)


@dataclasses.dataclass(frozen=True)
class RewindPoint:
    """An earlier instruction a break inside a block may be moved to (Notes [Blocks: rewinding to
    a with statement], [Blocks: rewinding to a try block]): the break state there, and what to
    restore when moving there."""

    serial: int  # the earliest point wins
    grad_mode: bool
    autocast: tuple  # kiln.amp.snapshot() then
    iterators: tuple  # (list iterator variable, its index then)
    state: BreakState
    where: str = ""  # what the break message names as the place (else the enclosing block)


class BlockStackMixin:
    """Opcode handlers of try/except/finally, with, raise and class statements."""

    # --- the exception table ----------------------------------------------------------------
    def note_handlers(self, inst):
        """Record the cleanup of a with block a resume function's prologue entered; check the
        ops of a try block whose handler may catch their run-time errors."""
        entry = inst.exn_tab_entry
        if entry is None and self.catch_region is None:  # (most instructions: nothing to do)
            if self.is_root:
                self.try_state = None
            return
        in_with = entry is not None and any(entry.target is h for h in self.with_handlers)
        guarded = (
            entry is not None
            and not in_with
            and not self.in_generator_handler(inst)
            and not self.prologue_with_handler(entry)
        )
        if self.is_root and not in_with:  # Note [Blocks: rewinding to a try block]
            # (inside a traced with block, the try block around it, if any, stays open)
            if not guarded or self.only_reraises(entry.target):
                self.try_state = None
            elif self.try_state is None:
                self.try_state = self.break_state(resume_here=True)
                self.try_withs = len(self.with_handlers)
        elif self.is_root and self.try_state is not None:
            # a with block entered before the try block: the try statement has ended inside it
            if self.with_handlers.index(entry.target) < self.try_withs:
                self.try_state = None
        region = self.catch_region
        if region is not None:
            new = []
            for node in reversed(self.output.graph.nodes):
                if node is region:
                    break
                new.append(node)
            risky = [n for n in new if may_raise_at_run_time(n)]
            if risky and self.output.eager_rerun_ok:
                self.output.rerun_on_error = True  # Note [Blocks: ops inside try blocks]
            elif risky:
                e = Unsupported(
                    f"{risky[-1].target} inside a try block whose handler may catch its "
                    "run-time errors"
                )
                e.no_resume = self.is_root  # an inlined callee: it runs as its own frame
                raise e
        catching = self.region_catches_torch_errors(entry)
        self.catch_region = self.output.last_node() if catching else None
        if catching and self.catch_region is None:
            self.catch_region = _EMPTY

    def region_catches_torch_errors(self, entry):
        """Note [Blocks: ops inside try blocks]: whether a handler around the instruction that
        `entry` covers may catch what a graph op raises at run time (RuntimeError, IndexError,
        ValueError, their bases): the chain of handlers an exception would go through."""
        for _ in range(64):
            if entry is None:
                return False
            target = entry.target
            exit_var = next(
                (v for v in self.stack if isinstance(v, WithExitVariable) and v.handler is target),
                None,
            )
            if exit_var is not None:
                cm = exit_var.cm
                if isinstance(cm, SuppressVariable):
                    if _catches_torch_errors(cm.types):
                        return True
                elif not getattr(cm, "resumable", True):
                    return True  # a user __exit__ may return True (suppress)
            elif target.opname == "PUSH_EXC_INFO" and not self.only_reraises(target):
                key = ("catches", id(target))
                cached = self._handler_kinds.get(key)
                if cached is None:
                    types = self._except_types(target)  # (None: a bare except, an untraced
                    cached = types is None or _catches_torch_errors(types)  # with's cleanup)
                    self._handler_kinds[key] = cached
                if cached:
                    return True
            entry = target.exn_tab_entry  # where the handler sends what it does not catch
        return True

    def _except_types(self, target):
        """The classes the except clauses of a handler name, read statically; None if unknown
        (a bare except, an expression kiln does not evaluate)."""
        insts = self.instructions
        i = target.index + 1
        found = []
        while i < len(insts):
            stack = []
            while insts[i].opname != "CHECK_EXC_MATCH":
                inst = insts[i]
                name = inst.opname
                if name in ("LOAD_GLOBAL", "LOAD_NAME"):
                    value = global_value(self.f_globals, inst.argval)
                    if value is MISSING:
                        return None
                    stack.append(value)
                elif name == "LOAD_ATTR" and stack and isinstance(stack[-1], (type, ModuleType)):
                    stack.append(getattr(stack.pop(), inst.argval, None))
                elif name == "BUILD_TUPLE" and len(stack) >= inst.arg:
                    stack[len(stack) - inst.arg :] = [tuple(stack[len(stack) - inst.arg :])]
                elif name not in ("PUSH_NULL", "NOP"):
                    return None
                i += 1
            if len(stack) != 1:
                return None
            found.extend(stack[0] if isinstance(stack[0], tuple) else stack)
            jump = insts[i + 1]
            if jump.target_index is None:
                return None
            i = jump.target_index  # the next clause, or the RERAISE after the last
            if insts[i].opname == "RERAISE":
                break
        if not all(isinstance(t, type) for t in found):
            return None
        return tuple(found)

    def unwind(self, exc):
        """Note [Blocks: exceptions while tracing]: jump to the handler of the instruction that
        raised, or let the exception leave the frame (re-raised)."""
        inst = self.current_inst
        entry = inst.exn_tab_entry
        if entry is None or self.in_generator_handler(inst):
            if self.is_root:
                self.escape(exc)
            raise exc
        exc.var.caught = True  # (a traceback now exists in eager)
        del self.stack[entry.depth :]
        if entry.lasti:
            self.push(ConstantVariable(inst.offset))
        self.push(exc.var)
        self.ip = entry.target.index

    def escape(self, exc):
        """An exception leaves the root frame: a break where Python raises it again."""
        args = exc.var.args
        text = ""
        if len(args) == 1 and args[0].is_python_constant():
            text = f": {args[0].as_python_constant()}"  # what it says, as in eager's message
        e = Unsupported(
            f"Observed exception: {exc.var.cls.__name__} raised and not caught in the "
            f"compiled frame{text}"
        )
        if self.exc_info is not None or self.current_inst.opname == "RERAISE":
            e.no_resume = True  # inside a handler: the live exception cannot be rebuilt
        if self.output.asked_is_compiling:
            # Note [Blocks: an exception on a path only compiled code takes]
            e.msg += (
                " (after the trace asked torch.compiler.is_compiling(): the frame runs in Python)"
            )
            e.no_resume = True
        raise e

    def current_exception(self):
        """What sys.exc_info() would give: the innermost handled exception (or None)."""
        tx = self
        while tx is not None:
            if tx.exc_info is not None:
                return tx.exc_info
            tx = getattr(tx, "parent", None)
        return None

    def prologue_with_handler(self, entry):
        """Whether `entry` is the cleanup of a with block a resume function's prologue entered
        (its exit slot is the entry's depth - 1); it is then recorded as that block's handler."""
        target = entry.target
        i = target.index
        if not (
            target.opname == "PUSH_EXC_INFO"
            and i + 1 < len(self.instructions)
            and self.instructions[i + 1].opname == "WITH_EXCEPT_START"
        ):
            return False
        p = entry.depth - 1
        if 0 <= p < len(self.stack):
            v = self.stack[p]
            if isinstance(v, WithExitVariable) and v.handler is None and v.slot == p:
                v.handler = target
                self.with_handlers.append(target)
                return True
        return False

    def only_reraises(self, handler):
        """Whether an exception handler always re-raises (a `finally` block, a cleanup).

        Note [Translator: try/finally]
        The normal path of a try/finally is traced (Python compiles the finally body inline on
        it). If the graph raises at run time, the exception propagates as in eager, but without
        the finally body, and without the frame's replayed side effects: the state is left as
        before the call (Note [Blocks: ops inside try blocks]). A graph break inside it is
        placed: the resume function keeps the try/finally (Note [Resume: layout]).
        """
        cached = self._handler_kinds.get(id(handler))
        if cached is not None:
            return cached
        # every normal-flow path from the handler must end in RERAISE
        result = True
        todo, seen = [handler.index], set()
        while todo and result:
            i = todo.pop()
            if i in seen or i >= len(self.instructions) or len(seen) > 1000:
                result = result and i in seen
                continue
            seen.add(i)
            inst = self.instructions[i]
            name = inst.opname
            if name == "RERAISE":
                continue
            if name in ("CHECK_EXC_MATCH", "CHECK_EG_MATCH", "WITH_EXCEPT_START", "POP_EXCEPT"):
                result = False  # can catch, or leaves the handler normally
            elif name in ("RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "YIELD_VALUE"):
                result = False
            else:
                if inst.target_index is not None:
                    todo.append(inst.target_index)
                if not inst.is_unconditional_jump:
                    todo.append(i + 1)
        self._handler_kinds[id(handler)] = result
        return result

    def in_generator_handler(self, inst):
        """3.12+: the implicit handler around a generator's body (StopIteration -> error)."""
        if not (self.code.co_flags & inspect.CO_GENERATOR):
            return False
        target = inst.exn_tab_entry.target
        return target is not None and target.opname == "CALL_INTRINSIC_1"

    # --- raise and except -----------------------------------------------------------------------
    def _no_active_exception(self):
        """What a bare `raise` raises with no exception handled here nor by the caller (guarded,
        as sys.exc_info() is: Note [Torch: no active exception])."""
        if not no_active_exception():
            unimplemented("bare raise re-raising the caller's handled exception")
        self.output.guards.add(GuardKind.STATE_QUERY, None, (no_active_exception, True))
        return ExceptionVariable(RuntimeError, [ConstantVariable("No active exception to reraise")])

    def RAISE_VARARGS(self, inst):
        if inst.arg == 0:
            exc = self.current_exception()
            if exc is None:
                exc = self._no_active_exception()
            raise ObservedException(exc)
        cause = self.pop() if inst.arg == 2 else None
        exc = self.as_exception(self.pop())
        if cause is not None:
            cause = (
                None
                if cause.is_python_constant() and cause.as_python_constant() is None
                else (self.as_exception(cause))
            )
            exc.attrs["__cause__"] = cause if cause is not None else ConstantVariable(None)
            exc.attrs["__suppress_context__"] = ConstantVariable(True)
        context = self.current_exception()
        if context is not None and context is not exc:
            exc.attrs["__context__"] = context
        raise ObservedException(exc)

    def as_exception(self, v):
        """The exception a `raise v` raises: an instance, or a class called with no arguments."""
        if isinstance(v, ExceptionVariable):
            return v
        if v.is_python_constant():
            value = v.as_python_constant()
            if isinstance(value, type) and issubclass(value, BaseException):
                return make_exception(self, value, [], {})
        unimplemented(f"raise of {v}")

    def LOAD_ASSERTION_ERROR(self, inst):
        self.push(UserDefinedClassVariable(AssertionError))

    def PUSH_EXC_INFO(self, inst):
        exc = self.pop()
        prev = self.exc_info
        self.push(prev if prev is not None else ConstantVariable(None))
        self.exc_info = exc
        self.push(exc)

    def POP_EXCEPT(self, inst):
        prev = self.pop()
        self.exc_info = None if isinstance(prev, ConstantVariable) else prev

    def CHECK_EXC_MATCH(self, inst):
        cls = self.pop()
        exc = self.stack[-1]
        if not cls.is_python_constant():
            unimplemented(f"except clause over {cls}")
        types = cls.as_python_constant()
        for t in types if isinstance(types, tuple) else (types,):
            if not (isinstance(t, type) and issubclass(t, BaseException)):
                unimplemented(f"except clause over {t!r} (Python raises TypeError)")
        self.push(ConstantVariable(issubclass(exc.python_type(), types)))

    def CHECK_EG_MATCH(self, inst):
        unimplemented("except* (exception groups)")

    def RERAISE(self, inst):
        exc = self.pop()
        if not isinstance(exc, ExceptionVariable):
            unimplemented(f"RERAISE of {exc}")
        raise ObservedException(exc)

    # --- with -----------------------------------------------------------------------------------
    def BEFORE_WITH(self, inst):
        """Note [Blocks: context managers]: which managers are traced (and which break)."""
        cm = context_manager(self, self.pop())
        nxt = self.instructions[self.ip]
        exit_var = WithExitVariable(cm)
        exit_var.before_inst = inst
        exit_var.slot = len(self.stack)
        if nxt.exn_tab_entry is None:
            found = origin(self.code)
            if found is None or inst.index in found[1]:
                unimplemented("with statement without a cleanup handler")
            # a resume function's prologue (Note [Graph breaks: with blocks]): the cleanup
            # handler is found in the copied body (note_handlers)
            exit_var.handler = None
            exit_var.before_inst = None
        else:
            exit_var.handler = nxt.exn_tab_entry.target
            self.with_handlers.append(exit_var.handler)
        if self.is_root and not getattr(cm, "resumable", True):
            exit_var.rewind = self.break_state(
                resume_here=False
            )  # Note [Blocks: rewinding to a with ...]
        self.push(exit_var)
        self.push(cm.enter(self))

    # Note [Blocks: rewinding to a with statement]
    # A graph break inside the block of a traced user manager (Note [Blocks: context managers])
    # that cannot be placed there (Note [Blocks: breaks inside a user with block] says which can:
    # the manager's enter and exit are user code that must run once each) is rewound.
    # The root translator keeps the state it had at the with statement's BEFORE_WITH (stack,
    # locals, graph checkpoint, side-effect snapshot and version, iterator positions), and the
    # break is placed at the BEFORE_WITH instead: the graph is cut back to it, Python enters the
    # manager and a resume function runs the block (Note [Blocks: context managers] for
    # untraced managers). The side-effect version check of the break (codegen) refuses the
    # rewind when the block mutated an object that existed before (not undoable): the frame
    # then runs eagerly.

    # --- rewinding a break to the start of its block (root frame) ------------------------
    def break_state(self, resume_here, where=""):
        """What a break at this instruction needs, kept in case a break inside the block it
        starts is placed here (Note [Blocks: rewinding to a with statement])."""
        return RewindPoint(
            where=where,
            serial=next_serial(),
            grad_mode=torch.is_grad_enabled(),
            autocast=amp.snapshot(),
            iterators=tuple(
                (v, v.index)
                for v in [*self.stack_before, *self.locals_before.values()]
                if isinstance(v, ListIteratorVariable)
            ),
            # resume at it (a try block), or run it (BEFORE_WITH)
            state=self.break_state_here(resume_here),
        )

    def break_state_here(self, resume_here=False):
        """The BreakState of a break at the current instruction: where, and the live state
        from before it ran."""
        return BreakState(
            tx=self,
            index=self.current_inst.index,
            stack=list(self.stack_before),
            locals=self.locals_before,
            checkpoint=self.checkpoint,
            kw_names=self.kw_before,
            effects_version=self.effects_before,
            effects_snapshot=self.effects_snapshot,
            resume_here=resume_here,
        )

    def rewind(self, e, point):
        """Place the break `e` at an earlier instruction (Notes [Blocks: rewinding to a with
        statement], [Blocks: rewinding to a try block])."""
        undo_iterators()
        torch._C._set_grad_enabled(point.grad_mode)  # (the graph is cut back to it)
        amp.restore(point.autocast)
        for it, index in point.iterators:
            it.index = index
        state = point.state
        for manager in self.generator_managers:  # (entered or exited since the point: undone)
            manager.rewound_to(point.serial)
        e.break_state = state
        e.frames = [(self.code, state.index, self.instructions[state.index].lineno)]
        e.nested = []
        e.no_resume = False
        e.rewind_fallback = None  # (Note [Blocks: breaks inside a user with block])
        where = "try block" if state.resume_here else "with statement"
        where = f"the {point.where}" if point.where else f"the start of the enclosing {where}"
        e.msg = f"{e.msg} (placed at {where})"

    # Note [Blocks: rewinding to a try block]
    # A graph break inside a try block whose handler can catch (or inside its handler) cannot be
    # placed there: the handler would be lost. The root translator keeps the state it had at the
    # first instruction of the outermost such try block (like Note [Blocks: rewinding to a with
    # statement]), and the break is placed there instead: the graph is cut back to it and a
    # resume function starts at that instruction, with the whole try statement (its exception
    # table entries are copied). That resume function meets the same break, now with nothing
    # before the try block: it runs eagerly (codegen: no progress), the handler intact.

    def exit_with(self, exit_var):
        if self.with_handlers and self.with_handlers[-1] is exit_var.handler:
            self.with_handlers.pop()

    def WITH_EXCEPT_START(self, inst):
        """__exit__(type, value, traceback) of the with block an exception leaves (position 4)."""
        exc = self.stack[-1]
        exit_var = self.stack[-4]
        if not isinstance(exit_var, WithExitVariable) or not isinstance(exc, ExceptionVariable):
            unimplemented(f"WITH_EXCEPT_START over {exit_var}")
        self.push(exit_var.exit_exception(self, exc))

    # --- class statements -----------------------------------------------------------------------
    def LOAD_BUILD_CLASS(self, inst):
        from kiln.frontend.variables.classes import BuildClassVariable

        self.push(BuildClassVariable())


_EMPTY = object()  # a try region that started on an empty graph
MISSING = object()


def global_value(f_globals, name):
    """What `name` means in code with these globals (a global, else a builtin), or MISSING."""
    if name in f_globals:
        return f_globals[name]
    b = f_globals.get("__builtins__", builtins)
    return (b if isinstance(b, dict) else vars(b)).get(name, MISSING)


_TORCH_ERRORS = (RuntimeError, IndexError, ValueError, AssertionError)  # (kiln::assert_true)
# ops that raise at run time for some input values (not shapes), seen on floating inputs too
_VALUE_CHECKED = {
    "multinomial",
    "bernoulli",
    "bernoulli_",
    "poisson",
    "cholesky",
    "inverse",
    "_assert_async",
    "binomial",
}


def _catches_torch_errors(types):
    return any(issubclass(e, t) or issubclass(t, e) for t in types for e in _TORCH_ERRORS)


def may_raise_at_run_time(node):
    """Whether a graph op can raise for values tracing did not see: one reading an integer or
    bool tensor (indexing, integer division, embedding, gather...), torch.linalg, random
    sampling with checked parameters."""
    if node.op not in ("call_function", "call_method"):
        return False
    target = node.target
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    if name in _VALUE_CHECKED or "linalg" in str(getattr(target, "__module__", "")):
        return True
    if assert_ops.is_assert(target):
        return True
    for arg in node.all_input_nodes:
        value = arg.meta.get("example_value")
        if isinstance(value, torch.Tensor) and not (
            value.dtype.is_floating_point or value.dtype.is_complex
        ):
            return True
    return False
