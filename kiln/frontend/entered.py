"""Graph breaks inside the with block of a traced user context manager, placed where they happen.

    def f(x):                              # transformed f at the break:
        with Ctx():        # traced enter     ___out = <graph: enter, x + 1>(x)
            x = x + 1                          with ExitOnError(ctx):     # exits only on error
            print(x)       # the break             print(x)
            x = x * 2                          return resume(Entered(ctx), x)
        return x                           # resume: `with Entered(ctx):` enters nothing; the
                                           # traced block and its exit (the user's __exit__)

Note [Blocks: breaks inside a user with block]
A traced user manager's __enter__ ran once (in the graph so far and the replayed side effects); its
__exit__ must run once, after the block, with eager's arguments. At a break inside its block the
manager stays entered: the graph ends inside the block (no exit is traced there), the transformed
code runs the instruction inside `with ExitOnError(ctx)`, which calls ctx.__exit__ only when an
exception leaves the instruction (its result decides suppression, as in eager), and passes
`Entered(ctx)` in the block's stack slot to the resume function. The resume function's prologue
enters it (nothing happens) and its copied cleanup code calls Entered.__exit__, which is
ctx.__exit__: kiln traces Entered like any user manager, so the resumed block and the exit are
captured in the resume function's graph (ExitOnError only ever runs in Python). A resumed block
that breaks again passes the same Entered object on. An exception an __exit__ suppresses at the
break continues after that with statement (a resume function there). Nested user managers: each
level the same. Grad-mode levels stay entered with them (kept_entered: no exit in the graph, the
mode restored by ExitOnError(GradRestore(prev)) on an error, GradRestore(prev) passed on), so a
user level inside one keeps the mode its enter set. Other levels (autocast, nullcontext,
saved-tensor hooks) are left and re-entered (Note [Graph breaks: with blocks]): inside user levels
only, as re-entering one would undo what an inner user manager set. Any other layout, a
generator-based manager (its real generator cannot be made to stand at its yield without running
its code again), an object kiln cannot rebuild, a break at the block's exit call itself, or one
that cannot resume (an uncaught raise, a risky op in the block: `no_resume`) keeps the rewind to
the with statement (Note [Blocks: rewinding to a with statement]); so does a break at an
instruction no break can stop at (UNPACK_SEQUENCE...): the codegen applies the rewind kept in
`e.rewind_fallback` then (rewind_instead). As with every traced with block, the graph before the
break is called outside the manager: an error a graph op raises at run time does not reach __exit__
(Note [Blocks: ops inside try blocks]).
"""

import torch

from kiln.bytecode import BytecodeError, emit
from kiln.frontend.resume import origin


class ExitOnError:
    """Around the instruction run at a break: exits the (still entered) manager only when an
    exception leaves the block there."""

    __slots__ = ("cm", "suppressed")

    def __init__(self, cm):
        self.cm = cm
        self.suppressed = False

    def __enter__(self):
        return None

    def __exit__(self, typ, value, tb):
        if typ is None:
            return False
        result = type(self.cm).__exit__(self.cm, typ, value, tb)
        self.suppressed = bool(result)
        return result


class Entered:
    """A manager entered already: entering does nothing, exiting exits it."""

    __slots__ = ("cm",)

    def __init__(self, cm):
        self.cm = cm

    def __enter__(self):
        return None

    def __exit__(self, typ, value, tb):
        return type(self.cm).__exit__(self.cm, typ, value, tb)


class GradRestore:
    """A grad-mode block entered already: entering does nothing, exiting sets the mode it was
    entered from."""

    __slots__ = ("prev",)

    def __init__(self, prev):
        self.prev = prev

    def __enter__(self):
        return None

    def __exit__(self, typ, value, tb):
        torch._C._set_grad_enabled(self.prev)
        return False


def stays_entered(cm):
    """Whether the manager of a with slot stays entered at a break inside its block."""
    return bool(getattr(cm, "stays_entered", False))


def withs_to_rewind(stack, slots, inst, e):
    """The open with blocks of traced managers the break `e` at `inst` must be rewound out of
    (Note [Blocks: rewinding to a with statement]): none when it is placed where it happens
    (the rewind is kept in `e.rewind_fallback`); `slots`: the stack positions of the open with
    blocks."""
    traced = [stack[k] for k in slots if not getattr(stack[k].cm, "resumable", True)]
    if traced and not e.no_resume and placed_in_block(stack, slots, inst):
        e.rewind_fallback = traced[0].rewind
        for k in slots:
            if hasattr(stack[k].cm, "kept_entered"):
                stack[k].cm.kept_entered = True  # grad-mode levels stay entered too
        return []
    return traced


def rewind_instead(e):
    """Where the break cannot be placed inside the block (an instruction no break can stop at),
    rewind it to the with statement as before, if it can be; whether it was."""
    point = getattr(e, "rewind_fallback", None)
    if point is None:
        return False
    e.break_state.tx.rewind(e, point)
    return True


def placed_in_block(stack, slots, inst):
    """Whether a break at `inst` is placed where it happens (not rewound); `slots`: the stack
    positions of the open with blocks."""
    levels = [stack[k].cm for k in slots]
    if not any(stays_entered(cm) for cm in levels):
        return False
    other = False
    for cm in levels:
        if stays_entered(cm) or hasattr(cm, "kept_entered"):
            if other:
                return False  # a user level inside a re-entered one
        elif not getattr(cm, "resumable", True):
            return False
        else:
            other = True
    if inst.opname in ("FOR_ITER", "RAISE_VARARGS", "RERAISE", "WITH_EXCEPT_START"):
        return False
    if inst.opname in ("CALL", "CALL_KW") and inst.arg is not None:
        consumed = inst.arg + 2 + (inst.opname == "CALL_KW")
        if slots[-1] >= len(stack) - consumed:
            return False  # the block's exit itself
    return True


def load_entered(cg, obj):
    """Push what a resume function enters for this manager: Entered(obj), or obj itself when
    it is an Entered already (a resumed block breaking again)."""
    if obj.python_type() in (Entered, GradRestore):
        cg.reconstruct(obj)
        return
    cg.load_object(Entered, push_null=True)
    cg.reconstruct(obj)
    cg.extend(emit.call(1))


def load_exit_on_error(cg, obj, temp, prev=None):
    """Push ExitOnError(obj) (obj None: GradRestore(prev)), also stored in `temp` (its
    `suppressed` is read after the block)."""
    cg.load_object(ExitOnError, push_null=True)
    if obj is None:
        load_grad_restore(cg, prev)
    else:
        cg.reconstruct(obj)
    cg.extend(emit.call(1))
    cg.extend(emit.copy(1) + emit.store_fast(temp))


def load_grad_restore(cg, prev):
    """Push GradRestore(prev): a grad-mode block that stays entered."""
    cg.load_object(GradRestore, push_null=True)
    cg.extend(emit.load_const(bool(prev)))
    cg.extend(emit.call(1))


_POPS = ("POP_TOP", "POP_EXCEPT", "POP_TOP", "POP_TOP")


def after_suppressed(instructions, handler):
    """Index of the instruction a with block's cleanup `handler` continues at when __exit__
    suppresses the exception (the value stack is then as below the with slot)."""
    i = handler.index + 1
    while i < len(instructions) and instructions[i].opname in ("WITH_EXCEPT_START", "TO_BOOL"):
        i += 1
    jump = instructions[i] if i < len(instructions) else None
    if jump is None or not jump.opname.endswith("_IF_TRUE") or jump.target_index is None:
        raise BytecodeError(f"unexpected with cleanup at {handler!r}")
    t = jump.target_index
    names = tuple(inst.opname for inst in instructions[t : t + len(_POPS)])
    if names != _POPS:
        raise BytecodeError(f"unexpected suppress path {names}")
    return t + len(_POPS)


def after_with_indexes(tx, stack, slots, inst, code):
    """{with slot: the index in the original code (where a resume function's breaks are placed)
    at which its with block continues after its __exit__ suppressed an exception}, for the
    slots whose cleanup is known: a resume function's prologue entered its with blocks, and only
    the cleanups its trace went through are recorded; the others are read from the code, from
    the innermost out (after an inner block's suppress path, the outer block's cleanup covers)."""
    found = origin(code)
    out = {}
    entry = inst.exn_tab_entry
    for p in reversed(slots):
        handler = stack[p].handler
        if handler is None and entry is not None and entry.depth - 1 == p:
            handler = entry.target
        if handler is None:
            break
        try:
            index = after_suppressed(tx.instructions, handler)
        except BytecodeError:
            break
        out[p] = index if found is None else found[1].get(index)
        entry = tx.instructions[index - 1].exn_tab_entry
    return out


def resume_after_suppressed(body, exits, layout, call_resume, after_index):
    """After the instruction's with blocks: where an ExitOnError (its temp in `exits`, by with
    slot) saw its __exit__ suppress the exception, continue after that with statement."""
    for p, temp in exits.items():
        index = after_index(p)
        body.extend(emit.load_fast(temp) + emit.load_attr("suppressed"))
        normal = emit.nop()
        body.extend(emit.pop_jump_if_false(normal[0]))
        built = body.rebuilt()  # Note [Graph breaks: two continuations]
        call_resume(index, layout[:p])
        body.extend(normal)
        body.rebuilt(built)
