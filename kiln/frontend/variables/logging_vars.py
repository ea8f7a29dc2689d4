"""Logging and warnings inside compiled code: recorded while tracing, replayed after the graph.

Note [Side effects: logging replayed after the graph]
`logger.warning(...)`, `logger.info(...)` (every level, and `logger.log`), Hugging Face's
`logger.warning_once(...)` / `info_once` (an lru_cache-wrapped Logger method), the module-level
`logging.warning(...)`... and `warnings.warn(...)` whose arguments are constants are not graph
breaks: each call is recorded as an ordered side effect (SideEffects.record_call) and the
transformed code makes the same call right after the graph, in program order with the other
recorded effects (attribute stores, list mutations, other logging calls).

Why moving the call after the graph is sound: a logging call observes no tensor data (its
arguments are constants: strings, numbers, shapes of static tensors) and the graph observes
nothing the call does (handlers write to streams and files, never to tensors). So the record
(message, level, logger) is the same, and so is the order of the records among themselves and
relative to every effect that runs in Python (each graph break replays the effects recorded
before it). Whether a level is enabled, a filter, `warning_once`'s cache and the warnings
registry are all decided by the real call at run time, as in eager.

What differs: a logging record's caller. logging's findCaller looks at the Python stack, which
is now the transformed frame of the compiled function (its name and file, another line) instead
of the line that made the call. (A warning names the frame eager's would: Note [Warnings: the
caller a warning names].) And a record is emitted after the graph's
work instead of before the tensor ops that follow it (an exception raised by the graph would
come before the message instead of after it). Calls with a tensor or other non-constant argument,
and calls inside a `try` block (the replay would be outside it), still break the graph.
"""

import functools
import itertools
import logging
import warnings

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.replayed_callers import (
    LOG_KWARGS,
    LOG_METHODS,
    log_at,
    plain_delivery,
    plain_logger_method,
    user_code,
    warn_at,
)
from kiln.frontend.variables.base import VariableTracker
from kiln.frontend.variables.constant import ConstantVariable, is_literal
from kiln.frontend.variables.lists import TupleVariable
from kiln.frontend.variables.sym import SymNodeVariable

# Logger methods replayed after the graph (the *_once ones are Hugging Face's lru_cache'd ones).
LOGGER_METHODS = frozenset(
    (
        "debug",
        "info",
        "warning",
        "warn",
        "error",
        "critical",
        "fatal",
        "log",
        "warning_once",
        "info_once",
    )
)

# Module-level functions replayed after the graph.
EFFECT_FUNCTIONS = frozenset(
    (
        warnings.warn,
        logging.debug,
        logging.info,
        logging.warning,
        logging.warn,
        logging.error,
        logging.critical,
        logging.fatal,
        logging.log,
    )
)

_serial = itertools.count()


def is_logger(value):
    return issubclass(type(value), (logging.Logger, logging.LoggerAdapter))  # (runs no hook)


_EFFECT_IDS = frozenset(id(f) for f in EFFECT_FUNCTIONS)


def is_effect_function(value):
    # (by identity: `value in a set` would run a user class's __hash__ and __eq__)
    return id(value) in _EFFECT_IDS


def replayable_argument(v):
    """A value the transformed code can load again: literals, classes, sizes (symbolic ones
    are int outputs of the graph), tuples of them."""
    if isinstance(v, SymNodeVariable):
        return True  # a symbolic size: an int output of the graph
    if isinstance(v, TupleVariable):
        return all(replayable_argument(i) for i in v.items)
    if not v.is_python_constant():
        return False
    value = v.as_python_constant()
    return is_literal(value) or isinstance(value, type)


class EffectCallVariable(VariableTracker):
    """A logging method or warnings.warn: calling it records a call replayed after the graph
    (Note [Side effects: logging replayed after the graph])."""

    def __init__(self, what, *, obj=None, name=None, fn=None, **kw):
        super().__init__(**kw)
        self.what = what
        self.obj = obj  # logger variable (a method), or None
        self.name = name
        self.fn = fn  # the function (module-level), or None

    def call_function(self, tx, args, kwargs):
        if self.obj is not None and ("exc_info" in kwargs or "stack_info" in kwargs):
            unimplemented(f"{self.what} with exc_info/stack_info (they read the live stack)")
        for a in [*args, *kwargs.values()]:
            if not replayable_argument(a):
                unimplemented(f"{self.what} with a non-constant argument {a}")
        if _inside_try(tx):
            unimplemented(f"{self.what} inside a try block (replayed outside it)")
        fn_var = self
        if self.fn is warnings.warn:
            check_warnings_call(tx, "warnings.warn")
            if "skip_file_prefixes" in kwargs:
                unimplemented("warnings.warn with skip_file_prefixes (it reads the live stack)")
            fn_var = AtCallerVariable(
                warn_at, _known_frames(tx)
            )  # Note [Warnings: the caller a...]
        else:
            _check_delivery(tx, self.obj.value if self.obj is not None else logging.root, self.what)
            replayed = self._log_at(tx, kwargs)
            if replayed is not None:
                fn_var, args = replayed[0], [*replayed[1:], *args]
        tx.output.side_effects.record_call(("call", next(_serial)), fn_var, list(args), kwargs)
        return ConstantVariable(None)

    def _log_at(self, tx, kwargs):
        """(log_at, logger, method name) for a call of Logger's own logging method, else None
        (Note [Warnings: the caller a warning names])."""
        if set(kwargs) - LOG_KWARGS:
            return None
        if self.obj is None:
            name = _MODULE_LOG_FUNCTIONS.get(id(self.fn))
            logger = ConstantVariable(None)
        else:
            name, logger = self.name, self.obj
            if not plain_logger_method(getattr(self.obj, "value", None), name):
                return None
        if name is None:
            return None
        return AtCallerVariable(log_at, _known_frames(tx)), logger, ConstantVariable(name)

    def reconstruct(self, cg):
        if self.obj is not None:
            cg.reconstruct(self.obj)
            cg.extend(emit.load_attr(self.name))
        elif self.source is not None:
            self.source.reconstruct(cg)
        else:
            cg.load_object(self.fn)

    def __repr__(self):
        return f"EffectCallVariable({self.what})"


def _check_delivery(tx, logger, what):
    """Break unless the records reach only plain handlers; guard that they still do."""
    if not plain_delivery(logger):
        unimplemented(
            f"{what} to a handler, filter or record factory of the program's own (it could "
            "change what the frame reads next: Python runs the call)"
        )

    def records_reach_plain_handlers():
        return plain_delivery(logger)

    tx.output.guards.add(GuardKind.STATE_QUERY, None, (records_reach_plain_handlers, True))


class AtCallerVariable(VariableTracker):
    """replayed_callers.warn_at or log_at over the traced frames at the call."""

    def __init__(self, fn, known, **kw):
        super().__init__(**kw)
        self.fn, self.known = fn, known

    def reconstruct(self, cg):
        cg.load_object(functools.partial(self.fn, self.known))


# the module-level logging functions log_at replays (on the root logger), by identity
_MODULE_LOG_FUNCTIONS = {
    id(getattr(logging, name)): name for name in LOG_METHODS if hasattr(logging, name)
}


def _known_frames(tx):
    """((file, line, globals), ...) of the traced frames at a call, the innermost first."""
    known = []
    t = tx
    while t is not None:
        inst = t.current_inst
        lineno = inst.lineno if inst is not None and inst.lineno else t.code.co_firstlineno
        known.append((t.code.co_filename, lineno, t.f_globals, user_code(t.code).co_name))
        t = getattr(t, "parent", None)
    return tuple(known)


def _inside_try(tx):
    """Whether the call is inside a try block (of this frame or a caller) whose handler could
    catch what the call raises (`warnings.warn` under an "error" filter)."""
    t = tx
    while t is not None:
        inst = t.current_inst
        entry = getattr(inst, "exn_tab_entry", None)
        if entry is not None and not any(
            entry.target is h for h in getattr(t, "with_handlers", ())
        ):
            try:
                if t.in_generator_handler(inst):
                    entry = None
                elif entry.target.opname != "PUSH_EXC_INFO" or t.only_reraises(entry.target):
                    entry = None
            except AttributeError:
                pass  # (no way to tell: assume a handler)
            if entry is not None:
                return True
        t = getattr(t, "parent", None)
    return False


def inside_catch_warnings(tx):
    """Whether tracing is inside a warnings.catch_warnings block (of this frame or a caller)."""
    t = tx
    while t is not None:
        for v in t.stack:  # (a with block's __exit__ stays on the stack while the block runs)
            if getattr(getattr(v, "cm", None), "holds_warnings_state", False):
                return True
        t = getattr(t, "parent", None)
    return False


def check_warnings_call(tx, what):
    """A call that reads or writes the warnings state: a break inside a catch_warnings block
    (Note [Warnings: catch_warnings blocks])."""
    if inside_catch_warnings(tx):
        unimplemented(f"{what} inside a warnings.catch_warnings block (Python runs the block)")


def logger_method(obj_var, name):
    """`logger.<name>` of a traced Logger/LoggerAdapter, or None when it is not replayed."""
    if name not in LOGGER_METHODS or not hasattr(type(obj_var.value), name):
        return None
    if name in obj_var.value.__dict__:
        return None  # an instance attribute shadows the method
    return EffectCallVariable(f"logger.{name}", obj=obj_var, name=name)
