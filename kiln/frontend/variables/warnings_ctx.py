"""`with warnings.catch_warnings(...):` made in the frame: a block that leaves no trace.

Note [Warnings: catch_warnings blocks]
`warnings.catch_warnings(record=..., action=..., ...)` saves the warnings module's filters and
showwarning on entry and puts them back on exit: a block that issues no warning from Python and
changes no filter leaves the warnings state as it found it. Such a block is traced as a context
manager whose enter and exit do nothing: the graph holds the block's ops, and the module's
filters are never touched (torch.compile's CatchWarningsCtxManagerVariable does the same).

What would make the block observable is a break, so that Python runs the with statement:
- `warnings.warn(...)` in the block (replayed after the graph it would be outside the block) and
  any other function of the warnings module (simplefilter, filterwarnings, resetwarnings...:
  they write the state the block restores), in this frame or a function it calls;
- reading the list `record=True` returns (`with catch_warnings(record=True) as w: ... len(w)`);
- the object leaving the frame once entered (its `_entered` flag is Python's), entering it twice
  (Python raises RuntimeError), arguments that are not constants or do not bind.
What differs: a warning a kernel of the graph issues at run time (a C++ TORCH_WARN) is not
caught by the block, as under torch.compile.
"""

import inspect
import warnings

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.variables.base import VariableTracker
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.user_defined import INSTANCE_MAKERS

_SIGNATURE = inspect.signature(warnings.catch_warnings.__init__)


class CatchWarningsVariable(VariableTracker):
    """A `warnings.catch_warnings(...)` made in the frame (Note [Warnings: catch_warnings ...])."""

    traced_manager = True  # (ctx_managers.context_manager takes it as it is)
    resumable = False  # a break in the block rewinds to the with statement: Python runs it
    holds_warnings_state = True  # (logging_vars.inside_catch_warnings looks for it)

    def __init__(self, kwargs, **kw):
        super().__init__(**kw)
        self.kwargs = kwargs  # name -> constant value, as passed
        self.entered = False
        self.left = False  # entered and exited (a rewind to its with statement finds it entered)

    def python_type(self):
        return warnings.catch_warnings

    def enter(self, tx):
        if self.entered:
            unimplemented("entering a warnings.catch_warnings twice (Python raises)")
        self.entered = True
        if self.kwargs.get("record"):
            return RecordedWarningsVariable()
        return ConstantVariable(None)

    def exit(self, tx):
        self.left = True
        return ConstantVariable(None)

    def exit_exception(self, tx, exc):
        self.left = True
        return ConstantVariable(False)  # (catch_warnings never suppresses)

    def reconstruct(self, cg):
        if self.left:
            unimplemented("a warnings.catch_warnings entered in the frame leaving it")
        cg.load_object(warnings.catch_warnings, push_null=True)
        for value in self.kwargs.values():
            cg.load_object(value)
        if self.kwargs:
            cg.extend(emit.call_kw(len(self.kwargs), tuple(self.kwargs)))
        else:
            cg.extend(emit.call(0))

    def __repr__(self):
        return f"CatchWarningsVariable({self.kwargs})"


class RecordedWarningsVariable(VariableTracker):
    """The list `catch_warnings(record=True)` returns: any use of it is a break (the graph's
    kernels may append to it at run time)."""

    def _refuse(self, *args, **kwargs):
        unimplemented(
            "the list of warnings.catch_warnings(record=True) used in the compiled frame "
            "(Python records into it)"
        )

    var_getattr = call_method = call_function = reconstruct = _refuse
    unpack_var_sequence = _refuse

    def python_type(self):
        return list


def make_catch_warnings(tx, cls_var, args, kwargs):
    """`warnings.catch_warnings(**constants)` (or None: another maker)."""
    if cls_var.value is not warnings.catch_warnings:
        return None
    if not all(v.is_python_constant() for v in [*args, *kwargs.values()]):
        unimplemented("warnings.catch_warnings with an argument that is not a constant")
    values = {k: v.as_python_constant() for k, v in kwargs.items()}
    try:
        _SIGNATURE.bind(None, *[a.as_python_constant() for a in args], **values)
    except TypeError:
        unimplemented("warnings.catch_warnings with arguments that do not bind (Python raises)")
    return CatchWarningsVariable(values)


INSTANCE_MAKERS.append(make_catch_warnings)
