"""kiln.export(fn, args, ...): whole-program capture; kiln.save / kiln.load; the FX text format.

`kiln.export` is this package and is callable: `kiln.export(model, args)` runs
`kiln.export.program.export`, and `kiln.export.Dim`, `kiln.export.ExportedProgram` are here too.
"""

import sys
import types

from kiln.export.program import Dim, ExportedProgram, ExportError, InputError, export
from kiln.export.serialize import FORMAT_VERSION, LoadError, load, save


class _CallableModule(types.ModuleType):
    def __call__(self, fn, args, kwargs=None, dynamic_shapes=None):
        """kiln.export(fn_or_module, args, kwargs=None, dynamic_shapes=None)."""
        return export(fn, args, kwargs, dynamic_shapes)


sys.modules[__name__].__class__ = _CallableModule

__all__ = [
    "Dim",
    "ExportError",
    "ExportedProgram",
    "FORMAT_VERSION",
    "InputError",
    "LoadError",
    "export",
    "load",
    "save",
]
