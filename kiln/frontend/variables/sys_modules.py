"""`sys.modules` read by name in traced code: `name in sys.modules`, `sys.modules[name]` and
`sys.modules.get(name)`, each guarded on that one name (Note [Modules: sys.modules by name])."""

import sys
import types

from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.source import GetItemSource
from kiln.frontend.variables.base import VariableTracker, wrap_value
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.exceptions import raise_observed

# Note [Modules: sys.modules by name]
# Wrapped as any other dict input, sys.modules (a thousand modules and more once torch is
# imported) made a variable per module and a guard on every name: each `cls.__module__ in
# sys.modules` (dataclasses, enum, pickle's helpers) took tens of milliseconds to trace, and any
# later import anywhere failed the guard. Library code only looks modules up by name, so the
# reads by name are traced, each guarded on its own name (the module's identity when present, its
# absence otherwise); anything else done to sys.modules (iterating, storing) is a graph break.


def is_sys_modules(value):
    """Whether `value` is the interpreter's module table."""
    return value is sys.modules


class SysModulesVariable(VariableTracker):
    """sys.modules, reached from a source; read by name only."""

    def python_type(self):
        return dict

    def call_method(self, tx, name, args, kwargs):
        limit = 2 if name == "get" else 1
        if (
            name not in ("__contains__", "__getitem__", "get")
            or kwargs
            or not 1 <= len(args) <= limit
            or not args[0].is_python_constant()
            or type(args[0].as_python_constant()) is not str
        ):
            unimplemented(f"sys.modules.{name} (only `in`, [name] and .get(name) are traced)")
        key = args[0].as_python_constant()
        module = sys.modules.get(key)
        if key not in sys.modules:
            tx.output.guards.add(GuardKind.NOT_IN, self.source, key)
            if name == "__contains__":
                return ConstantVariable(False)
            if name == "get":
                return args[1] if len(args) == 2 else ConstantVariable(None)
            raise_observed(tx, KeyError, key)
        if not isinstance(module, types.ModuleType):
            unimplemented(f"sys.modules[{key!r}] is a {type(module).__name__}, not a module")
        item = GetItemSource(self.source, key)
        tx.output.guards.add(GuardKind.ID_MATCH, item, module)
        if name == "__contains__":
            return ConstantVariable(True)
        return wrap_value(tx, module, item)

    def __repr__(self):
        return "SysModulesVariable()"
