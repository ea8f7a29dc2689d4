"""torch's `compile(fn)` / `kiln.compile(fn)` called inside a compiled frame: the function traced
in the frame's graph.

Note [Compile: a compile call inside a compiled frame]
`kiln.compile(gn, backend="eager")(x)` in traced code makes a compiled wrapper of `gn` and calls
it. Calling the wrapper runs `gn` (compiled or not, its results are gn's), so kiln traces `gn`
where the wrapper is called, into the enclosing graph (as torch does: the inner settings do not
start another compilation). The call's settings must be constants (or values with a source), and
are checked while tracing by compiling a placeholder function with them: settings the call
would reject (an unknown backend, `fullgraph=1`) are a graph break, and the call then raises in
Python as eagerly. A wrapper that outlives the frame is made again by the transformed code,
`compile(gn, **settings)`, the object eager code gets. Recognised: torch's `compile` (by its module and
name: kiln never uses it), kiln.compile and functions marked `_kiln_traced_as = "compile"` (the
conformance shim's stand-in).
Not handled (graph breaks): the decorator form `compile(backend=...)` without a function, and a
module (its compiled form is an OptimizedModule object).
"""

import types

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.markers import kiln_marker
from kiln.frontend.variables.base import VariableTracker

_SETTINGS = ("backend", "fullgraph", "dynamic", "mode", "options", "disable")
_FUNCTION_TYPES = (types.FunctionType, types.MethodType, types.BuiltinFunctionType)


def is_compile_entry(value):
    """Whether calling `value` compiles a function: torch's compile, kiln.compile (marked)."""
    if type(value) is types.FunctionType:  # (read nothing from other objects: their hooks)
        return (value.__module__, value.__qualname__) == ("torch", "compile") or (
            kiln_marker(value, "_kiln_traced_as") == "compile"
        )
    return kiln_marker(value, "_kiln_traced_as") == "compile"


def _placeholder():
    """What the settings of a traced compile call are checked on."""


class CompileEntryVariable(VariableTracker):
    """torch's compile / kiln.compile reached in traced code (Note [Compile: a compile call ...])."""

    def __init__(self, value, **kw):
        super().__init__(**kw)
        self.value = value

    def python_type(self):
        return type(self.value)

    def call_function(self, tx, args, kwargs):
        name = getattr(self.value, "__qualname__", "compile")
        if len(args) != 1 or set(kwargs) - set(_SETTINGS):
            unimplemented(f"{name}(...) in compiled code without one function to compile")
        fn = args[0]
        try:
            is_function = issubclass(fn.python_type(), _FUNCTION_TYPES)
        except Exception:
            is_function = False
        if not is_function:
            unimplemented(f"{name}(...) in compiled code of {fn} (only functions are traced)")
        settings = {}
        for key, var in kwargs.items():
            if var.is_python_constant():
                settings[key] = var.as_python_constant()
            elif var.source is None:
                unimplemented(f"{name}(...) in compiled code with a {key}= made in the frame")
            else:
                settings[key] = var.source  # (a backend object from outside: not checked)
        try:
            self.value(_placeholder, **{k: v for k, v in settings.items() if _constant(v)})
        except Exception as e:
            unimplemented(f"{name}(...) in compiled code raises {type(e).__name__}: {e}")
        return CompiledFunctionVariable(self, fn, dict(kwargs))

    def reconstruct(self, cg):
        cg.load_object(self.value)  # (one reached from a source is pinned by an ID_MATCH guard)

    def __repr__(self):
        return f"CompileEntryVariable({getattr(self.value, '__module__', '')}.compile)"


def _constant(v):
    return not hasattr(v, "reconstruct")  # (a source stands for a value read at run time)


class CompiledFunctionVariable(VariableTracker):
    """What a compile call in traced code gave back: calling it traces the function."""

    def __init__(self, entry, fn, settings, **kw):
        super().__init__(**kw)
        self.entry, self.fn, self.settings = entry, fn, settings

    def python_type(self):
        return types.FunctionType

    def call_function(self, tx, args, kwargs):
        return self.fn.call_function(tx, args, kwargs)

    def var_getattr(self, tx, name):
        unimplemented(f"attribute {name!r} of a function compiled in the frame")

    def reconstruct(self, cg):
        """compile(fn, **settings) again: the wrapper eager code would hold."""
        cg.load_object(self.entry.value, push_null=True)
        cg.reconstruct(self.fn)
        for var in self.settings.values():
            cg.reconstruct(var)
        n = 1 + len(self.settings)
        cg.extend(emit.call_kw(n, tuple(self.settings)) if self.settings else emit.call(n))

    def __repr__(self):
        return f"CompiledFunctionVariable({self.fn})"


__all__ = ["CompileEntryVariable", "CompiledFunctionVariable", "is_compile_entry"]
