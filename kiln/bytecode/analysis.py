"""Dataflow over instruction lists: stack states (with NULL slots), assigned and live locals."""

from __future__ import annotations

import dataclasses
import dis
import inspect

from kiln.bytecode.inst import PY312_PLUS, PY313_PLUS, Inst

# Stack item kinds: an object, a NULL (call protocol), either (a method load's first slot), or
# the __exit__ that BEFORE_WITH left for an active `with` block.
VALUE, NULL, MAYBE_NULL, WITH_EXIT = "v", "null", "?", "exit"


def _arg(inst):
    if inst.opname not in dis.opmap or dis.opmap[inst.opname] < dis.HAVE_ARGUMENT:
        return None
    if inst.arg is not None:
        return inst.arg
    # (a constant's value is no count: `LOAD_CONST 10**100` has no C-sized oparg yet)
    return inst.argval if isinstance(inst.argval, int) and inst.opcode not in dis.hasconst else 0


def stack_effect(inst: Inst, jump: bool = False) -> int:
    """Net stack effect, exact for the call protocol (3.11's PRECALL/CALL split as executed)."""
    pops, pushes = _pops_pushes(inst, jump)
    return (
        pushes - pops if pops is not None else dis.stack_effect(inst.opcode, _arg(inst), jump=jump)
    )


def _pops_pushes(inst, jump):
    """(pops, pushes) for instructions that consume or make NULLs; (None, None) otherwise."""
    op, arg = inst.opname, _arg(inst)
    if op in ("PRECALL", "KW_NAMES"):
        return 0, 0
    if op == "CALL":
        return arg + 2, 1
    if op == "CALL_KW":
        return arg + 3, 1
    if op == "CALL_FUNCTION_EX":
        return 3 + (arg & 1), 1
    return None, None


def _apply(inst, stack, jump):
    """The stack kinds after `inst` (taking the jump or not)."""
    op, arg = inst.opname, _arg(inst)
    stack = list(stack)
    if op == "PUSH_NULL":
        return stack + [NULL]
    if op == "LOAD_GLOBAL":
        if arg & 1:
            return stack + ([VALUE, NULL] if PY313_PLUS else [NULL, VALUE])
        return stack + [VALUE]
    method = (op == "LOAD_METHOD") or (
        PY312_PLUS and op in ("LOAD_ATTR", "LOAD_SUPER_ATTR") and arg & 1
    )
    if method:
        del stack[len(stack) - (3 if op == "LOAD_SUPER_ATTR" else 1) :]
        return stack + ([VALUE, MAYBE_NULL] if PY313_PLUS else [MAYBE_NULL, VALUE])
    if op == "BEFORE_WITH":
        return stack[:-1] + [WITH_EXIT, VALUE]
    if op == "LOAD_FAST_AND_CLEAR":
        return stack + [MAYBE_NULL]
    if op == "SWAP":
        stack[-1], stack[-arg] = stack[-arg], stack[-1]
        return stack
    if op == "COPY":
        return stack + [stack[-arg]]
    if op == "PRECALL" and stack[-arg - 2] == NULL:  # 3.11: may unpack a bound method into it
        stack[-arg - 2] = MAYBE_NULL
        return stack
    pops, pushes = _pops_pushes(inst, jump)
    if pops is None:
        effect = dis.stack_effect(inst.opcode, arg, jump=jump)
        pops, pushes = max(0, -effect), max(0, effect)
    if pops > len(stack):
        raise ValueError(f"stack underflow at {inst!r}")
    del stack[len(stack) - pops :]
    return stack + [VALUE] * pushes


@dataclasses.dataclass
class FrameState:
    """What is known before an instruction: the stack's kinds and the definitely bound locals."""

    stack: tuple[str, ...]
    assigned: frozenset[str]

    @property
    def depth(self):
        return len(self.stack)

    @property
    def null_positions(self):
        return tuple(n for n, k in enumerate(self.stack) if k == NULL)

    @property
    def with_positions(self):
        """Slots holding the __exit__ of an active `with` (make_resume_function's
        setup_with_blocks)."""
        return tuple(n for n, k in enumerate(self.stack) if k == WITH_EXIT)


def _merge(a, b):
    if a is None:
        return b
    if len(a.stack) != len(b.stack):
        raise ValueError(f"stack depths disagree at a join: {len(a.stack)} vs {len(b.stack)}")
    stack = tuple(x if x == y else MAYBE_NULL for x, y in zip(a.stack, b.stack))
    return FrameState(stack, a.assigned & b.assigned)


def _stores(inst):
    op, v = inst.opname, inst.argval
    if op in ("STORE_FAST", "STORE_FAST_MAYBE_NULL"):
        return (v,)
    if op == "STORE_FAST_STORE_FAST":
        return tuple(v)
    if op == "STORE_FAST_LOAD_FAST":
        return (v[0],)
    return ()


def _assigned_after(inst, state):
    """Definitely bound locals after inst. A store of a maybe-NULL value (3.12+ inlined
    comprehensions restore a saved, possibly unbound, local with STORE_FAST) leaves it maybe
    unbound."""
    assigned = set(state.assigned) - set(_kills(inst))
    names = _stores(inst)
    for k, name in enumerate(names):
        kind = state.stack[-1 - k] if len(state.stack) > k else VALUE
        if kind in (NULL, MAYBE_NULL):
            assigned.discard(name)
        else:
            assigned.add(name)
    return frozenset(assigned)


def _kills(inst):
    return (inst.argval,) if inst.opname in ("DELETE_FAST", "LOAD_FAST_AND_CLEAR") else ()


def initial_depth(flags):
    """Items on the stack at the first instruction: 3.11/3.12 generators and coroutines start
    with one (RETURN_GENERATOR's result, popped by the POP_TOP that follows)."""
    gen = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
    return 1 if flags & gen and not PY313_PLUS else 0


def frame_states(insts: list[Inst], argnames=(), flags=0) -> list[FrameState | None]:
    """Forward dataflow: the state before each instruction (None where unreachable). Exception
    edges go to the handler with the entry's depth, the lasti slot and the exception. `flags`:
    the code's co_flags (generators start with an item on the stack before 3.13)."""
    index = {id(i): n for n, i in enumerate(insts)}
    states: list[FrameState | None] = [None] * len(insts)
    states[0] = FrameState((VALUE,) * initial_depth(flags), frozenset(argnames))
    work = [0]
    while work:
        n = work.pop()
        inst, state = insts[n], states[n]
        succ = []
        assigned = _assigned_after(inst, state)
        if not inst.is_terminator and n + 1 < len(insts):
            succ.append((n + 1, FrameState(tuple(_apply(inst, state.stack, False)), assigned)))
        if inst.target is not None:
            succ.append(
                (
                    index[id(inst.target)],
                    FrameState(tuple(_apply(inst, state.stack, True)), assigned),
                )
            )
        e = inst.exn_tab_entry
        if e is not None:
            handler_stack = state.stack[: e.depth] + ((VALUE,) if e.lasti else ()) + (VALUE,)
            succ.append((index[id(e.target)], FrameState(handler_stack, state.assigned)))
        for m, new in succ:
            merged = _merge(states[m], new)
            if merged != states[m]:
                states[m] = merged
                work.append(m)
    return states


def _uses(inst):
    op, v = inst.opname, inst.argval
    if op in ("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "DELETE_FAST"):
        return (v,)
    if op == "LOAD_FAST_LOAD_FAST":
        return tuple(v)
    if op == "STORE_FAST_LOAD_FAST":
        return (v[1],)
    return ()


def live_locals_all(insts: list[Inst]) -> list[frozenset[str]]:
    """For every instruction, the locals (not cells) that may be read before being written when
    running from it (backward dataflow, exception edges included)."""
    pos = {id(i): n for n, i in enumerate(insts)}
    preds: list[list[int]] = [[] for _ in insts]
    for n, inst in enumerate(insts):
        if not inst.is_terminator and n + 1 < len(insts):
            preds[n + 1].append(n)
        if inst.target is not None:
            preds[pos[id(inst.target)]].append(n)
        if inst.exn_tab_entry is not None:
            preds[pos[id(inst.exn_tab_entry.target)]].append(n)
    gen, kill = [], []
    for inst in insts:
        if inst.opname == "STORE_FAST_LOAD_FAST":  # store first, then load
            gen.append(frozenset(inst.argval[1:]))
            kill.append(frozenset(inst.argval[:1]) - set(inst.argval[1:]))
        else:
            gen.append(frozenset(_uses(inst)))
            kill.append(frozenset(_stores(inst)))
    live_out = [frozenset()] * len(insts)
    live_in: list[frozenset | None] = [None] * len(insts)  # None: not visited yet
    work = list(range(len(insts)))
    queued = [True] * len(insts)
    while work:
        n = work.pop()
        queued[n] = False
        new = gen[n] | (live_out[n] - kill[n])
        if new != live_in[n]:
            live_in[n] = new
            for p in preds[n]:
                out = live_out[p] | new
                if out != live_out[p]:
                    live_out[p] = out
                    if not queued[p]:
                        queued[p] = True
                        work.append(p)
    return [gen[n] | (live_out[n] - kill[n]) for n in range(len(insts))]


def livevars(insts: list[Inst], index: int) -> set[str]:
    """Locals (not cells) that may be read before being written when running from insts[index]."""
    return set(live_locals_all(insts)[index])


def max_stack_depth(insts: list[Inst], flags=0) -> int:
    """co_stacksize: the deepest stack over reachable instructions and exception handlers."""
    peak = 0
    for inst, state in zip(insts, frame_states(insts, (), flags)):
        if state is None:
            continue
        peak = max(peak, state.depth, state.depth + stack_effect(inst, False))
        if inst.target is not None:
            peak = max(peak, state.depth + stack_effect(inst, True))
    return peak


def stack_depths(insts: list[Inst], flags=0) -> list[int | None]:
    """The stack depth before each instruction (None where unreachable)."""
    return [None if s is None else s.depth for s in frame_states(insts, (), flags)]


__all__ = [
    "FrameState",
    "frame_states",
    "live_locals_all",
    "livevars",
    "max_stack_depth",
    "stack_depths",
    "stack_effect",
]
