"""`error_on_graph_break` in traced code: its `with` blocks, calls of functions it decorates, and
calls of functions compiled with fullgraph=True (Note [Break policy: error_on_graph_break] in
kiln/frontend/break_policy.py)."""

import inspect
import types

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend import break_policy
from kiln.frontend.source import AttrSource
from kiln.frontend.variables.base import VariableTracker, wrap_value
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.functions import UserFunctionVariable
from kiln.frontend.variables.user_defined import INSTANCE_MAKERS

_SIGNATURE = inspect.signature(break_policy.error_on_graph_break.__init__)


class BreakSettingVariable(VariableTracker):
    """An `error_on_graph_break(v)` made in the frame: its block is traced under v."""

    traced_manager = True  # (ctx_managers.context_manager takes it as it is)

    def __init__(self, value, **kw):
        super().__init__(**kw)
        self.value = value

    def python_type(self):
        return break_policy.error_on_graph_break

    def enter(self, tx):
        break_policy.push(tx.output, self.value)
        return self

    def exit(self, tx):
        break_policy.pop(tx.output)
        return ConstantVariable(None)

    def exit_exception(self, tx, exc):
        break_policy.pop(tx.output)
        return ConstantVariable(False)  # (never suppresses)

    def call_function(self, tx, args, kwargs):
        unimplemented("error_on_graph_break(...) used as a decorator inside compiled code")

    def reconstruct(self, cg):
        cg.load_object(break_policy.error_on_graph_break, push_null=True)
        cg.load_object(self.value)
        cg.extend(emit.call(1))

    load_fresh = reconstruct  # Note [Graph breaks: with blocks]: left and entered again

    def __repr__(self):
        return f"BreakSettingVariable({self.value})"


class BreakSettingCallVariable(VariableTracker):
    """A function `@error_on_graph_break(v)` decorated: a call traces it under v."""

    def __init__(self, value, **kw):
        super().__init__(**kw)
        self.value = value

    def python_type(self):
        return types.FunctionType

    def call_function(self, tx, args, kwargs):
        source = AttrSource(self.source, "__wrapped__") if self.source is not None else None
        fn = wrap_value(tx, self.value.__wrapped__, source)
        break_policy.push(tx.output, self.value._kiln_break_setting)
        try:
            return fn.call_function(tx, args, kwargs)
        finally:
            break_policy.pop(tx.output)

    def reconstruct(self, cg):
        if self.source is not None:
            self.source.reconstruct(cg)
        else:
            cg.load_object(self.value)


class FullgraphCallVariable(UserFunctionVariable):
    """The function of a wrapper kiln.compile made with fullgraph=True, called from traced code:
    a break inside it is an error, as in its own frame."""

    def call_function(self, tx, args, kwargs):
        break_policy.push(tx.output, True)
        try:
            return super().call_function(tx, args, kwargs)
        finally:
            break_policy.pop(tx.output)


def make_break_setting(tx, cls_var, args, kwargs):
    """`error_on_graph_break(<a constant bool>)` (or None: another maker)."""
    if cls_var.value is not break_policy.error_on_graph_break:
        return None
    if not all(v.is_python_constant() for v in [*args, *kwargs.values()]):
        unimplemented("error_on_graph_break with an argument that is not a constant")
    values = {k: v.as_python_constant() for k, v in kwargs.items()}
    try:
        bound = _SIGNATURE.bind(None, *[a.as_python_constant() for a in args], **values)
    except TypeError:
        unimplemented("error_on_graph_break with arguments that do not bind (Python raises)")
    value = bound.arguments["error_on_graph_break"]
    if not isinstance(value, bool):
        unimplemented(f"error_on_graph_break({value!r}): not a bool (Python raises TypeError)")
    return BreakSettingVariable(value)


INSTANCE_MAKERS.append(make_break_setting)
