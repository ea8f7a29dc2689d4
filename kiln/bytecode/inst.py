"""The version-neutral instruction: Inst, ExceptionEntry, opcode tables and the printer."""

from __future__ import annotations

import dataclasses
import dis
import sys
from typing import Any

PY311 = sys.version_info[:2] == (3, 11)
PY312 = sys.version_info[:2] == (3, 12)
PY313 = sys.version_info[:2] == (3, 13)
PY312_PLUS = sys.version_info >= (3, 12)
PY313_PLUS = sys.version_info >= (3, 13)

if sys.version_info < (3, 11) or sys.version_info >= (3, 14):
    raise ImportError(f"kiln.bytecode supports Python 3.11-3.13, not {sys.version.split()[0]}")

# Note [Bytecode: version differences]
#
# What the rest of kiln must know about each version; everything else is hidden by decode/encode
# and by the builders in kiln.bytecode.emit.
#
# | topic                  | 3.11                          | 3.12                           | 3.13                               |
# | ---------------------- | ----------------------------- | ------------------------------ | ---------------------------------- |
# | call sequence          | PRECALL n; CALL n             | CALL n                         | CALL n                             |
# | call stack layout      | NULL|meth, callable|self, args | same as 3.11                  | callable, NULL|self, args          |
# | keyword call           | KW_NAMES c; PRECALL; CALL     | KW_NAMES c; CALL               | LOAD_CONST names; CALL_KW n        |
# | method load            | LOAD_METHOD name              | LOAD_ATTR (name<<1)|1          | LOAD_ATTR (name<<1)|1              |
# | LOAD_GLOBAL            | (name<<1)|push_null, NULL first | same                         | NULL pushed after the global       |
# | LOAD_ATTR              | plain namei                   | (namei<<1)|method bit          | same as 3.12                       |
# | super().attr           | LOAD_GLOBAL super; ... CALL   | LOAD_SUPER_ATTR (bits 0, 1)    | same as 3.12                       |
# | conditional jumps      | POP_JUMP_{FORWARD,BACKWARD}_IF_* | POP_JUMP_IF_* forward only  | POP_JUMP_IF_* forward only, needs an exact bool (TO_BOOL) |
# | COMPARE_OP arg         | cmp index                     | (cmp<<4)|cache mask            | (cmp<<5)|16 if result is bool'd    |
# | return                 | RETURN_VALUE                  | + RETURN_CONST c               | same as 3.12                       |
# | loops                  | FOR_ITER exits past the loop  | FOR_ITER targets END_FOR and, exhausted, skips it (the target must stay END_FOR) | same; skips END_FOR + POP_TOP |
# | slices                 | BUILD_SLICE; BINARY_SUBSCR    | + BINARY_SLICE / STORE_SLICE   | same as 3.12                       |
# | functions              | MAKE_FUNCTION flags           | same as 3.11                   | MAKE_FUNCTION; SET_FUNCTION_ATTRIBUTE flag (one per flag) |
# | closures               | LOAD_CLOSURE cell             | LOAD_CLOSURE cell              | LOAD_FAST cell (LOAD_CLOSURE is a pseudo-op) |
# | f-strings              | FORMAT_VALUE flags            | FORMAT_VALUE flags             | CONVERT_VALUE; FORMAT_SIMPLE / FORMAT_WITH_SPEC |
# | locals                 | LOAD_FAST                     | + LOAD_FAST_CHECK, LOAD_FAST_AND_CLEAR (comprehensions are inlined) | + LOAD_FAST_LOAD_FAST, STORE_FAST_LOAD_FAST, STORE_FAST_STORE_FAST |
# | truth tests            | implicit in POP_JUMP_IF_*     | implicit                       | explicit TO_BOOL                   |
# | intrinsics             | PRINT_EXPR, ... opcodes       | CALL_INTRINSIC_1/2             | same as 3.12                       |
#
# decode() exposes every instruction as the running Python spells it (3.13 superinstructions stay
# superinstructions: their argval is a tuple of two local names). All jumps carry `target` (an Inst);
# encode() picks the jump direction itself (JUMP_FORWARD <-> JUMP_BACKWARD, 3.11 POP_JUMP_FORWARD_IF_*
# <-> POP_JUMP_BACKWARD_IF_*; on 3.12+ a backward conditional jump becomes an inverted forward jump
# over a JUMP_BACKWARD), so code generators may write any jump name to any target.

CACHE_OPS = frozenset({"CACHE", "EXTENDED_ARG"})
JUMP_OPNAMES = frozenset(dis.opname[o] for o in dis.hasjrel + dis.hasjabs)
UNCONDITIONAL_JUMPS = frozenset(
    {"JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP", "JUMP_NO_INTERRUPT"}
)
RETURN_OPNAMES = frozenset({"RETURN_VALUE", "RETURN_CONST"})
RAISE_OPNAMES = frozenset({"RAISE_VARARGS", "RERAISE"})
# Instructions after which control never falls through to the next one.
TERMINATORS = UNCONDITIONAL_JUMPS | RETURN_OPNAMES | RAISE_OPNAMES
HASCONST = frozenset(dis.opname[o] for o in dis.hasconst)
HASNAME = frozenset(dis.opname[o] for o in dis.hasname)
HASLOCAL = frozenset(dis.opname[o] for o in dis.haslocal)
HASFREE = frozenset(dis.opname[o] for o in dis.hasfree)
HASCOMPARE = frozenset(dis.opname[o] for o in dis.hascompare)
if PY312_PLUS:
    HASARG = frozenset(dis.opname[o] for o in dis.hasarg)
else:
    HASARG = frozenset(n for n, o in dis.opmap.items() if o >= dis.HAVE_ARGUMENT)


@dataclasses.dataclass(eq=False)
class ExceptionEntry:
    """One exception-table entry: instructions start..end (inclusive) go to target at depth."""

    start: Inst
    end: Inst
    target: Inst
    depth: int
    lasti: bool

    def __repr__(self):
        return (
            f"ExceptionEntry({_short(self.start)}..{_short(self.end)} -> {_short(self.target)}, "
            f"depth={self.depth}, lasti={self.lasti})"
        )


@dataclasses.dataclass(eq=False)
class Inst:
    """One instruction (cache entries dropped, EXTENDED_ARG folded); jumps point at Insts."""

    opname: str
    arg: int | None = None  # the raw oparg (flag bits of LOAD_GLOBAL/LOAD_ATTR/... are read here)
    argval: Any = None  # decoded: const value, name, local name, compare-op string, target offset
    argrepr: str = ""
    offset: int | None = None  # byte offset in the decoded code; None for new instructions
    lineno: int | None = None
    positions: dis.Positions | None = None
    target: Inst | None = None  # the instruction a jump goes to
    exn_tab_entry: ExceptionEntry | None = None  # the exception-table entry covering this one

    @property
    def opcode(self):
        return dis.opmap[self.opname]

    @property
    def is_jump(self):
        return self.opname in JUMP_OPNAMES

    @property
    def is_unconditional_jump(self):
        return self.opname in UNCONDITIONAL_JUMPS

    @property
    def is_return(self):
        return self.opname in RETURN_OPNAMES

    @property
    def is_terminator(self):
        """Control never falls through to the next instruction."""
        return self.opname in TERMINATORS

    @property
    def push_null(self):
        """LOAD_GLOBAL (3.11+) / LOAD_ATTR (3.12+): whether the NULL/self bit is set."""
        return bool(self.arg is not None and self.arg & 1)

    def copy(self, **changes):
        """A shallow copy (same target / exception entry objects) with fields replaced."""
        return dataclasses.replace(self, **changes)

    def __repr__(self):
        s = f"Inst({self.opname}"
        if self.target is not None:
            s += f" -> {_short(self.target)}"
        elif self.opname in HASARG:
            s += f" {self.argrepr or self.argval!r}"
        if self.offset is not None:
            s += f" @{self.offset}"
        return s + ")"


def _short(inst):
    where = f"@{inst.offset}" if inst.offset is not None else f"#{id(inst) & 0xFFFF:x}"
    return f"{inst.opname}{where}"


# How many instructions at its target an exhausted FOR_ITER jumps over: 3.12 END_FOR, 3.13
# END_FOR and the POP_TOP after it (Note [Bytecode: version differences]).
FOR_ITER_SKIPS = 2 if PY313_PLUS else 1 if PY312_PLUS else 0


def skipped_at_loop_exit(insts, n) -> bool:
    """Whether insts[n] is one an exhausted FOR_ITER jumps over (3.12+): it never runs after a
    loop ends, so nothing may resume there (the loop's exit is FOR_ITER_SKIPS further on)."""
    for k in range(FOR_ITER_SKIPS):
        if n - k >= 0 and insts[n - k].opname == "END_FOR":
            return True
    return False


def loads_cell(inst, cells) -> bool:
    """Whether `inst` pushes a cell object (to build a closure): LOAD_CLOSURE on 3.11/3.12; on
    3.13, where LOAD_CLOSURE is a pseudo-op, a LOAD_FAST of a name in `cells` (the code's
    co_cellvars and co_freevars). Works on Inst and dis.Instruction alike."""
    if inst.opname == "LOAD_CLOSURE":
        return True
    return PY313_PLUS and inst.opname == "LOAD_FAST" and inst.argval in cells


def make_inst(opname, arg=None, argval=None, *, target=None, argrepr=None):
    """A new Inst; argrepr defaults to a readable form of argval."""
    if opname not in dis.opmap:
        raise ValueError(
            f"{opname} is not an opcode of Python {sys.version_info[0]}.{sys.version_info[1]}"
        )
    if argrepr is None:
        argrepr = "" if argval is None and opname not in HASCONST else repr(argval)
        if opname in HASCONST:
            argrepr = repr(argval)
        elif isinstance(argval, str):
            argrepr = argval
    return Inst(opname, arg, argval, argrepr, target=target)


def format(insts, *, title=None):  # noqa: A001  (the natural name; shadows a builtin in here only)
    """Readable text of an instruction list: index, offset, line, opname, argument, target, try."""
    index = {id(i): n for n, i in enumerate(insts)}
    entries = []
    for inst in insts:
        e = inst.exn_tab_entry
        if e is not None and all(e is not x for x in entries):
            entries.append(e)
    lines = [title] if title else []
    last_line = None
    for n, inst in enumerate(insts):
        line = ""
        if inst.lineno is not None and inst.lineno != last_line:
            line = str(inst.lineno)
            last_line = inst.lineno
        off = "" if inst.offset is None else str(inst.offset)
        if inst.target is not None:
            t = index.get(id(inst.target))
            arg = f"to #{t}" if t is not None else f"to {_short(inst.target)} (not in list)"
        elif inst.opname in HASARG or inst.argrepr:
            arg = inst.argrepr if inst.argrepr else repr(inst.argval)
            if inst.arg is not None and inst.opname not in HASCONST | HASNAME | HASLOCAL | HASFREE:
                arg = f"{inst.arg} ({arg})" if arg != str(inst.arg) else arg
        else:
            arg = ""
        exn = ""
        if inst.exn_tab_entry is not None:
            exn = f"  [try {entries.index(inst.exn_tab_entry)}]"
        lines.append(f"{line:>5} {n:>5} {off:>6}  {inst.opname:<28} {arg}{exn}")
    if entries:
        lines.append("ExceptionTable:")
        for k, e in enumerate(entries):
            covered = [n for n, i in enumerate(insts) if i.exn_tab_entry is e]
            rng = f"#{covered[0]}..#{covered[-1]}" if covered else "(no instructions)"
            t = index.get(id(e.target), "?")
            lines.append(f"  try {k}: {rng} -> #{t} depth {e.depth}{' lasti' if e.lasti else ''}")
    return "\n".join(lines)
