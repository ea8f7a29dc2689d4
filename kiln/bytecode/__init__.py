"""Decode, edit and assemble code objects, one version-neutral view of Python 3.11-3.13.

See Note [Bytecode: version differences] in kiln/bytecode/inst.py.
"""

from kiln.bytecode import emit
from kiln.bytecode.codec import BytecodeError, decode, encode
from kiln.bytecode.edit import clone, first_resume, insert_after, insert_before, retarget
from kiln.bytecode.inst import (
    PY311,
    PY312,
    PY312_PLUS,
    PY313,
    PY313_PLUS,
    ExceptionEntry,
    Inst,
    format,
    make_inst,
)

__all__ = [
    "PY311",
    "PY312",
    "PY312_PLUS",
    "PY313",
    "PY313_PLUS",
    "BytecodeError",
    "ExceptionEntry",
    "Inst",
    "decode",
    "clone",
    "emit",
    "first_resume",
    "insert_after",
    "insert_before",
    "retarget",
    "encode",
    "format",
    "make_inst",
]
