"""Graph breaks inside inlined calls, placed where they happen (config.nested_graph_breaks).

Note [Nested breaks: placing the break in the callee]
A break inside a function the root frame called (`f3 -> f2 -> f1`, f1 calls print(x)) used to
be placed at the root's call of f2: the graph ended before that call, Python ran f2 through
kiln's frame entry (its own trace, which broke at its call of f1, and so on) and the work of
every frame on the way got a graph of its own: 2 * depth + 1 graphs for one break. Placed in
f1 instead, the graph holds everything traced before the print (f3's, f2's and f1's ops), the
transformed code of f3 runs the print in Python and then the rest of f1, f2 and f3 runs as one
chain of resume functions (Note [Nested breaks: the chain of resume functions]), traced as one
frame: two graphs, whatever the depth. torch.compile does this under
torch._dynamo.config.nested_graph_breaks (off by default in torch 2.13).

The break is placed in the callee only where that is exactly what eager does; otherwise it is
placed at the root's call as before (`plan` returns None):
- each caller level is at a CALL whose callee is the very function the next frame runs (a user
  function or method, one made in the trace, an unhooked module's forward, or one of these
  decorated by a grad mode in the trace: Note [Nested breaks: grad-mode decorated callees]),
  or at an instruction that only calls it (`obj.a = v` a `__setattr__` or property setter,
  `obj[k]` a `__getitem__`: Note [Nested breaks: implicit calls]): the call's result is that
  frame's return value and nothing else happens in it;
- no inlined frame has a try or with block open at its instruction (an exception from the
  instruction would pass through them) or an exception being handled, or is a generator's
  body; a frame's own cells are made by the transformed code (shared with the closures it
  rebuilds: Note [Functions: rebuilt closures]), its free variables are cells of a traced
  frame (of the chain, or one that returned: a decorator that made the callee), made anew the
  same way, or real cells read from their source (`fn.__closure__[i]` of a decorator's
  wrapper from outside), read before the replay, which may change what the source reads;
- the innermost instruction is one a break may run in Python that does not depend on the frame
  it runs in: not a store of a local or a global, not a call of a builtin that reads the
  running frame (`locals()`, zero-argument `super()`, `sys._getframe`, `warnings.warn`);
- nothing was stored by the part of the innermost instruction that ran before it broke, and
  every value the continuation needs can be rebuilt.
What runs before the break inside the callees (their stores, appends, new objects) is kept and
replayed after the graph, like the root frame's own.
"""

import dataclasses
import inspect
import types
import warnings

import torch

from kiln import config, logs
from kiln.bytecode import PY312_PLUS, emit
from kiln.exc import Unsupported
from kiln.frontend.break_codegen import (
    _BRANCHES,
    _BREAKABLE_PUSHES,
    _TAIL_CALLS,
    NoBreakHere,
    _callee_slot,
    _check_handlers,
    _exit_with_blocks,
    _fast_locals,
    _for_iter_exit,
    _for_iter_resume_index,
    _reads_frame_locals,
    _stack_effect,
    release_dropped_locals,
    run_instruction,
)
from kiln.frontend.bytecode_gen import GRAPH_OUT, PyCodegen, assemble, graph_call, log_bytecode
from kiln.frontend.call_through import reads_caller_frame
from kiln.frontend.entered import stays_entered
from kiln.frontend.indexed_insts import decode as decode_indexed
from kiln.frontend.resume import (
    ResumeUnsupported,
    TailCall,
    inner_function,
    is_boxed,
    make_resume_function,
    origin,
    prologue_call,
    run_resume,
)
from kiln.frontend.side_effects import pin_state_reads
from kiln.frontend.translator import CellRefVariable, FrameCellVariable
from kiln.frontend.variables.builtin import BuiltinVariable
from kiln.frontend.variables.ctx_managers import (
    GradModeFunctionVariable,
    WithExitVariable,
    decorated_by_grad_mode,
)
from kiln.frontend.variables.functions import (
    NestedUserFunctionVariable,
    UserFunctionVariable,
    UserMethodVariable,
    _cell_value,
    _load_cell,
    pin_frame_cell,
)
from kiln.frontend.variables.generators import check_freed_generators
from kiln.frontend.variables.lists import undo_iterators
from kiln.frontend.variables.misc import (
    DeletedVariable,
    GraphBreakVariable,
    NullVariable,
    TensorMethodVariable,
)
from kiln.frontend.variables.nn_module import NNModuleVariable
from kiln.frontend.variables.user_attrs import instance_static

_CALLS = ("CALL", "CALL_KW", "CALL_FUNCTION_EX")
# innermost instructions that would act on the frame they run in (the root's, not the callee's)
_FRAME_BOUND = ("STORE_FAST", "DELETE_FAST", "STORE_GLOBAL", "DELETE_GLOBAL")
# (the builtins read the running frame's locals or globals whatever their arguments: eval's
# `None` mappings mean the frame's own; __import__ reads the frame's package)
_FRAME_READING_CALLS = (
    warnings.warn,
    warnings.warn_explicit,
    super,
    eval,
    exec,
    locals,
    vars,
    dir,
    globals,
    __import__,
)
_C_FRAME_READERS = {"_getframe", "_getframemodulename", "currentframe"}


@dataclasses.dataclass
class _Level:
    """One frame of the chain: where its resume function continues and with what."""

    tx: object
    stack: list  # the value stack before its instruction
    locals: dict
    resume: object  # ResumeFunction
    prefix: int  # stack positions kept below the instruction's results
    live: list
    discards: bool = False  # innermost: a POP_TOP follows, Python drops the result at once
    withs: list = dataclasses.field(default_factory=list)  # slots of open with blocks
    mode: object = None  # the GradModeVariable a decorated call of the frame entered


def plan(output, e):
    """The levels (innermost first, the root last) of a break placed inside the inlined call
    where it happened, or None: the break is placed at the root frame's call."""
    if not config.nested_graph_breaks or not e.nested or e.break_state is None:
        return None
    why = _not_nestable(e)
    if why is not None:
        return _kept_at_the_call(e, why)
    inst = e.nested[0].tx.instructions[e.nested[0].index]
    branch = _BRANCHES.get(inst.opname)
    if inst.opname == "FOR_ITER":
        branch = "FOR_ITER"
    try:
        if branch is None:
            sides = [_levels(e)]
        else:  # Note [Nested breaks: a branch on tensor data]
            sides = [_levels(e, side) for side in ("next", "target")]
        for levels in sides:
            _check_rebuilds(output, levels)
    except (NoBreakHere, ResumeUnsupported, Unsupported) as err:
        return _kept_at_the_call(e, str(err))
    if output.side_effects.mark()[:5] != e.nested[0].effects_mark[:5]:
        return _kept_at_the_call(e, "the instruction that broke stored something first")
    return _Plan(sides, branch)


def _not_nestable(e):
    """Why the break cannot be placed inside the callee whatever its frames hold, or None."""
    if len(e.nested) + 1 != len(e.frames):
        return "a frame on the way is no inlined call"
    if e.eager_frame or e.no_resume or e.break_state.resume_here:
        return "the break needs the whole frame, or a try block's start"
    if getattr(e, "module_call_broke", False):
        return "a module call with hooks"
    if getattr(e, "rest_in_python", False):
        return "kiln.skip_frame"
    return None


def _kept_at_the_call(e, why):
    """Log why a break inside a callee is placed at the root frame's call; returns None."""
    if logs.enabled("graph_breaks"):
        callee = e.frames[-2][0].co_qualname if len(e.frames) > 1 else "?"
        logs.log("graph_breaks", "break inside %s placed at its call: %s", callee, why)
    return None


@dataclasses.dataclass
class _Plan:
    """The chain of levels to resume (innermost first), one per way out of a branch."""

    sides: list  # [levels] or, at a branch, [levels if it falls through, levels if it jumps]
    branch: object  # the emit function of the innermost branch, "FOR_ITER", or None


# Note [Nested breaks: a branch on tensor data]
# A POP_JUMP_IF_* on a tensor inside a callee is run by the root's transformed code (Python
# calls bool() on the tensor), each way out returning its own chain: the callee's resume
# function continues after the jump or at its target, its callers' are the same code but
# for the inner call they make (each chain its own root code), as at a branch in the root
# (Note [Graph breaks: two continuations]). A FOR_ITER over an iterator kiln cannot see into
# likewise: one chain continues in the loop's body with the next item, the other after the loop.


def _levels(e, side=None):
    """Check every frame of the chain and build its resume function (NoBreakHere if not);
    side: which way out of the innermost branch, or None."""
    root = e.break_state
    frames = [*e.nested, root]
    levels = []
    for i, state in enumerate(frames):
        tx, is_root, innermost = state.tx, state is root, i == 0
        inst = tx.instructions[state.index]
        stack = list(state.stack)
        withs = _open_withs(stack, side)
        if is_root:
            _check_handlers(tx, inst, [stack[k] for k in withs])
        else:
            _check_inlined_frame(tx, inst, [stack[k] for k in withs])
        if not innermost and inst.opname in _IMPLICIT_CALLS:
            inner = frames[i - 1].tx
            if inner.parent is not tx or not _calls_only(inst, stack, inner.fn):
                raise NoBreakHere(f"a {inst.opname} that is more than its callee's frame")
        elif not innermost:
            if inst.opname not in _CALLS:
                raise NoBreakHere(f"a caller at {inst.opname}")
            slot = _callee_slot(inst, stack)
            inner = frames[i - 1].tx
            callee = None if slot is None else stack[slot]
            if type(callee) is GradModeFunctionVariable:
                levels[-1].mode = _decorated_mode(e, callee, inner, side)
                callee = callee.fn
            if callee is None or inner.parent is not tx or not _runs(callee, inner):
                raise NoBreakHere("a call that is more than its callee's frame")
        elif side is None:
            _check_innermost(inst, stack)
        inner = levels[-1].resume.code if levels else None
        levels.append(_level(state, inst, stack, inner, is_root, tx, side, withs))
    return levels


# Note [Nested breaks: with blocks]
# Frames of the chain may be inside `with` blocks over managers whose enter/exit only set and
# restore state (grad mode, autocast: those a root-level break leaves and re-enters, Note [Graph
# breaks: with blocks]). The graph ends with the exits of every open block, innermost first; the
# root's transformed code runs the innermost instruction inside fresh managers of all of them,
# the root's outermost first (an exception from it passes through their exits, as in eager), and
# hands each level's resume function a fresh manager in each block's stack slot, which its
# prologue enters (setup_with_blocks; the inner resume function's call in the prologue lies in
# the block, under its cleanup handler). User managers (entered once, exited once), a branch or
# FOR_ITER as the innermost instruction, and try blocks keep the break at the root's call.
# Note [Nested breaks: grad-mode decorated callees]
# A callee decorated by a grad mode (`torch.no_grad()(fn)`, `@torch.enable_grad()` applied while
# tracing: GradModeFunctionVariable) runs its frame inside that mode, as if its whole body were
# a with block of it: at a break inside, the graph ends with the mode's exit, the innermost
# instruction runs inside a fresh manager of it (Note [Nested breaks: with blocks]), and the
# caller's resume function calls the callee's through the same decorator
# (`no_grad()(R_callee)(box)`), which sets the mode and restores the caller's on the way out,
# an exception's way too. The decorator's wrapper is a torch function the caller's trace inlines
# (guarded by its code and the type of the manager it makes, not by identity).
_MODE_DECORATORS = (torch.no_grad, torch.enable_grad, torch.set_grad_enabled)


def _decorated_mode(e, callee, inner, side):
    """The GradModeVariable the decorated callee's call entered around frame `inner`."""
    mode = e.grad_modes.get(id(inner))
    if mode is None or callee.cls not in _MODE_DECORATORS:
        raise NoBreakHere(f"a callee decorated by {callee.cls.__name__}")
    if side is not None:
        raise NoBreakHere("a branch inside a grad-mode decorated callee")
    return mode


def _open_blocks(levels):
    """The with blocks open at the innermost instruction, the root's outermost first: each
    frame's own, after the mode its decorated call entered (Note [Nested breaks: grad-mode
    decorated callees])."""
    blocks = []
    for level in reversed(levels):
        if level.mode is not None:
            blocks.append(WithExitVariable(level.mode))
        blocks += [level.stack[k] for k in level.withs]
    return blocks


def _open_withs(stack, side):
    """The stack slots of the frame's open with blocks (NoBreakHere for one kiln cannot leave
    and re-enter there)."""
    withs = [k for k, v in enumerate(stack) if isinstance(v, WithExitVariable)]
    for k in withs:
        cm = stack[k].cm
        if stays_entered(cm) or not getattr(cm, "resumable", True) or not hasattr(cm, "load_fresh"):
            raise NoBreakHere("inside a with block of a manager entered once")
    if withs and side is not None:
        raise NoBreakHere("a branch inside a with block")
    return withs


def _check_inlined_frame(tx, inst, open_withs):
    if getattr(tx, "is_generator", False):
        raise NoBreakHere("a generator's body")
    if inspect.isfunction(tx.fn) and reads_caller_frame(tx.fn):
        # (its caller would be the chain's frame: it runs plain from the root's, as before)
        raise NoBreakHere("a callee that reads its caller's frame")
    handlers = {id(v.handler) for v in open_withs}
    befores = [getattr(v, "before_inst", None) for v in open_withs]  # (their BEFORE_WITHs)
    entries = [inst.exn_tab_entry] + [b.exn_tab_entry for b in befores if b is not None]
    if (
        tx.exc_info is not None
        or any(id(h) not in handlers for h in tx.with_handlers)
        or any(x is not None and id(x.target) not in handlers for x in entries)
    ):
        raise NoBreakHere("inside a try block of a callee")


def _check_innermost(inst, stack):
    name = inst.opname
    if name in _FRAME_BOUND or name not in _BREAKABLE_PUSHES:
        raise NoBreakHere(f"at {name} in a callee")
    if name == "LOAD_ATTR" and (inst.arg or 0) & 1 and PY312_PLUS:
        raise NoBreakHere("at a LOAD_ATTR of a method")
    if name in _CALLS:
        if name != "CALL_FUNCTION_EX" and _reads_frame_locals(stack, inst.arg):
            raise NoBreakHere("a call that reads the frame's locals")
        slot = _callee_slot(inst, stack)
        if slot is None or _reads_frames(stack[slot]):
            raise NoBreakHere("a call that reads the running frame")


def _reads_frames(callee):
    """Whether the callee may read the frame it is called from (which would be the root's)."""
    if isinstance(callee, BuiltinVariable):
        return callee.fn in _FRAME_READING_CALLS
    if isinstance(callee, GraphBreakVariable | TensorMethodVariable):
        return False  # (a tensor's methods are torch's: a warning one raises names the root's
        # call line, as the break's own line is the callee's, not the frame's it runs in)
    value = getattr(callee, "fn", None) or getattr(callee, "value", None)
    if value is None:
        try:
            value = callee.as_python_constant()
        except Exception:
            return True  # (unknown: kept at the root's call)
    if any(value is f for f in _FRAME_READING_CALLS):
        return True
    if getattr(value, "__name__", None) in _C_FRAME_READERS:
        return True
    fn = getattr(value, "__func__", value)
    return inspect.isfunction(fn) and reads_caller_frame(fn)


def _cell_refs(tx, chain):
    """What each cell of an inlined frame's resume function is (Note [Functions: rebuilt
    closures]), in its closure order: the frame's own cells, made anew by the transformed code
    (shared with the closures it rebuilds), then its free variables: a cell of a frame of the
    chain, or a real cell read from its source."""
    refs = [CellRefVariable(tx, name) for name in tx.code.co_cellvars]
    for name in tx.code.co_freevars:
        entry = tx.closure.get(name)
        if isinstance(entry, CellRefVariable):
            # (of a frame of the chain, or of one that returned, the maker of a closure: a
            # cell made by the transformed code either way, one per cell however often loaded)
            refs.append(entry)
        elif isinstance(entry, tuple):
            # the root frame's own (LOAD_CLOSURE), or a real cell of a function from outside
            # (a decorator's wrapper, a method's __class__): `fn.__closure__[i]`, or the cell
            # itself where the function has no source (one the trace guarded, found through a
            # class: a method of an object made in the frame)
            refs.append(FrameCellVariable(entry))
        else:
            raise NoBreakHere("a callee over cells of a frame that has returned")
    return refs


def _pin_outside_cells(body, sides):
    """Load the real cells of functions from outside that the chain's resume functions close
    over before the replay: their sources may read state it changes (`fn` reached through the
    items an iterator has left, which the replay advances)."""
    for levels in sides:
        chain = [level.tx for level in levels]
        for level in levels[:-1]:
            for ref in _cell_refs(level.tx, chain):
                if isinstance(ref, FrameCellVariable):
                    pin_frame_cell(body, ref)


def _runs(callee, inner):
    """Whether calling `callee` runs exactly the inlined frame `inner` and returns its value."""
    fn = inner.fn
    if type(callee) in (UserFunctionVariable, UserMethodVariable):
        return callee.fn is fn
    if type(callee) is NestedUserFunctionVariable:  # (made in a frame of the chain)
        made, got = callee.closure, inner.closure
        return (
            inner.code is callee.code
            and made.keys() == got.keys()
            and all(made[n] is got[n] for n in made)
        )
    if type(callee) is NNModuleVariable:
        mod = callee.value
        if mod._forward_hooks or mod._forward_pre_hooks or hasattr(mod, "has_uninitialized_params"):
            return False
        forward = mod.__dict__.get("forward") or type(mod).forward
        return getattr(forward, "__func__", forward) is fn
    return False


# Note [Nested breaks: implicit calls]
# Some instructions call a user function of their operand's type and do nothing else: STORE_ATTR
# a `__setattr__` or a property's setter, STORE_SUBSCR/DELETE_SUBSCR `__setitem__`/`__delitem__`,
# BINARY_SUBSCR `__getitem__`, LOAD_ATTR a property's getter (or `__getattr__`,
# `__getattribute__`), pushing what it returns or dropping it. A caller level at one of them is
# a call like CALL's: its resume function's prologue calls the callee's and pushes the result,
# or drops it (drop_inner). What the instruction would call is looked up on the operand's type
# (a user class's dict entries, which the trace that inlined the call guarded) and must be the
# very function of the inlined frame; a getter whose AttributeError would fall back to a
# `__getattr__` is not such a call (eager would go on into `__getattr__`).
# {opname: (operand position from the top, dunder called, how many results it pushes)}
_IMPLICIT_CALLS = {
    "STORE_ATTR": (1, "__setattr__", 0),
    "LOAD_ATTR": (1, "__getattribute__", 1),
    "STORE_SUBSCR": (2, "__setitem__", 0),
    "DELETE_SUBSCR": (2, "__delitem__", 0),
    "BINARY_SUBSCR": (2, "__getitem__", 1),
    "BINARY_SLICE": (3, "__getitem__", 1),  # 3.12+
    "STORE_SLICE": (3, "__setitem__", 0),  # 3.12+
}


def _calls_only(inst, stack, fn):
    """Whether running `inst` on `stack` is calling the user function `fn` and nothing else."""
    depth, dunder, _ = _IMPLICIT_CALLS[inst.opname]
    if not inspect.isfunction(fn) or len(stack) < depth:
        return False
    if inst.opname == "LOAD_ATTR" and (inst.arg or 0) & 1 and PY312_PLUS:
        return False  # (a method load: pushes two values)
    try:
        cls = stack[-depth].python_type()
    except Exception:
        return False
    if issubclass(cls, type) and dunder == "__getitem__":
        return False  # (`C[int]` may be __class_getitem__)

    def entry(name, of=cls):
        return instance_static(of, name, None)

    fallback = entry("__getattr__")
    if entry(dunder) is fn:
        return dunder != "__getattribute__" or fallback is None
    if inst.opname == "LOAD_ATTR":
        if fallback is not None:
            return fallback is fn  # (its answer is the load's)
        if entry("__getattribute__") is not object.__getattribute__:
            return False
        desc = entry(inst.argval)
        return isinstance(desc, property) and desc.fget is fn
    if inst.opname == "STORE_ATTR" and entry("__setattr__") is object.__setattr__:
        desc = entry(inst.argval)
        if isinstance(desc, property):
            return desc.fset is fn
        return desc is not None and entry("__set__", type(desc)) is fn
    return False


def _level(state, inst, stack, inner, is_root, tx, side=None, withs=()):
    """The resume function of one level (boxed but at the root; calling the resume function of
    the level below, `inner`, but for the innermost; `side` of the innermost's branch)."""
    frame_code, innermost = tx.code, inner is None
    found = origin(frame_code)
    live = sorted(
        n
        for n, v in state.locals.items()
        if not isinstance(v, DeletedVariable) and not (found and n.startswith("__stack"))
    )
    depth = len(stack) + _stack_effect(inst)  # after the instruction
    implicit = _IMPLICIT_CALLS.get(inst.opname)
    drops = not innermost and implicit is not None and implicit[2] == 0
    base_code, base_index = frame_code, state.index
    resume_at = base_index + 1
    if found is not None:
        base_code = found[0]
        base_index = found[1].get(state.index)
        if base_index is None:
            at = prologue_call(frame_code)
            if innermost or at is None or at[0] != state.index:
                raise NoBreakHere("inside a resume function's prologue")
            # the chain's call: its frame continues where it resumed
            resume_at, drops = at[1], at[2]
        else:
            resume_at = base_index + 1
    if innermost:
        kept = depth - _BREAKABLE_PUSHES.get(inst.opname, 0)
    else:  # (the inner call's result on top, or dropped: Note [Nested breaks: implicit calls])
        # (what the instruction pushes: a prologue's call pushes the result its POP_TOP drops)
        pushes = implicit[2] if implicit is not None and inst.opname not in _CALLS else 1
        kept = depth - pushes
        depth = kept + 1
    if innermost and side is not None and inst.opname == "FOR_ITER":
        if side == "next":  # the iterator stays, its next item on top
            depth, kept = len(stack) + 1, len(stack)
        else:  # exhausted: the iterator popped, after the loop
            depth = kept = len(stack) - 1
            resume_at = _for_iter_resume_index(decode_indexed(base_code)[resume_at - 1])
    elif innermost and side is not None:  # the condition popped; on, or at the target
        depth = kept = len(stack) - 1
        if side == "target":
            resume_at = decode_indexed(base_code)[resume_at - 1].target_index
    discards = False
    if innermost and kept < depth:
        insts = decode_indexed(base_code)
        discards = resume_at < len(insts) and insts[resume_at].opname == "POP_TOP"
    if discards:  # (the result dies at once, as in eager: Note [Finalizers: a store that ...])
        depth, resume_at = kept, resume_at + 1
    nulls = [k for k in range(kept) if isinstance(stack[k], NullVariable)]
    if withs and withs[-1] >= kept:
        raise NoBreakHere("the instruction consumes a with block's slot")
    resume = make_resume_function(
        base_code,
        resume_at,
        depth,
        nulls,
        live,
        setup_with_blocks=withs,
        boxed=not is_root,
        inner_call=inner,
        drop_inner=drops,
    )
    if not is_root and resume.code.co_freevars != frame_code.co_cellvars + frame_code.co_freevars:
        raise NoBreakHere("a callee's resume function with other cells")
    prefix = kept
    live = list(resume.live_locals)
    return _Level(tx, stack, state.locals, resume, prefix, live, discards, list(withs))


def _values(level, innermost):
    """The variables the level's continuation rebuilds (its whole stack for the innermost)."""
    stack = level.stack if innermost else level.stack[: level.prefix]
    out = [v for v in stack if not isinstance(v, NullVariable | WithExitVariable)]
    out += [level.locals[n] for n in level.live]
    if level.resume.first_local:
        out.append(level.locals[level.resume.first_local])
    if not level.tx.is_root:  # (the values its cells get)
        out += [v for n in level.tx.code.co_cellvars if (v := _cell_value(level.tx, n))]
    return out


def _check_rebuilds(output, levels):
    """Unsupported if a value of the chain cannot be rebuilt (checked before the graph is cut,
    so that the break can still be placed at the root's call)."""
    values = [v for k, level in enumerate(levels) for v in _values(level, k == 0)]
    made = tuple(output.made_classes)
    for k, level in enumerate(levels[:-1]):
        for v in _values(level, k == 0):
            if made and _of_made_class(v, made):
                # (a class made per call: the chain's guards would fail on every call)
                raise NoBreakHere("a callee's value of a class made in the frame")
    check_freed_generators(output, values)
    dry = PyCodegen(output)
    for v in values:
        dry.reconstruct(v)
    chain = [level.tx for level in levels]
    for level in levels[:-1]:
        for ref in _cell_refs(level.tx, chain):
            _load_cell(dry, ref)


def _of_made_class(v, made):
    """Whether variable v is a class the trace made, or an instance of one."""
    try:
        cls = v.python_type()
    except Exception:
        return False
    value = getattr(v, "value", None)
    return any(c in made for c in getattr(cls, "__mro__", ())) or (
        isinstance(value, type) and any(c in made for c in value.__mro__)
    )


def code_at_nested_break(output, code, e, plan, resume_factory, callee_factory):
    """The transformed code of the root frame for a break placed in an inlined call."""
    levels = plan.sides[0]
    innermost, root = levels[0], levels[-1]
    state, root_index = e.nested[0], e.break_state.index
    output.rollback(state.checkpoint)
    undo_iterators(since=state.effects_mark[5])
    open_withs = _open_blocks(levels)
    _exit_with_blocks(e.break_state.tx, output, open_withs)  # Note [Nested breaks: with blocks]
    body = PyCodegen(output, callee_factory)
    body.closure_callee = resume_factory
    pins = [v for levels in plan.sides for k, lv in enumerate(levels) for v in _values(lv, k == 0)]
    for name in code.co_cellvars:
        value = root.locals.get(name)
        if value is not None and not isinstance(value, DeletedVariable):
            pins.append(value)
    check_freed_generators(output, pins)
    _pin_outside_cells(body, plan.sides)
    output.side_effects.codegen(body, pin=pins)
    pin_state_reads(body, pins)  # Note [Graph breaks: values read before the instruction]
    for name in code.co_cellvars:  # (as at a break in the root frame: the real cells)
        value = root.locals.get(name)
        if value is not None and not isinstance(value, DeletedVariable):
            body.reconstruct(value)
            body.extend(emit.store_deref(name))
    # the innermost instruction, run by Python, its results left on the value stack
    inst = innermost.tx.instructions[state.index]
    # (at the root's call: the line the root frame shows in a traceback from it)
    line = e.break_state.tx.instructions[root_index]
    if plan.branch is None:
        temps = _run_innermost(body, innermost, inst, state.kw_names, line, open_withs)
        _return_chain(body, code, e, levels, resume_factory, temps)
    else:
        _push_stack(body, innermost.stack)  # Note [Nested breaks: a branch on tensor data]
        other = _for_iter_exit() if plan.branch == "FOR_ITER" else emit.nop()
        if plan.branch == "FOR_ITER":
            jump = emit.inst("FOR_ITER", target=other[0])
        else:
            jump = plan.branch(other[0])
        for made in jump:
            made.lineno, made.positions = line.lineno, line.positions
        body.extend(jump)
        body.instruction_run = jump[0]
        built = body.rebuilt()  # Note [Graph breaks: two continuations]
        _return_chain(body, code, e, plan.sides[0], resume_factory)
        body.extend(other)
        body.rebuilt(built)
        _return_chain(body, code, e, plan.sides[1], resume_factory)
    release_dropped_locals(body, code, root.locals)
    new_code = assemble(code, graph_call(output, body) + body.instrs, body.temp_names)
    log_bytecode(code, new_code)
    return new_code


def _push_stack(body, stack):
    """Rebuild a frame's value stack (a fresh manager in each with block's slot)."""
    for v in stack:
        if isinstance(v, NullVariable):
            body.extend(emit.push_null())
        elif isinstance(v, WithExitVariable):
            v.cm.load_fresh(body)
        else:
            body.reconstruct(v)


def _park_stack(body, depth):
    """Store the top `depth` values into new temps (bottom first in the list)."""
    temps = [body.new_temp() for _ in range(depth)]
    for k in reversed(range(depth)):
        body.extend(emit.store_fast(temps[k]))  # (safe for a NULL)
    return temps


def _run_innermost(body, innermost, inst, kw_names, line, open_withs):
    """Run the innermost instruction on its rebuilt stack, inside fresh managers of the open
    with blocks (Note [Nested breaks: with blocks]); the temps of the stack after it."""
    saved, body.instrs = body.instrs, []
    _push_stack(body, innermost.stack)
    run_instruction(body, inst, kw_names, line=line)
    if innermost.discards:
        body.extend(emit.pop_top())
    temps = _park_stack(body, innermost.resume.stack_depth)
    inner, body.instrs = body.instrs, saved
    for depth in reversed(range(len(open_withs))):
        load = PyCodegen(body.output)
        open_withs[depth].cm.load_fresh(load)
        inner = emit.with_block(load.instrs, inner, depth=depth)
    body.extend(inner)
    return temps


def _return_chain(body, code, e, levels, resume_factory, temps=None):
    """With the innermost frame's stack after its instruction on the value stack (or in
    `temps`), return the chain of resume functions called (Note [Nested breaks: the chain of
    resume functions])."""
    depth = levels[0].resume.stack_depth
    if temps is None:
        temps = _park_stack(body, depth)
    box, chain = None, [level.tx for level in levels]
    for k, level in enumerate(levels):
        if level is levels[-1]:
            _call_root(body, code, e, level, box, resume_factory)
        else:
            box = _build_box(body, level, box, temps if k == 0 else None, chain)


def _load_args(body, level, inner, temps):
    """Load the level's arguments: the first local (if any), the stack (the inner call's function
    and box in its slot, or the innermost's values from temps), then the live locals."""
    resume = level.resume
    if resume.first_local:  # (zero-argument super() reads it: it stays first)
        body.reconstruct(level.locals[resume.first_local])
    for k in range(resume.stack_depth):
        if k in resume.null_positions:
            continue
        if temps is None and k in level.withs:
            level.stack[k].cm.load_fresh(body)
        elif temps is not None:
            body.extend(emit.load_fast(temps[k]))
        elif k == resume.stack_depth - 1:
            fn, box = inner  # (the function, or the temp holding one made per call)
            if isinstance(fn, str):
                body.extend(emit.load_fast(fn))
            else:
                body.load_object(fn)
            body.extend(emit.load_fast(box))
        else:
            body.reconstruct(level.stack[k])
    for name in resume.live_locals:
        body.reconstruct(level.locals[name])


def _build_box(body, level, inner, temps, chain):
    """The box of a callee's resume function, stored in a temp: (its function, or the temp of
    one made over its cells, the box's temp)."""
    resume = level.resume
    _load_args(body, level, inner, temps)
    body.extend(emit.build_list(resume.nargs))
    name = body.new_temp()
    body.extend(emit.store_fast(name))
    if not resume.code.co_freevars:
        fn = inner_function(resume.code, level.tx.f_globals)
    else:
        fn = _function_over_cells(body, level, chain)
    if level.mode is None:
        return fn, name
    # Note [Nested breaks: grad-mode decorated callees]
    body.load_object(decorated_by_grad_mode, push_null=True)
    body.load_object(level.mode.mode)
    if isinstance(fn, str):
        body.extend(emit.load_fast(fn))
    else:
        body.load_object(fn)
    wrapped = body.new_temp()
    body.extend(emit.call(2) + emit.store_fast(wrapped))
    return wrapped, name


def _function_over_cells(body, level, chain):
    """Make the level's resume function over its cells at run time (a new function per call,
    which the chain's guards check by its code and globals); the temp holding it."""
    code = level.resume.code
    body.load_object(types.FunctionType, push_null=True)
    body.extend(emit.load_const(code))
    body.load_object(level.tx.f_globals)
    body.extend(emit.load_const(code.co_name) + emit.load_const(None))
    fills = [_load_cell(body, ref) for ref in _cell_refs(level.tx, chain)]
    body.extend(emit.build_tuple(len(fills)) + emit.call(5))
    fn = body.new_temp()
    body.extend(emit.store_fast(fn))
    for fill in fills:  # (after the function exists: Note [Functions: rebuilt closures])
        if fill is not None:
            store, value = fill
            body.reconstruct(value)
            body.extend(store)
    return fn


def _call_root(body, code, e, level, inner, resume_factory):
    """Return the root's resume function called on its box (Note [Resume: tail calls])."""
    resume = level.resume
    if origin(code) is not None and _TAIL_CALLS and not is_boxed(code):
        body.load_object(TailCall, push_null=True)
    elif _TAIL_CALLS:
        body.load_object(run_resume, push_null=True)
    body.load_object(resume_factory(resume.code, box=True), push_null=not _TAIL_CALLS)
    made = bool(resume.code.co_freevars)
    if made:  # (Note [Cache: closures made per call])
        body.extend(resume.emit_make_function())
    _load_args(body, level, inner, None)
    body.extend(emit.build_list(made + resume.nargs))
    # Note [Resume: arguments moved, not held]: this frame returns right after the call
    for name in (*_fast_locals(code), GRAPH_OUT, *body.temp_names):
        body.extend(emit.load_const(None) + emit.store_fast(name))
    body.extend(emit.call(2 if _TAIL_CALLS else 1))
    body.extend(emit.return_value())
