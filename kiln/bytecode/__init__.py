"""Decode, edit and assemble code objects, one version-neutral view of Python 3.11-3.13.

    insts = decode(code)                  # [Inst]: caches dropped, EXTENDED_ARG folded
    insts[k:k] = emit.load_const(1) + emit.store_fast("x")   # or insert_before/insert_after
    code2 = encode(insts, like=code, co_name="g")            # everything else recomputed
    print(format(insts))                  # the `bytecode` log channel's text

analysis: stack states (NULL and `with` slots), live locals, stack depth. See Note [Bytecode:
version differences] in kiln/bytecode/inst.py. Imports neither torch nor the rest of kiln.
"""

from kiln.bytecode import analysis, emit
from kiln.bytecode.codec import BytecodeError, decode, encode, format_code
from kiln.bytecode.edit import (
    clone,
    first_resume,
    insert_after,
    insert_before,
    remove_unreachable,
    retarget,
)
from kiln.bytecode.inst import (
    FOR_ITER_SKIPS,
    PY311,
    PY312,
    PY312_PLUS,
    PY313,
    PY313_PLUS,
    ExceptionEntry,
    Inst,
    format,
    loads_cell,
    make_inst,
    skipped_at_loop_exit,
)

__all__ = [
    "PY311",
    "PY312",
    "PY312_PLUS",
    "PY313",
    "PY313_PLUS",
    "FOR_ITER_SKIPS",
    "BytecodeError",
    "ExceptionEntry",
    "Inst",
    "decode",
    "analysis",
    "clone",
    "emit",
    "first_resume",
    "insert_after",
    "insert_before",
    "remove_unreachable",
    "retarget",
    "skipped_at_loop_exit",
    "encode",
    "format",
    "format_code",
    "loads_cell",
    "make_inst",
]
