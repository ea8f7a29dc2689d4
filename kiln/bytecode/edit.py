"""Small editing helpers over instruction lists that keep jumps and exception entries right."""

from __future__ import annotations

from kiln.bytecode.analysis import frame_states
from kiln.bytecode.codec import BytecodeError
from kiln.bytecode.inst import ExceptionEntry, Inst


def retarget(insts, old: Inst, new: Inst):
    """Make every jump and exception entry that goes to `old` go to `new` instead (except a
    3.12+ FOR_ITER: the interpreter skips its target, which must stay the loop's END_FOR)."""
    for inst in insts:
        if inst.target is old and not (inst.opname == "FOR_ITER" and old.opname == "END_FOR"):
            inst.target = new
        e = inst.exn_tab_entry
        if e is not None and e.target is old:
            e.target = new


def insert_before(insts, anchor: Inst, new: list[Inst], *, retarget_jumps=True):
    """Insert `new` before `anchor` (in place); jumps to anchor land on new[0] and the new
    instructions are covered by anchor's exception entry. Returns the index of new[0]."""
    index = next(n for n, i in enumerate(insts) if i is anchor)
    if not new:
        return index
    for inst in new:
        if inst.exn_tab_entry is None:
            inst.exn_tab_entry = anchor.exn_tab_entry
    e = anchor.exn_tab_entry
    if e is not None and e.start is anchor:
        e.start = new[0]
    if retarget_jumps:
        retarget(insts, anchor, new[0])
    insts[index:index] = new
    return index


def insert_after(insts, anchor: Inst, new: list[Inst]):
    """Insert `new` after `anchor` (in place), covered by anchor's exception entry."""
    index = next(n for n, i in enumerate(insts) if i is anchor) + 1
    for inst in new:
        if inst.exn_tab_entry is None:
            inst.exn_tab_entry = anchor.exn_tab_entry
    e = anchor.exn_tab_entry
    if new and e is not None and e.end is anchor:
        e.end = new[-1]
    insts[index:index] = new
    return index


def first_resume(insts):
    """Index of the RESUME that starts the function body (after the generator/cell prefix)."""
    return next(n for n, i in enumerate(insts) if i.opname == "RESUME")


def clone(insts):
    """A deep copy of an instruction list: targets and exception entries point into the copy."""
    new = [i.copy() for i in insts]
    where = {id(old): n for n, old in enumerate(insts)}
    entries = {}
    for old, inst in zip(insts, new):
        if old.target is not None:
            inst.target = new[where[id(old.target)]]
        e = old.exn_tab_entry
        if e is not None:
            if id(e) not in entries:
                entries[id(e)] = ExceptionEntry(
                    new[where[id(e.start)]] if id(e.start) in where else None,
                    new[where[id(e.end)]] if id(e.end) in where else None,
                    new[where[id(e.target)]],
                    e.depth,
                    e.lasti,
                )
            inst.exn_tab_entry = entries[id(e)]
    return new


def remove_unreachable(insts, flags=0):
    """The instructions reachable from the first one (jumps, fall-through, exception handlers);
    exception entries whose start/end were removed are moved onto kept instructions."""
    try:
        states = frame_states(insts, (), flags)
    except ValueError as e:
        raise BytecodeError(f"inconsistent stack: {e}") from e
    kept = [i for i, s in zip(insts, states) if s is not None]
    seen = set()
    for inst in kept:
        e = inst.exn_tab_entry
        if e is not None and id(e) not in seen:
            seen.add(id(e))
            covered = [i for i in kept if i.exn_tab_entry is e]
            e.start, e.end = covered[0], covered[-1]
    return kept
