"""Version-correct instruction builders for the transformed code (a stop-gap over `bytecode`).

Each builder returns a list of `bytecode.Instr`. `kiln.bytecode.emit` is meant to replace this
module; until it lands the frontend emits through here only.
"""

import sys

import bytecode as bc

PY311 = sys.version_info[:2] == (3, 11)
PY312 = sys.version_info[:2] == (3, 12)
PY313 = sys.version_info[:2] >= (3, 13)


def load_const(value):
    return [bc.Instr("LOAD_CONST", value)]


def load_fast(name):
    return [bc.Instr("LOAD_FAST", name)]


def store_fast(name):
    return [bc.Instr("STORE_FAST", name)]


def load_deref(name, *, free=False):
    return [bc.Instr("LOAD_DEREF", bc.FreeVar(name) if free else bc.CellVar(name))]


def load_global(name, push_null):
    return [bc.Instr("LOAD_GLOBAL", (push_null, name))]


def load_attr(name):
    if PY311:
        return [bc.Instr("LOAD_ATTR", name)]
    return [bc.Instr("LOAD_ATTR", (False, name))]


def binary_subscr():
    return [bc.Instr("BINARY_SUBSCR")]


def push_null():
    return [bc.Instr("PUSH_NULL")]


def call(nargs):
    """Call with the stack laid out as `load_global(..., push_null=True)` + args leaves it."""
    if PY311:
        return [bc.Instr("PRECALL", nargs), bc.Instr("CALL", nargs)]
    return [bc.Instr("CALL", nargs)]


def build_tuple(n):
    return [bc.Instr("BUILD_TUPLE", n)]


def build_list(n):
    return [bc.Instr("BUILD_LIST", n)]


def build_map(n):
    return [bc.Instr("BUILD_MAP", n)]


def unpack_sequence(n):
    return [bc.Instr("UNPACK_SEQUENCE", n)]


def pop_top():
    return [bc.Instr("POP_TOP")]


def return_value():
    return [bc.Instr("RETURN_VALUE")]


def build_slice(n):
    return [bc.Instr("BUILD_SLICE", n)]


def prologue(code):
    """The instructions a code object runs before its first line (MAKE_CELL, COPY_FREE_VARS, RESUME)."""
    out = []
    for instr in bc.Bytecode.from_code(code):
        if isinstance(instr, bc.Instr):
            out.append(instr)
            if instr.name == "RESUME":
                break
    return out


def assemble(code, instrs, *, name=None):
    """A code object like `code` (same arguments, cells, free variables) running `instrs`."""
    orig = bc.Bytecode.from_code(code)
    new = bc.Bytecode(instrs)
    for attr in (
        "argcount",
        "posonlyargcount",
        "kwonlyargcount",
        "flags",
        "first_lineno",
        "filename",
        "argnames",
        "cellvars",
        "freevars",
        "docstring",
    ):
        if hasattr(orig, attr):
            setattr(new, attr, getattr(orig, attr))
    new.name = name or orig.name
    if hasattr(orig, "qualname"):
        new.qualname = name or orig.qualname
    for instr in new:
        if isinstance(instr, bc.Instr) and instr.lineno is None:
            instr.lineno = code.co_firstlineno
    return new.to_code()


def get_iter():
    return [bc.Instr("GET_ITER")]
