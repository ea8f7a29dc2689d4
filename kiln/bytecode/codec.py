"""decode: code object -> [Inst]; encode: [Inst] -> code object (via the `bytecode` package)."""

from __future__ import annotations

import dis
import types
import weakref

import bytecode as bc
from bytecode import instr as bc_instr

from kiln.bytecode.inst import format as format_insts

try:  # private: used to keep co_consts / co_names / co_varnames in their original order
    from bytecode.concrete import _ConvertBytecodeToConcrete
except ImportError:  # pragma: no cover - another `bytecode` release: plain to_code() below
    _ConvertBytecodeToConcrete = None

from kiln.bytecode.analysis import max_stack_depth
from kiln.bytecode.code_cache import CodeCache
from kiln.bytecode.inst import (
    CACHE_OPS,
    HASARG,
    HASCOMPARE,
    HASCONST,
    HASFREE,
    HASLOCAL,
    HASNAME,
    PY311,
    PY312_PLUS,
    PY313_PLUS,
    ExceptionEntry,
    Inst,
)


class BytecodeError(Exception):
    """Raised when instructions cannot be decoded or assembled."""


# Note [Bytecode: decode cache]
# Decoding (the bytecode package's from_code, dis, labels) costs ~0.5-3 ms a code object, and a
# trace decodes each inlined callee again at every call: a loop calling assertEqual 10000 times
# spent most of its compile time here. decode() keeps the decoded list of the last 512 code
# objects (by identity, held weakly: kiln.bytecode.code_cache) and hands out a fresh copy each
# time, because callers edit the list and its instructions in place. A copy (new Insts with the
# same field values; targets and exception entries pointing into the copy) is ~10x cheaper than
# a decode. The cached list itself is never handed out. (Translators, which only read, share one
# indexed list per code: Note [Translator: shared instruction lists].)
_cache = CodeCache(512)


def decode(code: types.CodeType) -> list[Inst]:
    """The instructions of a code object: caches dropped, EXTENDED_ARG folded, jumps as targets."""
    insts = _cache.get(code)
    if insts is None:
        insts = _decode(code)
        _cache.put(code, insts)
    return _copy(insts)


def _copy(insts: list[Inst]) -> list[Inst]:
    """A copy of a freshly decoded list (Note [Bytecode: decode cache]); like edit.clone, faster."""
    new = []
    for old in insts:
        inst = object.__new__(Inst)
        inst.__dict__.update(old.__dict__)
        new.append(inst)
    if not new:
        return new
    where = {id(old): n for n, old in enumerate(insts)}
    entries: dict[int, ExceptionEntry] = {}
    for inst in new:
        if inst.target is not None:
            inst.target = new[where[id(inst.target)]]
        e = inst.exn_tab_entry
        if e is not None:
            copied = entries.get(id(e))
            if copied is None:
                copied = entries[id(e)] = ExceptionEntry(
                    new[where[id(e.start)]],
                    new[where[id(e.end)]],
                    new[where[id(e.target)]],
                    e.depth,
                    e.lasti,
                )
            inst.exn_tab_entry = copied
    return new


def _decode(code: types.CodeType) -> list[Inst]:
    """decode() without the cache."""
    abstract = bc.Bytecode.from_code(code, conserve_exception_block_stackdepth=True)
    dis_insts = [i for i in dis.get_instructions(code) if i.opname not in CACHE_OPS]
    insts: list[Inst] = []
    jumps: list[tuple[Inst, bc.Label]] = []
    label_at: dict[bc.Label, int] = {}
    entries: dict[bc.TryBegin, ExceptionEntry] = {}
    entry_targets: list[tuple[ExceptionEntry, bc.Label]] = []
    current: bc.TryBegin | None = None
    k = 0
    for item in abstract:
        if isinstance(item, bc.Label):
            label_at[item] = len(insts)
        elif isinstance(item, bc.TryBegin):
            current = item
        elif isinstance(item, bc.TryEnd):
            if item.entry is current:
                current = None
        elif isinstance(item, bc.Instr):
            if item.name in CACHE_OPS:
                continue
            d = dis_insts[k]
            k += 1
            if d.opname != item.name:
                raise BytecodeError(f"decode mismatch at {d.offset}: {d.opname} vs {item.name}")
            pos = d.positions
            argval = d.argval
            if d.opname in HASCONST:  # 3.11's dis leaves KW_NAMES unresolved
                argval = item.arg
            inst = Inst(d.opname, d.arg, argval, d.argrepr, d.offset, pos.lineno, pos)
            if d.opname == "KW_NAMES":
                inst.argrepr = repr(argval)
            if isinstance(item.arg, bc.Label):
                jumps.append((inst, item.arg))
            if current is not None:
                e = entries.get(current)
                if e is None:
                    e = entries[current] = ExceptionEntry(
                        inst, inst, None, current.stack_depth, current.push_lasti
                    )
                    entry_targets.append((e, current.target))
                e.end = inst
                inst.exn_tab_entry = e
            insts.append(inst)
    if k != len(dis_insts):
        raise BytecodeError(f"decode mismatch: {k} instructions vs {len(dis_insts)} from dis")
    for inst, label in jumps:
        inst.target = insts[label_at[label]]
    for e, label in entry_targets:
        e.target = insts[label_at[label]]
    return insts


# Code fields encode() accepts as overrides, mapped to the bytecode package's attributes.
_FIELDS = {
    "co_argcount": "argcount",
    "co_posonlyargcount": "posonlyargcount",
    "co_kwonlyargcount": "kwonlyargcount",
    "co_flags": "flags",
    "co_firstlineno": "first_lineno",
    "co_name": "name",
    "co_qualname": "qualname",
    "co_filename": "filename",
    "co_cellvars": "cellvars",
    "co_freevars": "freevars",
}
_SPLIT_SUPER = {
    "LOAD_FAST_LOAD_FAST": ("LOAD_FAST", "LOAD_FAST"),
    "STORE_FAST_LOAD_FAST": ("STORE_FAST", "LOAD_FAST"),
    "STORE_FAST_STORE_FAST": ("STORE_FAST", "STORE_FAST"),
}
# Note [Bytecode: 3.13 errors from callee frames]
# When a Python frame called inline (CALL into a Python function, a property's LOAD_ATTR, a
# generator's FOR_ITER/SEND, __getitem__ via BINARY_SUBSCR) raises, 3.13 looks up the caller's
# handler at the code unit BEFORE the calling instruction. Compiled code never starts a try range
# at such an instruction; edits can (a resume function jumps into the middle of a try body), so
# encode() puts a NOP covered by the same entry in front of it.
_CALLS_FRAMES = frozenset(
    {"CALL", "CALL_KW", "CALL_FUNCTION_EX", "BINARY_SUBSCR", "LOAD_ATTR", "FOR_ITER", "SEND"}
)


def _semantics(entry):
    return (id(entry.target), entry.depth, entry.lasti)


_INVERT = {"TRUE": "FALSE", "FALSE": "TRUE", "NONE": "NOT_NONE", "NOT_NONE": "NONE"}


def _direction(opname, backward):
    """The jump opname of the right direction for this Python (None: needs the 3.12 rewrite)."""
    if opname in ("JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP"):
        if backward:
            return "JUMP_BACKWARD_NO_INTERRUPT" if opname.endswith("INTERRUPT") else "JUMP_BACKWARD"
        return "JUMP_FORWARD"
    if opname.startswith("POP_JUMP_"):
        cond = opname.rsplit("_IF_", 1)[1]
        if PY312_PLUS:
            return None if backward else f"POP_JUMP_IF_{cond}"
        return f"POP_JUMP_{'BACKWARD' if backward else 'FORWARD'}_IF_{cond}"
    if backward:
        raise BytecodeError(f"{opname} cannot jump backward")
    return opname


def _location(inst):
    p = inst.positions
    if p is not None:
        return bc_instr.InstrLocation(p.lineno, p.end_lineno, p.col_offset, p.end_col_offset)
    if inst.lineno is not None:
        return bc_instr.InstrLocation(inst.lineno, None, None, None)
    return None  # inherit the previous instruction's location


class _ArgConverter:
    """Turns an Inst's (opname, arg, argval) into the `bytecode` package's argument."""

    def __init__(self, varnames, cellvars, freevars):
        self.varnames = set(varnames)
        self.cellvars = set(cellvars)
        self.freevars = set(freevars)

    def var(self, name, *, local):
        if local and (name in self.varnames or name not in self.cellvars | self.freevars):
            return name
        if name in self.cellvars:
            return bc.CellVar(name)
        if name in self.freevars:
            return bc.FreeVar(name)
        raise BytecodeError(f"{name!r} is neither a cell nor a free variable")

    def __call__(self, inst):
        op, arg, argval = inst.opname, inst.arg, inst.argval
        if op in HASCONST:
            return argval
        if op in HASLOCAL:
            if isinstance(argval, tuple):
                return tuple(self.var(n, local=True) for n in argval)
            return self.var(argval, local=True)
        if op in HASFREE:
            return self.var(argval, local=False)
        if op in HASNAME:
            flags = arg or 0
            if op == "LOAD_GLOBAL" or (PY312_PLUS and op == "LOAD_ATTR"):
                return (bool(flags & 1), argval)
            if op == "LOAD_SUPER_ATTR":
                return (bool(flags & 1), bool(flags & 2), argval)
            return argval
        if op in HASCOMPARE:
            cmp = dis.cmp_op.index(argval) if isinstance(argval, str) else int(argval)
            if PY313_PLUS and arg is not None and arg & 16:
                cmp += 16
            return bc.Compare(cmp)
        if op not in HASARG:
            return bc.UNSET
        if arg is None:
            if not isinstance(argval, int):
                raise BytecodeError(f"{op} needs an integer arg, got arg=None argval={argval!r}")
            arg = argval
        code = dis.opmap[op]
        if code in bc_instr.BINARY_OPS:
            return bc.BinaryOp(arg)
        if code in bc_instr.INTRINSIC_1OP:
            return bc.Intrinsic1Op(arg)
        if code in bc_instr.INTRINSIC_2OP:
            return bc.Intrinsic2Op(arg)
        if code in getattr(bc_instr, "FORMAT_VALUE_OPS", ()):
            return bc_instr.FormatValue(arg)
        return arg


def _fill_index_map(index_map, out, at):
    """index_map[n] = index in decode(<the result>) of insts[n] (Note [Bytecode: index map])."""
    instr_before = []
    count = 0
    for item in out:
        instr_before.append(count)
        count += isinstance(item, bc.Instr)
    instr_before.append(count)
    for n, k in enumerate(at):
        index_map[n] = instr_before[k]


# Note [Bytecode: index map]
# encode() may emit more instructions than it is given: a NOP in front of a 3.13 call that
# starts a try range (Note [Bytecode: 3.13 errors from callee frames]), a 3.13 superinstruction
# split in two, a 3.12+ backward conditional jump rewritten as a forward jump over a
# JUMP_BACKWARD. Code that maps instructions of the result back to its input (resume functions:
# Note [Resume: breaks in resume functions]) passes `index_map` and gets, for each input index,
# the index of its first instruction in decode(result).


class _MadeFrom:
    """code kiln made -> the user code it was made from (a transformed frame, a resume function:
    what run-time stack walks use to see the user's frames, Note [Warnings: the caller a warning
    names]). By identity, held weakly: a code object hashes its constants, which may not hash."""

    def __init__(self):
        self._by_id = {}

    def __setitem__(self, made, origin):
        key = id(made)
        self._by_id[key] = (
            weakref.ref(made, lambda _, key=key: self._by_id.pop(key, None)),
            origin,
        )

    def get(self, code, default=None):
        entry = self._by_id.get(id(code))
        return entry[1] if entry is not None and entry[0]() is code else default

    def __contains__(self, code):
        return self.get(code) is not None


MADE_FROM = _MadeFrom()


def encode(
    insts: list[Inst], like: types.CodeType, *, index_map: dict | None = None, **replace
) -> types.CodeType:
    """Assemble instructions into a code object shaped like `like`, with `co_*` fields replaced.

    Offsets, jump args and directions, EXTENDED_ARG, inline caches, the exception table, the
    line/position table and co_stacksize are all recomputed. Accepted overrides: co_varnames,
    co_argcount, co_posonlyargcount, co_kwonlyargcount, co_flags, co_firstlineno, co_name,
    co_qualname, co_filename, co_cellvars, co_freevars (co_nlocals is derived). Instructions with
    no positions take the previous instruction's location. `index_map` (a dict) receives each
    input index's position in decode(result) (Note [Bytecode: index map]).
    """
    unknown = set(replace) - set(_FIELDS) - {"co_varnames", "co_nlocals"}
    if unknown:
        raise BytecodeError(f"encode() cannot replace {sorted(unknown)}")
    replace.pop("co_nlocals", None)
    varnames = list(replace.pop("co_varnames", like.co_varnames))
    out = bc.Bytecode()
    out.argcount = like.co_argcount
    out.posonlyargcount = like.co_posonlyargcount
    out.kwonlyargcount = like.co_kwonlyargcount
    out.flags = bc.CompilerFlags(like.co_flags)
    out.first_lineno = like.co_firstlineno
    out.name = like.co_name
    out.qualname = like.co_qualname
    out.filename = like.co_filename
    out.cellvars = list(like.co_cellvars)
    out.freevars = list(like.co_freevars)
    consts = like.co_consts
    out.docstring = (
        consts[0] if consts and (consts[0] is None or isinstance(consts[0], str)) else bc.UNSET
    )
    for key, value in replace.items():
        if key == "co_flags":
            value = bc.CompilerFlags(value)
        elif key in ("co_cellvars", "co_freevars"):
            value = list(value)
        setattr(out, _FIELDS[key], value)
    star = bc.CompilerFlags.VARARGS | bc.CompilerFlags.VARKEYWORDS
    nargs = out.argcount + out.kwonlyargcount + bin(out.flags & star).count("1")
    out.argnames = varnames[:nargs]
    convert = _ArgConverter(varnames, out.cellvars, out.freevars)
    # The final co_varnames: the given order, then new locals in order of first use.
    local_index = {}
    for name in varnames:
        local_index.setdefault(name, len(local_index))
    for inst in insts:
        if inst.opname in HASLOCAL:
            for name in inst.argval if isinstance(inst.argval, tuple) else (inst.argval,):
                if convert.var(name, local=True) == name:
                    local_index.setdefault(name, len(local_index))

    labels: dict[int, bc.Label] = {}
    for inst in insts:
        if inst.target is not None:
            labels.setdefault(id(inst.target), bc.Label())
        if inst.exn_tab_entry is not None:
            labels.setdefault(id(inst.exn_tab_entry.target), bc.Label())
    position = {id(inst): n for n, inst in enumerate(insts)}
    for key in labels:
        if key not in position:
            raise BytecodeError("a jump or exception target is not in the instruction list")

    current = None  # (ExceptionEntry, TryBegin) of the open range
    at = [0] * len(insts)
    for n, inst in enumerate(insts):
        entry = inst.exn_tab_entry
        if current is not None and current[0] is not entry:
            out.append(bc.TryEnd(current[1]))
            current = None
        label = labels.get(id(inst))
        if label is not None:
            out.append(label)
        if entry is not None and current is None:
            tb = bc.TryBegin(labels[id(entry.target)], entry.lasti, entry.depth)
            out.append(tb)
            current = (entry, tb)
        loc = _location(inst)
        if PY313_PLUS and entry is not None and inst.opname in _CALLS_FRAMES and n > 0:
            prev = insts[n - 1].exn_tab_entry
            if prev is None or _semantics(prev) != _semantics(entry):
                # Note [Bytecode: 3.13 errors from callee frames]
                out.append(bc.Instr("NOP", location=loc))
        at[n] = len(out)  # where this instruction's own first Instr goes
        if inst.target is None:
            split = _SPLIT_SUPER.get(inst.opname)
            if split and any(local_index.get(v, 0) > 15 for v in inst.argval):
                # 3.13 superinstructions hold two 4-bit local indices: split when they don't fit
                for opname, name in zip(split, inst.argval):
                    out.append(bc.Instr(opname, convert.var(name, local=True), location=loc))
                continue
            try:
                out.append(bc.Instr(inst.opname, convert(inst), location=loc))
            except (TypeError, ValueError) as e:
                raise BytecodeError(f"cannot encode {inst!r}: {e}") from e
            continue
        if PY312_PLUS and inst.opname == "FOR_ITER" and inst.target.opname != "END_FOR":
            # Note [Bytecode: version differences]: an exhausted FOR_ITER skips its target
            raise BytecodeError(f"FOR_ITER must jump to an END_FOR, not {inst.target!r}")
        backward = position[id(inst.target)] <= n
        opname = _direction(inst.opname, backward)
        target = labels[id(inst.target)]
        if opname is None:  # 3.12+: no backward conditional jump; jump over a JUMP_BACKWARD
            cond = inst.opname.rsplit("_IF_", 1)[1]
            skip = bc.Label()
            out.append(bc.Instr(f"POP_JUMP_IF_{_INVERT[cond]}", skip, location=loc))
            out.append(bc.Instr("JUMP_BACKWARD", target, location=loc))
            out.append(skip)
        else:
            out.append(bc.Instr(opname, target, location=loc))
    if current is not None:
        out.append(bc.TryEnd(current[1]))
    if index_map is not None:
        _fill_index_map(index_map, out, at)

    try:
        # Note [Bytecode: stack size]: our own dataflow (kiln.bytecode.analysis) over reachable
        # code only: the bytecode package also walks code made unreachable by edits (a resume
        # function's skipped prefix) and then fails on it.
        stacksize = max_stack_depth(insts, int(out.flags))
    except ValueError as e:
        raise BytecodeError(f"inconsistent stack in {like.co_name}: {e}") from e
    if _ConvertBytecodeToConcrete is None:  # pragma: no cover
        return out.to_code(stacksize=stacksize, compute_exception_stack_depths=False)
    try:
        conv = _ConvertBytecodeToConcrete(out)
        # Keep the original order of consts/names/varnames (stable co_* tuples for unedited code).
        for c in consts:
            conv.add_const(c)
        for name in like.co_names:
            conv.add_name(name)
        for name in local_index:
            conv.add_varname(name)
        concrete = conv.to_concrete_bytecode(compute_exception_stack_depths=False)
        code = concrete.to_code(stacksize=stacksize, compute_exception_stack_depths=False)
        per_instruction = code.co_code if PY311 else None
        table = linetable(code.co_positions(), code.co_firstlineno, per_instruction)
        made = code.replace(co_linetable=table)
        MADE_FROM[made] = MADE_FROM.get(like, like)
        return made
    except BytecodeError:
        raise
    except Exception as e:
        raise BytecodeError(f"cannot assemble {like.co_name}: {type(e).__name__}: {e}") from e


# Note [Bytecode: line table]
# The `bytecode` package writes one location entry per instruction; CPython's compiler merges
# consecutive instructions with the same location into one entry (up to 8 code units; 3.11:
# one entry per instruction). Both
# decode to the same co_positions(), but 3.12/3.13's co_lines() (and so f_lineno) misreport
# lines after runs of one-unit "no location" entries. encode() therefore rewrites the table the
# way the compiler does (Objects/locations.md), which reproduces the compiler's bytes exactly.


def _varint(out, value):
    while value >= 64:
        out.append(64 | (value & 63))
        value >>= 6
    out.append(value)


def _svarint(out, value):
    _varint(out, ((-value) << 1) | 1 if value < 0 else value << 1)


def _instruction_sizes(co_code):
    """Code units of each instruction, its EXTENDED_ARG prefixes and inline caches included."""
    sizes, i, n = [], 0, len(co_code) // 2
    extended = dis.opmap["EXTENDED_ARG"]
    while i < n:
        start = i
        while co_code[2 * i] == extended:
            i += 1
        i += 1 + dis._inline_cache_entries[co_code[2 * i]]
        sizes.append(i - start)
    return sizes


def linetable(positions, firstlineno, co_code=None) -> bytes:
    """co_linetable for per-code-unit positions (lineno, end_lineno, col, end_col), as the
    compiler writes it (3.11 writes one entry per instruction: give co_code)."""
    positions = [tuple(-1 if v is None else v for v in pos) for pos in positions]
    runs = []  # [location, length in code units]
    if co_code is not None:
        k = 0
        for size in _instruction_sizes(co_code):
            runs.append([positions[k], size])
            k += size
    else:
        for loc in positions:
            if runs and runs[-1][0] == loc:
                runs[-1][1] += 1
            else:
                runs.append([loc, 1])
    out = bytearray()
    current = firstlineno
    for (line, end_line, col, end_col), size in runs:
        while size > 0:
            n = min(size, 8)
            size -= n
            first = 0x80 | (n - 1)
            if line < 0:
                out.append(first | (15 << 3))
                continue
            delta = line - current
            if col < 0 or end_col < 0:
                if end_line in (line, -1):
                    out.append(first | (13 << 3))
                    _svarint(out, delta)
                    current = line
                    continue
            elif end_line == line:
                if delta == 0 and col < 80 and 0 <= end_col - col < 16:
                    out.append(first | ((col >> 3) << 3))
                    out.append(((col & 7) << 4) | (end_col - col))
                    continue
                if 0 <= delta < 3 and col < 128 and end_col < 128:
                    out.append(first | ((10 + delta) << 3))
                    out += bytes((col, end_col))
                    current = line
                    continue
            out.append(first | (14 << 3))
            _svarint(out, delta)
            _varint(out, end_line - line)
            _varint(out, col + 1)
            _varint(out, end_col + 1)
            current = line
    return bytes(out)


def format_code(code: types.CodeType, title=None) -> str:
    """Readable text of a code object (the `bytecode` log channel): see inst.format()."""
    return format_insts(decode(code), title=title or f"{code.co_qualname} ({code.co_filename})")
