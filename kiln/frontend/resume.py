"""Resume functions: continue a code object at an instruction with a given stack and locals.

Before/after, for a break at `print(x)` inside a loop of

    def f(x, n):                      # transformed f (built by the frontend):
        for i in range(n):            #   ...graph..., rebuild stack [iter] and locals,
            x = x * 2                 #   execute print(x),
            print(x)                  #   return __resume_at_40(iter, x, n)   <- emit_call()
            x = x + 1
        return x

    def __resume_at_40(__stack0, x, n):   # make_resume_function(f.__code__, index of POP_TOP ...)
        <push __stack0>; jump to the instruction after the call (in a copy of f's code),
        so `x = x + 1`, the loop's jump back to FOR_ITER and `return x` run in this copy.

Pure bytecode (kiln.bytecode only): no torch, runs on 3.11-3.13.
"""

from __future__ import annotations

import builtins
import dataclasses
import inspect
import keyword
import types
import weakref

from kiln.bytecode import (
    PY312_PLUS,
    Inst,
    clone,
    decode,
    emit,
    encode,
    first_resume,
    make_inst,
    remove_unreachable,
    skipped_at_loop_exit,
)
from kiln.bytecode.analysis import stack_depths
from kiln.frontend.unbound_cells import guard_cell_reads

# Note [Resume: layout]
#
# Arguments: `__stack{k}` for every stack position k (0 = bottom) that is not a NULL, in order,
# then the live locals. Closure: every cell and free variable of the original code (original cells
# become free variables, so that closures created before the break and the resumed code share the
# very same cell objects); the caller builds the closure tuple from its own cells
# (ResumeFunction.emit_make_function).
# Prologue: COPY_FREE_VARS, RESUME, then the stack is pushed back position by position: PUSH_NULL
# for a NULL slot; for a `with` slot (the __exit__ of an active `with` block in the original
# frame) the argument is the context manager, re-entered with BEFORE_WITH + POP_TOP, which leaves
# its __exit__ in that slot exactly as the original BEFORE_WITH did. Then a jump to the resume
# instruction in a copy of the original body (what is unreachable from there is dropped): loops
# jump back inside the copy, and the copy keeps the original exception table, whose entries (try
# bodies, with cleanups) have depths relative to the same stack layout, so active try and with
# blocks stay correct (see Note [Bytecode: 3.13 errors from callee frames] for one subtlety).
# Locals are the arguments themselves (same names), so nothing is stored. On 3.12+ a LOAD_FAST of
# a local that is not an argument becomes LOAD_FAST_CHECK (a local the caller did not pass raises
# UnboundLocalError instead of reading NULL).
# Not supported (ResumeUnsupported is raised; the frontend then runs the frame eagerly):
# generators and coroutines; resuming between 3.11's PRECALL / KW_NAMES and their CALL; at an
# instruction an exhausted FOR_ITER skips (3.12+ END_FOR, 3.13 and the POP_TOP after it); code that makes cells after its prologue (3.12+ comprehensions over captured
# variables: MAKE_CELL / LOAD_FAST_AND_CLEAR on a cell mid-body). Never resume inside an except/finally handler (the live exception cannot be
# restored; analysis cannot tell, the caller must not ask).

# Note [Resume: breaks inside with blocks]
#
# Recipe for a break at instruction i inside `with ctx:` (slot p holds its __exit__, see
# analysis.FrameState.with_positions), as tests/bytecode/resume_checks.py::check_with_recipe does:
#
#     <graph>; <ctx object into a temp>
#     emit.with_block(load ctx, <rebuild the stack above p, run instruction i, store results
#                                in temps>, depth=p)      # i runs inside the context; an
#                                                          # exception in it reaches __exit__
#     return resume(<stack below p>, ctx, <results>, <live locals>)   # setup_with_blocks=(p,)
#
# The resume prologue re-enters ctx with BEFORE_WITH and the copied body exits it through the
# original cleanup code. The context is therefore left and re-entered around the break (fine for
# grad mode / autocast style managers, whose enter/exit only set and restore state). A user
# manager is not left: the frontend passes a wrapper whose enter does nothing (Note [Blocks:
# breaks inside a user with block], kiln/frontend/entered.py).

_GENERATOR_FLAGS = (
    inspect.CO_GENERATOR
    | inspect.CO_COROUTINE
    | inspect.CO_ASYNC_GENERATOR
    | inspect.CO_ITERABLE_COROUTINE
)


class ResumeUnsupported(Exception):
    """This resume function cannot be built; the frame must run without a break here."""


@dataclasses.dataclass(frozen=True, eq=False)
class ResumeFunction:
    """A generated resume code object and how to call it (see Note [Resume: layout])."""

    code: types.CodeType
    original: types.CodeType
    resume_index: int
    stack_depth: int
    null_positions: tuple[int, ...]
    with_positions: tuple[int, ...]
    live_locals: tuple[str, ...]
    first_local: str | None = None  # passed before the stack (zero-argument super() reads it)
    inner_call: bool = False  # the top stack position is passed as two: a function and its box

    @property
    def nargs(self):
        """How many arguments it takes (in its box when boxed)."""
        stack = self.stack_depth - len(self.null_positions) + self.inner_call
        return bool(self.first_local) + stack + len(self.live_locals)

    @property
    def closure_names(self):
        """Names of the caller's cells, in closure order (= code.co_freevars)."""
        return self.code.co_freevars

    @property
    def stack_args(self):
        """The stack positions passed as arguments (all but NULLs), in argument order."""
        return tuple(k for k in range(self.stack_depth) if k not in self.null_positions)

    @property
    def argnames(self):
        return self.code.co_varnames[: self.code.co_argcount]

    def emit_make_function(self) -> list[Inst]:
        """Push the resume function (a function object with the caller's cells as closure)."""
        return emit.make_closure(self.code, self.closure_names)

    def emit_make_wrapped(self, wrap) -> list[Inst]:
        """Push wrap(<the resume function>): e.g. kiln's frame entry for it, built at run time
        because its closure holds the running frame's cells."""
        return emit.call_function(emit.load_const(wrap), [self.emit_make_function()])

    def emit_call(self, wrap_with=None, wrap=None) -> list[Inst]:
        """Code for the caller: with the break's stack on the value stack (stack_depth items,
        NULLs at null_positions, the context managers at with_positions) and the live locals
        bound, call the resume function and return its result. `wrap_with(k, load)` may turn
        the value loaded by `load` for with-slot k into the context manager to pass; `wrap`
        (see emit_make_wrapped) is called on the resume function and its result is called."""
        out = []
        tmp = [f"__resume_tmp{k}" for k in range(self.stack_depth)]
        for k in reversed(range(self.stack_depth)):
            out += emit.store_fast(tmp[k])  # STORE_FAST is safe for NULLs, POP_TOP is not
        make = self.emit_make_wrapped(wrap) if wrap is not None else self.emit_make_function()
        out += emit.with_null(make)
        if self.first_local:
            out += emit.load_fast(self.first_local)
        for k in self.stack_args:
            load = emit.load_fast(tmp[k])
            out += wrap_with(k, load) if wrap_with and k in self.with_positions else load
        for name in self.live_locals:
            out += emit.load_fast(name)
        nargs = len(self.stack_args) + len(self.live_locals) + bool(self.first_local)
        return out + emit.call(nargs) + emit.return_value()


_cache: dict[tuple, ResumeFunction] = {}
# resume code -> (the user's original code, {instruction index here: index there})
_origins: dict[types.CodeType, tuple[types.CodeType, dict[int, int]]] = {}
# resume code made with inner_call -> (index of its prologue call, resume index in the origin,
# whether the prologue drops the call's result)
_prologue_calls: dict[types.CodeType, tuple[int, int, bool]] = {}
_boxed: set[types.CodeType] = set()  # resume codes made with boxed=True
# (boxed code, id(globals)) -> function; each lives while a transformed code loads it
_inner_functions = weakref.WeakValueDictionary()


def clear_cache():
    """Forget generated resume functions (kiln.reset())."""
    _cache.clear()
    _origins.clear()
    _prologue_calls.clear()
    _boxed.clear()
    _inner_functions.clear()


def origin(code):
    """(original code, index map) of a resume code object, or None for any other code.

    Note [Resume: breaks in resume functions]
    A resume function's body is a copy of the original's instructions from the resume point on,
    with the same stack layout at each of them. A break inside a resume function is therefore
    placed as if in the original code (its index mapped back), so the resume function it needs
    is one of the original's: a loop that breaks in every iteration reuses the same few resume
    functions (after the break, at the loop's FOR_ITER) instead of making a new one per
    iteration, and their compiled entries are reused (no recompile per iteration).
    """
    return _origins.get(code)


class TailCall:
    """`return resume(box)` of a resume function's transformed code, returned instead of called,
    so that a loop that breaks in every iteration does not nest one Python call per iteration
    (Note [Resume: tail calls])."""

    __slots__ = ("fn", "box")

    def __init__(self, fn, box):
        self.fn = fn
        self.box = box


def run_resume(fn, box):
    """Call a resume function from a frame's transformed code; run the tail calls it returns.

    Note [Resume: tail calls]
    The transformed code of a user frame calls its resume function through run_resume; the
    transformed code of a resume function returns TailCall(next resume function, box) instead
    of calling it. run_resume keeps calling until a real value comes back, so the Python stack
    stays flat however many breaks (loop iterations) follow. Only resume functions return
    TailCall, and only run_resume calls resume functions.
    """
    result = fn(box)
    while type(result) is TailCall:
        fn, box = result.fn, result.box
        result = None
        result = fn(box)
    return result


# Note [Resume: arguments moved, not held]
# In eager Python a frame's locals die when the frame deletes them: `del obj; gc.collect()` frees
# obj, and a tensor dropped after a graph break frees its memory there. A resume function's
# arguments must not outlive that either, so nothing between the broken frame and the resume
# function's own frame holds them:
# - the transformed code loads the arguments into a list (the box), then sets every local of its
#   own frame (and the graph's output list) to None before the call: it returns right after;
# - the resume function's wrapper takes the box (FrameCache.box_call), checks its guards on the
#   box's items and calls the entry through `call_moving`, which empties the box before the call:
#   a `fn(*args)` would keep the tuple `args` alive in the caller's frame until fn returns;
# - a compile (a miss) reads the box, then runs the entry the same way.
# - the prologue pushes each stack argument and sets its local to None (`_take`): the value lives on
#   the stack only, as in eager, even when the resume function runs as written (a failed trace).
# What this does not cover: the call that traces a frame holds what the trace saw (its translator,
# sometimes in a reference cycle with the frames of the trace) until the next collection; and a
# local never read again is released at the break (it is no live local of the resume function),
# where eager keeps it to the end of the function, as torch.compile does. Nor does it cover a
# process with a PEP 523 frame-evaluation hook installed (a debugger's; torch's own, which torch
# 2.13 leaves installed after an eager `torch.cond` whose branch raised): CPython then runs every
# Python call through the hook instead of inlining it, the caller's stack keeps its own reference
# to each argument until the callee returns, and a resume function's arguments outlive its `del`.
def _take(name):
    """Push a stack argument and clear its local: the stack holds it, as eager's stack did (a
    `del` of the local it is stored to frees it; Note [Resume: arguments moved, not held])."""
    return emit.load_fast(name) + emit.load_const(None) + emit.store_fast(name)


_len = len
_movers: dict[int, types.FunctionType] = {}


def _mover_template(fn, box):
    return None


def _make_mover(n):
    """`fn(*box)` for a box of n items, the box emptied between loading them and the call."""
    code = _mover_template.__code__
    insts = decode(code)
    body = [
        *emit.load_fast("box"),
        *emit.load_method("reverse"),
        *emit.call(0),
        *emit.pop_top(),
        *emit.with_null(emit.load_fast("fn")),
        *emit.load_fast("box"),
        *emit.unpack_sequence(n),  # the reversed box's last item (the first argument) lowest
        *emit.load_fast("box"),
        *emit.load_method("clear"),
        *emit.call(0),
        *emit.pop_top(),
        *emit.call(n),
        *emit.return_value(),
    ]
    mover_code = encode(
        insts[: first_resume(insts) + 1] + body, like=code, co_name=f"call_moving_{n}"
    )
    return types.FunctionType(mover_code, {}, mover_code.co_name)


def call_moving(fn, box):
    """fn(*box), the box (a list) emptied before fn runs (Note [Resume: arguments moved, not
    held])."""
    mover = _movers.get(_len(box))  # (the interpreter's len: Note [Frames: builtins the ...])
    if mover is None and builtins.len is not _len:
        args, box[:] = box[:], ()  # (no mover made while the program's len stands in)
        return fn(*args)
    if mover is None:
        mover = _movers[len(box)] = _make_mover(len(box))
    return mover(fn, box)


def make_resume_function(
    code: types.CodeType,
    resume_index: int,
    stack_depth: int,
    null_positions=(),
    live_locals=(),
    *,
    cell_and_free=None,
    setup_with_blocks=(),
    boxed=False,
    inner_call=None,
    drop_inner=False,
) -> ResumeFunction:
    """A function continuing `code` at decode(code)[resume_index] (cached per code and layout).

    stack_depth: items on the value stack there; null_positions: which of them (0 = bottom) are
    NULLs of the call protocol; live_locals: locals read later (the caller passes their values,
    in this order); cell_and_free: closure order of the original's cells and free variables
    (default co_cellvars + co_freevars); setup_with_blocks: stack positions holding the __exit__
    of an active `with` block (the caller passes the context manager there instead); boxed: one
    parameter, the list of the arguments (Note [Nested breaks: the chain of resume functions]);
    inner_call: the code of fn when the top stack position is the result of `fn(box)`, fn and
    box passed there (a code object of its own per inner code: each compiles once);
    drop_inner: the prologue drops that result (an instruction that calls the inner frame and
    discards what it returns: Note [Nested breaks: implicit calls]), the code resuming with
    the stack below it.
    """
    cells = (
        tuple(cell_and_free) if cell_and_free is not None else code.co_cellvars + code.co_freevars
    )
    key = (
        code,
        resume_index,
        stack_depth,
        tuple(sorted(null_positions)),
        tuple(live_locals),
        cells,
        tuple(sorted(setup_with_blocks)),
        bool(boxed),
        inner_call,
        bool(drop_inner),
    )
    hit = _cache.get(key)
    if hit is None:
        hit = _cache[key] = _build(code, resume_index, stack_depth, *key[3:])
    return hit


# Note [Nested breaks: the chain of resume functions]
# A break placed in f1, called by f2, called by the root frame f3 (Note [Nested breaks: placing
# the break in the callee]), continues three frames. The root's transformed code returns
# `run_resume(R3, [f3's stack below its call, R2, box2, f3's live locals])`: R3 is f3's resume
# function after its call of f2, whose prologue computes that call's result as `R2(box2)`
# (inner_call) instead of taking it as an argument. R2 is f2's resume function after its call of
# f1, boxed: its one parameter is the list of its arguments, which its prologue unpacks and
# drops (the caller's prologue passed it on without keeping it: nothing else holds them, Note
# [Resume: arguments moved, not held]; emptied, it would be a traced store); its prologue
# likewise calls R1(box1), f1's resume function after the instruction that broke. R3 runs
# through kiln's frame entry like any resume function and its trace inlines R2 and R1: the rest
# of the three frames is one graph. R2 and R1 are plain functions over their frame's globals and
# cells (inner_function), only ever called by a prologue, never by run_resume: compiled as frames
# of their own (when R3 runs as written), their breaks call the next resume function and return
# its value (is_boxed: no TailCall). A break inside the chain's trace is placed the same way; a
# frame stopped at its prologue's call (prologue_call) continues where its resume function began.
# A chain's root code holds the code it calls as an unused constant: codes compare equal by
# their contents and kiln keys caches by code, so each chain compiles once instead of being a
# recompile of another.
def is_boxed(code):
    """Whether `code` is a resume code called with one box argument by the resume function
    of its caller: its breaks call their resume functions, never TailCall (Note [Nested
    breaks: the chain of resume functions])."""
    return code in _boxed


def inner_function(code, f_globals):
    """The function a chain of resume functions calls for the boxed resume code `code` (one
    without cells: Note [Nested breaks: the chain of resume functions])."""
    key = (code, id(f_globals))
    fn = _inner_functions.get(key)
    if fn is None or fn.__globals__ is not f_globals:
        fn = _inner_functions[key] = types.FunctionType(code, f_globals, code.co_name)
    return fn


def prologue_call(code):
    """(index of the prologue's inner call, the resume index in the original code, whether the
    prologue drops its result) of a resume code made with inner_call, else None (Note [Nested
    breaks: the chain of resume functions])."""
    return _prologue_calls.get(code)


def _build(
    code, resume_index, stack_depth, nulls, live_locals, cells, withs, boxed, inner_call, drops
):
    if code.co_flags & _GENERATOR_FLAGS:
        raise ResumeUnsupported(f"cannot resume inside generator/coroutine {code.co_name}")
    if set(cells) != set(code.co_cellvars) | set(code.co_freevars):
        raise ResumeUnsupported(f"cell_and_free {cells} != cells and free vars of {code.co_name}")
    if any(not 0 <= k < stack_depth for k in (*nulls, *withs)) or set(nulls) & set(withs):
        raise ResumeUnsupported(f"bad stack layout: depth {stack_depth}, {nulls=}, {withs=}")
    insts = clone(decode(code))
    base = _origins.get(code)
    for n, inst in enumerate(insts):
        inst.kiln_origin = n if base is None else base[1].get(n)
    start = first_resume(insts)
    if not start < resume_index < len(insts):
        raise ResumeUnsupported(f"cannot resume at instruction {resume_index} of {code.co_name}")
    target = insts[resume_index]
    before = insts[resume_index - 1]
    expected = stack_depths(insts, code.co_flags)[resume_index]
    if expected != stack_depth - bool(drops):  # (a wrong layout would crash CPython, not raise)
        raise ResumeUnsupported(
            f"a stack of {stack_depth - bool(drops)} where {code.co_name} has {expected}"
        )
    if skipped_at_loop_exit(insts, resume_index):
        # a finished loop continues after them (codegen: _for_iter_resume_index)
        raise ResumeUnsupported(f"cannot resume at {target.opname}: an exhausted FOR_ITER skips it")
    if before.opname in ("PRECALL", "KW_NAMES") and not before.is_terminator:
        # 3.11 PRECALL may have rewritten the NULL slot; KW_NAMES sets a hidden register
        raise ResumeUnsupported(f"cannot resume between {before.opname} and its CALL")
    body = insts[start + 1 :]
    for inst in insts[: start + 1]:
        if inst.opname not in ("COPY_FREE_VARS", "MAKE_CELL", "RESUME", "NOP"):
            raise ResumeUnsupported(f"unexpected {inst.opname} before RESUME in {code.co_name}")

    for inst in body:
        if inst.opname == "MAKE_CELL" or (
            inst.opname in ("LOAD_FAST_AND_CLEAR", "STORE_FAST", "DELETE_FAST")
            and inst.argval in cells
        ):
            # 3.12+ inlined comprehensions make fresh cells mid-body; in a resume function
            # the cells are free variables shared with the caller
            raise ResumeUnsupported(f"{inst.opname} of cell {inst.argval!r} after the prologue")
    live = tuple(n for n in live_locals if n not in cells)
    first = None
    if "__class__" in cells and code.co_argcount and code.co_varnames[0] in live:
        # zero-argument super() reads the frame's first argument: it stays first
        first = code.co_varnames[0]
        live = tuple(n for n in live if n != first)
    inner = stack_depth - 1 if inner_call is not None else None
    if inner is not None and inner in (*nulls, *withs):
        raise ResumeUnsupported("the inner call's slot holds a NULL or a with block")
    stack_names = []
    for k in range(stack_depth):
        if k == inner:
            stack_names += [f"__stackfn{k}", f"__stackbox{k}"]
        elif k not in nulls:
            stack_names.append(f"__stack{k}")
    argnames = ([first] if first else []) + stack_names + [safe_local_name(n) for n in live]
    body = _rename_locals(body)  # Note [Resume: local names that are not identifiers]
    if len(set(argnames)) != len(argnames):
        raise ResumeUnsupported(f"duplicate argument names {argnames}")

    prologue = []
    if cells:
        prologue += emit.inst("COPY_FREE_VARS", len(cells))
    prologue += emit.resume(0)
    # (zero-argument super() reads the frame's first local: a boxed code's box comes in there,
    # and the unpacking puts the first argument in its place)
    box_name = first or "__stack_box"
    if boxed:  # Note [Nested breaks: the chain of resume functions]
        prologue += emit.load_fast(box_name) + emit.unpack_sequence(len(argnames))
        for name in argnames:
            prologue += emit.store_fast(name)
        if not first:  # (the box's last holder: the caller's prologue passed it on, not kept)
            prologue += emit.load_const(None) + emit.store_fast("__stack_box")
    call_at = None
    for k in range(stack_depth):
        if k == inner:
            made = emit.call_function(_take(f"__stackfn{k}"), [_take(f"__stackbox{k}")])
            call_at = made[-1]
            if withs:  # (the call lies in the blocks: Note [Nested breaks: with blocks])
                for inst in made:
                    inst.exn_tab_entry = before.exn_tab_entry
            prologue += made
            if drops:
                prologue += emit.pop_top()
        elif k in nulls:
            prologue += emit.push_null()
        elif k in withs:
            prologue += _take(f"__stack{k}")
            prologue += [make_inst("BEFORE_WITH")] + emit.pop_top()
        else:
            prologue += _take(f"__stack{k}")
    prologue += emit.jump_forward(target)
    for inst in prologue:
        inst.lineno, inst.positions = target.lineno, target.positions

    if PY312_PLUS:
        body = _check_unpassed_loads(body, set(argnames), set(cells))
    # the original code before the resume point that no path from it reaches again is dropped
    insts = remove_unreachable(prologue + body, code.co_flags)
    if code.co_cellvars:  # Note [Resume: unbound cells of the original frame]
        insts = guard_cell_reads(insts, set(code.co_cellvars))

    others = [safe_local_name(v) for v in code.co_varnames if v not in cells]
    params = [box_name] if boxed else argnames
    varnames = params + [v for v in dict.fromkeys(argnames + others) if v not in params]
    flags = code.co_flags & ~(inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
    if cells:
        flags |= inspect.CO_NESTED
    offset = target.offset
    name = f"__resume_at_{offset}"
    where = {}
    new_code = encode(
        insts,
        index_map=where,
        like=code,
        co_varnames=tuple(varnames),
        co_argcount=len(params),
        co_posonlyargcount=0,
        co_kwonlyargcount=0,
        co_flags=flags,
        co_cellvars=(),
        co_freevars=cells,
        co_name=code.co_name,  # (what tracebacks and logging's funcName show: the user's)
        co_qualname=f"{code.co_qualname}.{name}",
    )
    if inner_call is not None:
        # codes compare equal by their contents, and kiln keys its caches by code: the code of
        # the function it calls, an unused constant, keeps each chain's apart (each compiles
        # once, not as a recompile of another's)
        new_code = new_code.replace(co_consts=(*new_code.co_consts, inner_call))
    origins = {
        where[k]: i.kiln_origin
        for k, i in enumerate(insts)
        if getattr(i, "kiln_origin", None) is not None
    }
    _origins[new_code] = (base[0] if base is not None else code, origins)
    if boxed:
        _boxed.add(new_code)
    if call_at is not None:
        target_origin = target.kiln_origin
        if target_origin is not None:
            at = next((where[k] for k, i in enumerate(insts) if i is call_at), None)
            if at is not None:
                _prologue_calls[new_code] = (at, target_origin, bool(drops))
    return ResumeFunction(
        code=new_code,
        original=code,
        resume_index=resume_index,
        stack_depth=stack_depth,
        null_positions=nulls,
        with_positions=withs,
        live_locals=live,
        first_local=first,
        inner_call=inner_call is not None,
    )


def safe_local_name(name):
    """The name a local has in resume functions: itself, or an identifier made from it.

    Note [Resume: local names that are not identifiers]
    Locals need not be identifiers: pytest's assertion rewriting makes `@py_assert1`. A resume
    function takes live locals as parameters, and parameters (and the guard functions written
    over them) must be identifiers, so such a local is renamed in the resume function's code (its
    loads and stores too), the same way every time: a break inside a resume function builds the
    next one from the original code, whose names map to the same identifiers.
    """
    if name.isidentifier() and not keyword.iskeyword(name):
        return name
    return "___kiln_" + "".join(c if c.isalnum() or c == "_" else f"_{ord(c):x}_" for c in name)


def _rename_locals(insts):
    """Local-variable instructions of `insts` with their names made identifiers (in place)."""
    for inst in insts:
        if "FAST" not in inst.opname:
            continue
        if isinstance(inst.argval, str):
            inst.argval = safe_local_name(inst.argval)
        elif isinstance(inst.argval, tuple):
            inst.argval = tuple(safe_local_name(n) for n in inst.argval)
    return insts


# 3.13 superinstructions that load a second local: the first half they split into.
_SUPER_LOADS = {"LOAD_FAST_LOAD_FAST": "LOAD_FAST_CHECK", "STORE_FAST_LOAD_FAST": "STORE_FAST"}


def _loaded(inst):
    return set(inst.argval[1:] if inst.opname == "STORE_FAST_LOAD_FAST" else inst.argval)


def _check_unpassed_loads(body, passed, cells):
    """3.12+: LOAD_FAST of a local that is not an argument -> LOAD_FAST_CHECK (in place)."""
    out = []
    for inst in body:
        if inst.opname == "LOAD_FAST" and inst.argval not in passed and inst.argval not in cells:
            inst.opname = "LOAD_FAST_CHECK"
        elif inst.opname in _SUPER_LOADS and not _loaded(inst) <= passed:
            first, second = inst.argval
            inst.opname, inst.argval = _SUPER_LOADS[inst.opname], first
            extra = make_inst("LOAD_FAST_CHECK", None, second)
            extra.lineno, extra.positions = inst.lineno, inst.positions
            extra.exn_tab_entry = inst.exn_tab_entry
            out += [inst, extra]
            continue
        out.append(inst)
    return out
