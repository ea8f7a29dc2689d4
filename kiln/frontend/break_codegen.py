"""The transformed code at a graph break: the graph so far, the instruction that broke run in
Python (inside the open with blocks), and the call of the resume function that continues
(Note [Graph breaks: the transformed code])."""

import dataclasses
import dis

import torch

from kiln.bytecode import (
    FOR_ITER_SKIPS,
    PY312_PLUS,
    PY313_PLUS,
    emit,
)
from kiln.frontend.bytecode_gen import (
    GRAPH_OUT,
    PY311,
    PyCodegen,
    assemble,
    graph_call,
    log_bytecode,
)
from kiln.frontend.entered import (
    after_with_indexes,
    resume_after_suppressed,
    rewind_instead,
    stays_entered,
)
from kiln.frontend.indexed_insts import decode as decode_indexed
from kiln.frontend.resume import (
    ResumeUnsupported,
    TailCall,
    is_boxed,
    make_resume_function,
    origin,
    prologue_call,
    run_resume,
)
from kiln.frontend.side_effects import pin_state_reads
from kiln.frontend.variables.builtin import BuiltinVariable
from kiln.frontend.variables.ctx_managers import SAVED_HOOKS_SWITCHES, WithExitVariable
from kiln.frontend.variables.finalizers import LOCAL_STORES, after_local_store
from kiln.frontend.variables.functions import UserMethodVariable
from kiln.frontend.variables.generators import check_freed_generators
from kiln.frontend.variables.lists import undo_iterators
from kiln.frontend.variables.misc import DeletedVariable, NullVariable
from kiln.symbolic.autocast_state import STATE_NODES


class NoBreakHere(Exception):
    """A graph break cannot be placed at this instruction; the frame runs eagerly."""


# Instructions a graph break may execute in Python between the graph and the resume function,
# with the number of values each pushes (Note [Graph breaks: the transformed code]).
_BREAKABLE_PUSHES = {
    "CALL": 1,
    "CALL_KW": 1,
    "CALL_FUNCTION_EX": 1,
    "BINARY_OP": 1,
    "BINARY_SUBSCR": 1,
    "BUILD_SLICE": 1,
    "BINARY_SLICE": 1,  # 3.12+
    "COMPARE_OP": 1,
    "CONTAINS_OP": 1,
    "IS_OP": 1,
    "UNARY_NEGATIVE": 1,
    "UNARY_NOT": 1,
    "UNARY_INVERT": 1,
    "TO_BOOL": 1,
    "FORMAT_VALUE": 1,
    "BUILD_STRING": 1,
    "STORE_ATTR": 0,
    "STORE_SUBSCR": 0,
    "STORE_SLICE": 0,  # 3.12+
    "DELETE_SUBSCR": 0,
    "STORE_GLOBAL": 0,
    "STORE_FAST": 0,  # (Note [Finalizers: locals])
    "DELETE_FAST": 0,
    "GET_ITER": 1,
    "LOAD_ATTR": 1,  # the plain form only (see _breakable)
}
_BRANCHES = {
    "POP_JUMP_IF_FALSE": emit.pop_jump_if_false,
    "POP_JUMP_FORWARD_IF_FALSE": emit.pop_jump_if_false,
    "POP_JUMP_BACKWARD_IF_FALSE": emit.pop_jump_if_false,
    "POP_JUMP_IF_TRUE": emit.pop_jump_if_true,
    "POP_JUMP_FORWARD_IF_TRUE": emit.pop_jump_if_true,
    "POP_JUMP_BACKWARD_IF_TRUE": emit.pop_jump_if_true,
}


def transformed_code_at_break(output, code, e, instructions, resume_factory, callee_factory):
    """The transformed code of a frame whose trace stopped with Unsupported `e`.

    Note [Graph breaks: the transformed code]
        ___out = <graph so far>(inputs...)            # the graph of what came before
        <rebuild the stack from graph outputs / sources / constants>
        <the unsupported instruction, run by Python>  # a call: a user callee that broke
                                                       # inside runs through kiln's frame entry
        return __resume_at_N(<stack>, <live locals>)  # kiln-compiled resume function
    A data-dependent branch (POP_JUMP_IF_* on a tensor) becomes the jump itself with one resume
    function per side; FOR_ITER over an iterator kiln cannot see into (a resume function's loop)
    becomes the FOR_ITER itself, resuming in the body or after the loop; BEFORE_WITH of a context
    manager kiln does not trace resumes at the BEFORE_WITH itself (the resume function runs it).
    Inside traced `with` blocks (grad mode): Note [Graph breaks: with blocks]. Inside loops:
    Note [Resume: breaks in resume functions] and Note [Resume: tail calls]. Breaks inside
    try/except blocks, or at other instructions, raise NoBreakHere: the frame runs eagerly.
    """
    try:
        site = _break_site(code, e, instructions)
    except NoBreakHere:
        if not rewind_instead(e):  # Note [Blocks: breaks inside a user with block]
            raise
        site = _break_site(code, e, instructions)
    _cut_graph_at(output, e.break_state, site)
    writer = _BreakCodegen(output, code, e, site, resume_factory, callee_factory)
    writer.write()
    writer.release_dropped_locals()
    new_code = assemble(
        code, graph_call(output, writer.body) + writer.body.instrs, writer.body.temp_names
    )
    log_bytecode(code, new_code)
    return new_code


@dataclasses.dataclass(frozen=True)
class _BreakSite:
    """Where a graph break is placed and how the transformed code continues there."""

    inst: object  # the instruction of the break (in the traced code)
    stack: list  # the value stack before it (VariableTrackers)
    withs: list  # stack positions of open with-blocks (WithExitVariable)
    kind: str  # "branch" | "FOR_ITER" | "BEFORE_WITH" | "RAISE_VARARGS" | "resume_here" | opname
    branch: object  # the emit function of a data-dependent branch, else None
    base_code: object  # the original code (a resume function's breaks are placed in it)
    base_index: int  # the instruction's index in base_code
    base_inst: object
    in_resume: bool  # the traced code is a resume function
    discards: bool = False  # a POP_TOP follows: Python drops the result at once
    drops: bool = False  # a prologue's inner call whose result the instruction drops


def _break_site(code, e, instructions):
    """Where break `e` goes, or NoBreakHere (Note [Graph breaks: the transformed code])."""
    state = e.break_state
    inst = instructions[state.index]
    if e.eager_frame:
        raise NoBreakHere("the frame runs eagerly")
    if e.no_resume:
        raise NoBreakHere("the graph so far holds code from a try/except block")
    stack = list(state.stack)
    withs = [k for k, v in enumerate(stack) if isinstance(v, WithExitVariable)]
    drops = False
    resume_here = state.resume_here  # Note [Blocks: rewinding to a try block]
    _check_handlers(state.tx, None if resume_here else inst, [stack[k] for k in withs])
    # a break in a resume function is placed in the original code (same stack layout)
    base_code, base_index, base_insts = code, state.index, instructions
    found = origin(code)
    if found is not None:
        base_index = found[1].get(state.index)
        at = prologue_call(code)
        if base_index is None and at is not None and at[0] == state.index:
            # the call of a chain's callee (Note [Nested breaks: the chain of resume functions])
            # breaking where no nested break can be placed: Python calls it (compiled as its own
            # frame) and this frame resumes where its resume function began
            base_index, drops = at[1] - 1, at[2]
            if drops and withs:
                raise NoBreakHere("a call whose result is dropped, inside a with block")
        if base_index is None:
            raise NoBreakHere("inside a resume function's prologue")
        base_code = found[0]
        base_insts = decode_indexed(base_code)
    branch = _BRANCHES.get(inst.opname)
    kind = "branch" if branch is not None else inst.opname
    if resume_here:
        kind = "resume_here"
    if kind == "LOAD_ATTR" and (inst.arg or 0) & 1 and not PY311:
        raise NoBreakHere("at a LOAD_ATTR of a method (it pushes one or two values)")
    if kind not in ("branch", "FOR_ITER", "BEFORE_WITH", "RAISE_VARARGS", "resume_here") and (
        kind not in _BREAKABLE_PUSHES
    ):
        raise NoBreakHere(f"at {inst.opname}")
    if kind == "RAISE_VARARGS" and (withs or inst.arg == 0):
        raise NoBreakHere("a raise inside a with block, or a bare raise")
    if kind == "FOR_ITER" and withs:
        raise NoBreakHere("FOR_ITER inside a with block")
    if kind == "CALL" and _reads_frame_locals(stack, inst.arg):
        raise NoBreakHere("a call that reads the frame's local variables")
    return _BreakSite(
        inst,
        stack,
        withs,
        kind,
        branch,
        base_code,
        base_index,
        base_insts[base_index],
        found is not None,
        base_index + 1 < len(base_insts) and base_insts[base_index + 1].opname == "POP_TOP",
        drops,
    )


# Note [Graph breaks: calls that read the frame's locals]
# The transformed code keeps the frame's locals in kiln's state until the resume function gets
# them as arguments: a builtin that reads the running frame's local variables (locals(), vars() and
# dir() without arguments, exec/eval without a locals mapping) would see them missing there
# (`match w: case x: locals()` gave {}), so such a call is no place for a break: the frame runs
# eagerly. {builtin: the largest number of arguments with which it still reads the frame}
_FRAME_READERS = {locals: 0, vars: 0, dir: 0, exec: 1, eval: 1}


def _reads_frame_locals(stack, argc):
    """Whether the CALL with `argc` arguments on `stack` calls a builtin that reads the frame
    (exec/eval given None for its mappings too: `eval(expr, None, None)` reads the frame's)."""
    if len(stack) < argc + 2:
        return False
    args = stack[len(stack) - argc :]
    passes_none = any(v.is_python_constant() and v.as_python_constant() is None for v in args[1:])
    for v in stack[-(argc + 2) : -argc or None][:2]:
        fn = getattr(v, "fn", None) if isinstance(v, BuiltinVariable) else None
        mappings_none = passes_none and fn in (exec, eval)
        if fn in _FRAME_READERS and (argc <= _FRAME_READERS[fn] or mappings_none):
            return True
    return False


def _cut_graph_at(output, state, site):
    """Cut the graph and the side effects back to where the break is placed."""
    if output.side_effects.version != state.effects_version:
        # the instruction (an inlined call) already mutated state before it broke: running it
        # again in Python would repeat those mutations
        raise NoBreakHere("side effects inside the call that broke")
    output.rollback(state.checkpoint)
    output.side_effects.restore(state.effects_snapshot)  # the instruction makes them itself
    undo_iterators()
    nothing_before = not _real_ops(output) and not output.side_effects
    if site.kind == "resume_here" and nothing_before:
        raise NoBreakHere("inside a try block that starts the frame")
    if site.kind == "BEFORE_WITH" and site.withs and nothing_before:
        # nothing but grad-mode switches before it: resuming at the same BEFORE_WITH would
        # make no progress (a resume function returning itself forever)
        raise NoBreakHere("a with statement over a context manager kiln does not trace")
    _exit_with_blocks(state.tx, output, [site.stack[k] for k in site.withs])


# Resume functions are tail calls (Note [Resume: tail calls]) also under config.compiled_autograd:
# run_resume runs them inside the root frame's transformed code, i.e. inside its compiled-autograd
# context (backward_scope.with_backward_scope).
_TAIL_CALLS = True


class _BreakCodegen:
    """Writes the Python that runs at a break: rebuild the stack, run the instruction, call the
    resume function(s) (Note [Graph breaks: the transformed code])."""

    def __init__(self, output, code, e, site, resume_factory, callee_factory):
        self.code, self.e, self.site = code, e, site
        self.locals = e.break_state.locals
        self.resume_factory = resume_factory
        # a resume function's own __stackN arguments are not locals of the original code (where
        # its breaks are placed when its origin is known); otherwise they are live like any other
        self.live = sorted(
            n
            for n, v in self.locals.items()
            if not isinstance(v, DeletedVariable)
            and not (site.in_resume and n.startswith("__stack"))
        )
        body = self.body = PyCodegen(output, callee_factory)
        body.closure_callee = resume_factory  # a code with free variables: entry(fn, *args)
        broke_inside = len(e.frames) > 1 or getattr(e, "module_call_broke", False)
        self.callee_slot = _callee_slot(site.inst, site.stack) if broke_inside else None
        # Note [Side effects: outputs read before the stores]
        pin = [v for k, v in enumerate(site.stack) if k != self.callee_slot and k not in site.withs]
        callee = site.stack[self.callee_slot] if self.callee_slot is not None else None
        if isinstance(callee, UserMethodVariable):
            # the callee is rebuilt as a compiled frame, after the stores: the object it is bound
            # to is read before them (`B.register(C)` with B an item of a loop's iterator input,
            # which the replay advances)
            pin.append(callee.obj)
        pin += [self.locals[n] for n in self.live] + [self.locals.get(n) for n in code.co_cellvars]
        check_freed_generators(output, [v for v in pin if v is not None])
        output.side_effects.codegen(body, pin=[v for v in pin if v is not None])
        pin_state_reads(body, pin)  # Note [Graph breaks: values read before the instruction]
        for name in code.co_cellvars:
            # cell variables were traced symbolically: put their values in the real cells, which
            # the resume function shares
            value = self.locals.get(name)
            if value is not None and not isinstance(value, DeletedVariable):
                body.reconstruct(value)
                body.extend(emit.store_deref(name))

    def rebuild(self, lo, hi):
        """Push stack positions lo..hi-1 (a callee that broke inside is compiled, see above)."""
        body = self.body
        for k in range(lo, hi):
            v = self.site.stack[k]
            if isinstance(v, NullVariable):
                body.extend(emit.push_null())
            else:
                body.compile_callees = k == self.callee_slot
                body.reconstruct(v)
                body.compile_callees = False

    def prefix_layout(self, depth):
        """The layout of the first `depth` stack positions rebuilt in place."""
        stack, withs = self.site.stack, self.site.withs
        return [
            ("with", stack[k].cm)
            if k in withs
            else ("null" if isinstance(stack[k], NullVariable) else None)
            for k in range(depth)
        ]

    def call_resume(self, index, layout):
        """Return the resume function at `index` called on the stack and the live locals.

        layout: per stack position, None (on the value stack: a prefix), "null", a list of
        instructions that load it, or ("with", variable) for a with-slot."""
        body, site = self.body, self.site
        depth = len(layout)
        nulls = [k for k, x in enumerate(layout) if x in ("null", "parked null")]
        with_slots = [k for k, x in enumerate(layout) if isinstance(x, tuple)]
        try:
            resume = make_resume_function(
                site.base_code, index, depth, nulls, self.live, setup_with_blocks=with_slots
            )
        except ResumeUnsupported as err:
            raise NoBreakHere(str(err)) from err
        on_stack = [k for k, x in enumerate(layout) if x is None or x == "null"]
        if on_stack != list(range(len(on_stack))):
            raise NoBreakHere("stack layout")  # (never: the value stack holds a prefix)
        temps = [body.new_temp() for _ in on_stack]
        for k in reversed(on_stack):
            body.extend(emit.store_fast(temps[k]))
        if site.in_resume and _TAIL_CALLS and not is_boxed(self.code):
            body.load_object(TailCall, push_null=True)
        elif _TAIL_CALLS:
            body.load_object(run_resume, push_null=True)
        body.load_object(self.resume_factory(resume.code, box=True), push_null=not _TAIL_CALLS)
        extra = 0
        if resume.code.co_freevars:
            # the resume function shares this call's cells: made here, passed first
            # (Note [Cache: closures made per call])
            body.extend(resume.emit_make_function())
            extra += 1
        if resume.first_local:
            body.reconstruct(self.locals[resume.first_local])
            extra += 1
        for k in resume.stack_args:
            x = layout[k]
            if x is None:
                body.extend(emit.load_fast(temps[k]))
            elif isinstance(x, tuple):
                _load_grad_ctx(body, x[1])
            else:
                body.extend(x)
        for name in resume.live_locals:
            body.reconstruct(self.locals[name])
        body.extend(emit.build_list(extra + len(resume.stack_args) + len(resume.live_locals)))
        # Note [Resume: arguments moved, not held]: this frame returns right after the call
        for name in (*_fast_locals(self.code), GRAPH_OUT, *body.temp_names):
            body.extend(emit.load_const(None) + emit.store_fast(name))
        body.extend(emit.call(2 if _TAIL_CALLS else 1))
        body.extend(emit.return_value())

    def after_with(self, p):
        """Where the with block of slot p continues when its __exit__ suppressed an exception."""
        site = self.site
        found = after_with_indexes(
            self.e.break_state.tx, site.stack, site.withs, site.inst, self.code
        )
        if found.get(p) is None:
            raise NoBreakHere("after a with block kiln cannot resume at")
        return found[p]

    def release_dropped_locals(self):
        """Note [Resume: locals dropped before the break] (release_dropped_locals)."""
        release_dropped_locals(self.body, self.code, self.locals)

    def write(self):
        """The instructions after the graph call, by the kind of break."""
        site, body, e = self.site, self.body, self.e
        stack, withs, inst, kind = site.stack, site.withs, site.inst, site.kind
        if kind not in ("branch", "FOR_ITER", "BEFORE_WITH", "resume_here") and withs:
            exits = {}  # with slot -> the temp of its ExitOnError
            layout = _run_in_with_blocks(body, stack, withs, self.rebuild, inst, e, exits)
            if inst.opname in LOCAL_STORES:  # (a store raises nothing: no suppressed exit)
                self.live = after_local_store(self.locals, inst, self.live)
            resume_after_suppressed(body, exits, layout, self.call_resume, self.after_with)
            self.call_resume(site.base_index + 1, layout)
            return
        if withs:
            # the value stack holds everything below the first with-slot (and a branch's
            # condition); the rest but the with-slots is parked in temps
            upto = len(stack) - 1 if kind == "branch" else len(stack)
            layout = _park(body, stack, withs, self.rebuild, upto)
        else:
            self.rebuild(0, len(stack))
            layout = self.prefix_layout(len(stack))
        if kind == "branch":
            other = emit.nop()
            body.extend(site.branch(other[0]))
            built = body.rebuilt()  # Note [Graph breaks: two continuations]
            self.call_resume(site.base_index + 1, layout[:-1])
            body.extend(other)
            body.rebuilt(built)
            self.call_resume(site.base_inst.target_index, layout[:-1])
        elif kind == "FOR_ITER":
            exhausted = _for_iter_exit()
            body.extend(emit.inst("FOR_ITER", target=exhausted[0]))
            built = body.rebuilt()  # Note [Graph breaks: two continuations]
            self.call_resume(site.base_index + 1, layout + [None])
            body.extend(exhausted)
            body.rebuilt(built)
            self.call_resume(_for_iter_resume_index(site.base_inst), layout[:-1])
        elif kind == "BEFORE_WITH" and not withs:
            # Note [Blocks: context managers]: Python enters the manager; the resume function
            # starts inside the block with its __exit__ as a plain stack value, which the
            # block's cleanup (kept in the copied exception table) calls
            _run_instruction(body, inst, e)
            self.call_resume(site.base_index + 1, layout[:-1] + [None, None])
        elif kind in ("BEFORE_WITH", "resume_here"):
            self.call_resume(site.base_index, layout)
        elif kind == "RAISE_VARARGS":
            # an exception leaving the frame (Note [Blocks: exceptions while tracing]): Python
            # raises it; nothing follows
            _run_instruction(body, inst, e)
        else:
            _run_instruction(body, inst, e)
            if inst.opname in LOCAL_STORES:
                self.live = after_local_store(self.locals, inst, self.live)
            depth = len(stack) + _stack_effect(inst)
            pushes = _BREAKABLE_PUSHES[inst.opname]
            if pushes and (site.discards or site.drops):
                # the result dies here, as in eager, not in the resume function's frame
                # (a value whose __del__ runs then: Note [Finalizers: a store that may run __del__])
                body.extend(emit.pop_top())
                # (past the original's instruction: and its POP_TOP, unless a prologue's call)
                skipped = 1 if site.drops else 2
                self.call_resume(site.base_index + skipped, layout[: depth - pushes])
                return
            self.call_resume(site.base_index + 1, layout[: depth - pushes] + [None] * pushes)


def release_dropped_locals(body, code, frame_locals):
    """Before the instruction Python runs, unbind the locals the trace deleted or rebound.

    Note [Resume: locals dropped before the break]
    The transformed code runs the unsupported instruction in the frame whose locals are
    still the ones it started with; a `del obj` or `obj = None` traced before the break has
    not happened to them, so `gc.collect()` or a weak reference called there would see obj
    alive. Each local that the trace deleted or rebound, and that no later instruction of
    the transformed code loads (the rebuilt values read their sources), is set to None
    just before the instruction; eager had already let go of its value.

    Note [Resume: temps released before the break]
    The temps of the transformed code (objects rebuilt for the replayed stores, values
    pinned before them, the graph's output list) are kiln's, not the frame's: one that no
    later instruction loads is set to None before the instruction too, so an object the
    frame dropped (an object in a reference cycle whose attribute a store set) is not kept
    alive through the call that runs there (`gc.collect()`).
    """
    run = getattr(body, "instruction_run", None)
    at = next((k for k, i in enumerate(body.instrs) if i is run), None)
    if at is None:
        return
    loaded = set()
    for inst in body.instrs[at:]:
        if inst.opname.startswith("LOAD_FAST"):
            names = inst.argval if isinstance(inst.argval, tuple) else (inst.argval,)
            loaded.update(names)
    release = []
    for name in _fast_locals(code):
        v = frame_locals.get(name)
        unchanged = (
            v is not None
            and not isinstance(v, DeletedVariable)
            and (v.source is not None and v.source.name() == name)
        )
        if not unchanged and name not in loaded:
            release += emit.load_const(None) + emit.store_fast(name)
    # Note [Resume: temps released before the break]
    for name in (GRAPH_OUT, *body.temp_names):
        if name not in loaded:
            release += emit.load_const(None) + emit.store_fast(name)
    body.instrs[at:at] = release


# Note [Graph breaks: two continuations]
# A break at a branch or at a FOR_ITER writes two calls of resume functions, one per way out,
# and only one runs. An object rebuilt for the first (a set made in the frame, live in both) is
# stored in a temp the second would load without it having been stored: each continuation
# starts from the temps made before the split, and rebuilds the rest itself.


# Note [Graph breaks: with blocks]
# A break inside traced `with` blocks (grad-mode managers) leaves them and re-enters them, as
# Python would see it from outside (user managers stay entered: Note [Blocks: breaks inside a
# user with block]):
#     ___out = <graph so far, ending with the exits of the open with blocks>(inputs...)
#     with <ctx 1>:                      # emit.with_block: an exception in the instruction
#         <rebuild the stack above it>   # reaches __exit__ as in the original
#         with <ctx 2>:
#             <...>; <the unsupported instruction>; <results into temps>
#         <items above ctx 1 into temps>
#     return resume(<stack below>, ctx 1, <temps>, ctx 2, <temps>, <live locals>)
# The resume function re-enters each context manager in its prologue (setup_with_blocks) and the
# copied body leaves them through the original cleanup code. A context manager is passed as a
# fresh torch.no_grad() / torch.enable_grad(), whose enter/exit set and restore the mode; the
# translator traces a `with` over such an object again (the resume function's own trace).


def _real_ops(output):
    """Whether the graph holds an op other than grad-mode, autocast and saved-hooks switches."""
    switches = (torch._C._set_grad_enabled, *STATE_NODES, *SAVED_HOOKS_SWITCHES)
    return any(
        n.op in ("call_function", "call_method") and n.target not in switches
        for n in output.graph.nodes
    )


def _check_handlers(tx, inst, open_withs):
    """NoBreakHere if an exception raised at `inst` (or in an open with block) could be caught
    by an except clause: the transformed code would lose the handler."""
    handlers = {id(v.handler) for v in open_withs if v.handler is not None}

    def ok(entry):
        return (
            entry is None
            or id(entry.target) in handlers
            or tx.only_reraises(entry.target)  # a try/finally: Note [Translator: try/finally]
        )

    if inst is not None and not ok(inst.exn_tab_entry):
        raise NoBreakHere("inside a try/except block")
    for v in open_withs:
        before = getattr(v, "before_inst", None)
        if before is not None and not ok(before.exn_tab_entry):
            raise NoBreakHere("inside a with block inside a try/except block")


def _exit_with_blocks(tx, output, open_withs):
    """Append the exits of the open with blocks (innermost first) to the graph, so that it ends
    in the grad mode the frame started with (the transformed code enters them again)."""
    if not open_withs:
        return
    mode = tx.initial_grad_mode
    for node in output.graph.nodes:  # the mode where the graph now ends
        if node.op == "call_function" and node.target is torch._C._set_grad_enabled:
            mode = node.args[0]
    torch._C._set_grad_enabled(mode)
    for v in reversed(open_withs):
        if not stays_entered(v.cm):  # Note [Blocks: breaks inside a user with block]
            v.cm.exit(tx)


def _load_grad_ctx(cg, cm):
    if stays_entered(cm):  # Note [Blocks: breaks inside a user with block]
        cm.load_entered(cg)
    else:
        cm.load_fresh(cg)  # a new context manager with the same enter/exit


def _park(body, stack, withs, rebuild, upto):
    """Rebuild the stack below the first with-slot on the value stack, park the items up to
    `upto` (but the with-slots) in temps, rebuild the rest on the value stack. Returns the layout
    for call_resume."""
    layout = []
    rebuild(0, withs[0])
    for k in range(withs[0]):
        layout.append("null" if _is_null(stack[k]) else None)
    for k in range(withs[0], upto):
        if k in withs:
            layout.append(("with", stack[k].cm))
        elif _is_null(stack[k]):
            layout.append("parked null")
        else:
            name = body.new_temp()
            rebuild(k, k + 1)
            body.extend(emit.store_fast(name))
            layout.append(emit.load_fast(name))
    rebuild(upto, len(stack))
    return layout + [None] * (len(stack) - upto)


def _is_null(v):
    return isinstance(v, NullVariable)


def _run_in_with_blocks(body, stack, withs, rebuild, inst, e, exits):
    """Note [Graph breaks: with blocks]: the instruction runs inside the re-entered contexts."""
    layout = [None] * len(stack)
    rebuild(0, withs[0])
    for k in range(withs[0]):
        layout[k] = "null" if _is_null(stack[k]) else None
    depth = len(stack) + _stack_effect(inst)
    kept = depth - _BREAKABLE_PUSHES[inst.opname]  # positions below are left as they were
    layout += [None] * max(0, depth - len(layout))

    def level(j):
        p = withs[j]
        hi = withs[j + 1] if j + 1 < len(withs) else len(stack)
        saved = body.instrs
        # the manager's load is written before the block it opens, as it runs: an object both
        # rebuild is stored in a temp by the first, which the second then loads
        load = body if stays_entered(stack[p].cm) else PyCodegen(body.output)
        load.instrs = []
        if load is body:  # the manager's own exit on an error: Note [Blocks: breaks inside ...]
            exits[p] = body.new_temp()
            stack[p].cm.load_around(body, exits[p])
        else:
            _load_grad_ctx(load, stack[p].cm)
        load = load.instrs
        body.instrs = []
        rebuild(p + 1, hi)
        if j + 1 < len(withs):
            level(j + 1)
        else:
            _run_instruction(body, inst, e)
            hi = depth  # the stack above p after the instruction
        # everything this level holds above p goes into temps (top first)
        for k in reversed(range(p + 1, hi)):
            name = body.new_temp()
            body.extend(emit.store_fast(name))  # (safe for a NULL)
            null = k < kept and _is_null(stack[k])
            layout[k] = "parked null" if null else emit.load_fast(name)
        inner, body.instrs = body.instrs, saved
        body.extend(emit.with_block(load, inner, depth=p))
        layout[p] = ("with", stack[p].cm)

    if withs[-1] >= kept:
        raise NoBreakHere("the instruction consumes a with block's slot")
    level(0)
    return layout[:depth]


def _fast_locals(code):
    """The names of code's fast locals that are not cells."""
    cells = set(code.co_cellvars) | set(code.co_freevars)
    return [n for n in code.co_varnames if n not in cells]


def _run_instruction(body, inst, e):
    run_instruction(body, inst, e.break_state.kw_names)


def run_instruction(body, inst, kw_names, line=None):
    """Append the instruction a break runs in Python (a CALL with its pending keyword names), at
    the line of `line` (an instruction of the frame it runs in; default: its own)."""
    at = len(body.instrs)
    line = line or inst
    if inst.opname == "CALL":
        call = emit.call_kw(inst.arg, kw_names) if kw_names else None
        for made in call or emit.call(inst.arg):  # (at the user's line: tracebacks, warnings)
            made.lineno, made.positions = line.lineno, line.positions
            body.append(made)
    else:
        made = inst.copy(target=None, exn_tab_entry=None, offset=None)
        if line is not inst:
            made.lineno, made.positions = line.lineno, line.positions
        body.append(made)
    # where release_dropped_locals inserts (found by identity: inside with blocks, the list that
    # holds it now is nested into the body later)
    body.instruction_run = body.instrs[at]


def _for_iter_exit():
    """The target of an emitted FOR_ITER: where an exhausted iterator continues (3.12+: an
    END_FOR that the interpreter skips, 3.13: and the POP_TOP after it)."""
    if PY313_PLUS:
        return emit.inst("END_FOR") + emit.pop_top()
    if PY312_PLUS:
        return emit.inst("END_FOR")
    return emit.nop()


def _for_iter_resume_index(for_iter):
    """Index of the instruction an exhausted FOR_ITER continues at (Note [Bytecode: version
    differences])."""
    return for_iter.target_index + FOR_ITER_SKIPS


def _stack_effect(inst):
    """Net stack effect of the instruction a break executes (calls counted whole)."""
    if inst.opname == "CALL":
        return -(inst.arg + 2) + 1  # NULL|self, callable, args -> result
    if inst.opname == "CALL_KW":
        return -(inst.arg + 3) + 1  # ... + the names tuple
    if inst.opname == "CALL_FUNCTION_EX":
        return -(3 + (inst.arg & 1)) + 1
    return dis.stack_effect(inst.opcode, inst.arg, jump=False)


def _callee_slot(inst, stack):
    """Stack position of the callable of a CALL (the frame that broke inside)."""
    if inst.opname == "CALL_FUNCTION_EX":
        kw = inst.arg & 1
        slot = len(stack) - (3 if PY313_PLUS else 2) - kw
        if slot < 0:
            return None
        if not PY313_PLUS and slot >= 1 and not isinstance(stack[slot - 1], NullVariable):
            return slot - 1  # [callable, self, args]: a method call
        return slot
    if inst.opname not in ("CALL", "CALL_KW"):
        return None

    argc = inst.arg
    base = len(stack) - argc - 2 - (1 if inst.opname == "CALL_KW" else 0)
    if base < 0:
        return None
    if PY313_PLUS:
        return base
    return base + 1 if isinstance(stack[base], NullVariable) else base
