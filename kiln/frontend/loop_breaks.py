"""A graph break inside a loop of a frame whose own code made no tensor op: the frame runs in
Python, its callees compiled as frames of their own (Note [Graph breaks: a loop that only calls])."""

import types

import torch

from kiln import config
from kiln.frontend.call_through import is_plain, routable
from kiln.frontend.markers import is_optimized_module

# Note [Graph breaks: a loop that only calls]
# A break inside a loop is normally placed where it happens: the graph before it, the break run
# by Python, and a resume function from there that traces the rest of the pass and the next
# pass up to the break again, called once per pass (Note [Resume: tail calls]). Where the
# graph so far holds tensor ops and every one of them came from a function the frame called
# and kiln inlined, none from the frame's own instructions (`for ...: y = block(y); log(y)`), that
# structure buys nothing: the frame is only a driver loop, and its graphs are its callees'
# bodies. It costs more than it gives: a graph for the first pass, a resume function whose loop
# state (a counter, an iterator's position) changes every pass and so compiles again (one
# entry per value until it becomes dynamic), and per pass a guard check of the resume
# function's arguments. torch.compile skips such a frame ("graph break in a for/while loop"):
# it runs in Python and each function it calls is compiled as a frame of its own, so a callee
# called every pass compiles once and its guards are checked per call. kiln does the same
# there, with the frame's calls routed to kiln's wrappers (Note [Frames: callees of a frame
# run in Python]): the callees' ops are captured exactly as when inlined. Only callees the
# router compiles count so: ops from any other call the frame makes (a module of torch.nn,
# whose forward the router leaves to Python; a bound method of a builtin) count as the frame's
# own, since running the frame in Python would run them eagerly. As torch's skip, this
# is for good: the frame's later calls run in Python too (FrameCache.give_up).
# Where the frame's own code did make a tensor op (`x = x * 2` in the loop body, before the
# break or before the loop), the resume structure stays: running the frame in Python would run
# those ops eagerly, which torch.compile does and kiln does not; so does a break before any
# tensor op (at the loop's head, say), where nothing shows what the loop does. The ops of the
# frame's own code after the break are not known at the break; a frame whose callees made ops
# and whose own code made none before it is taken to be a driver loop. A frame that cannot be routed (a generator, or with routing off) keeps the
# resume structure too: run in Python, its callees would not compile at all.


def loop_holds(instructions, index):
    """Whether instruction `index` is inside a loop: a later jump goes back to it or before it."""
    for inst in instructions[index + 1 :]:
        target = inst.target_index if inst.is_jump else None
        if target is not None and target <= index:
            return True
    return False


def driver_loop_break(fn, tx, output, e):
    """Why break `e` in root translator `tx` makes the frame run in Python, or None (Note
    [Graph breaks: a loop that only calls])."""
    if output.own_calls or not output.count_calls():
        return None
    if not config.route_calls_of_eager_frames or not is_plain(fn.__code__):
        return None
    if not loop_holds(tx.instructions, e.break_state.index):
        return None
    return (
        "inside a loop of a frame whose own code made no tensor op: it runs in Python, the "
        "functions it calls compiled as frames of their own"
    )


def own_calls(stack, inst, own, made):
    """The calls root instruction `inst` made that running the frame in Python would not
    compile: its own, and its callee's unless the router compiles that callee."""
    if made == own or inst.opname not in ("CALL", "CALL_KW", "CALL_FUNCTION_EX"):
        return made
    return own if _routed(_callee(stack, inst)) else made


def _callee(stack, inst):
    """The Python value of the callable a call instruction calls (None when not known)."""
    from_top = inst.arg + 2 if inst.opname == "CALL" else inst.arg + 3  # (CALL_KW: names)
    if inst.opname == "CALL_FUNCTION_EX":
        from_top = 3 + (inst.arg & 1)
    candidates = stack[-from_top:][:2] if len(stack) >= from_top else []
    for var in candidates:
        value = getattr(var, "fn", None) or getattr(var, "value", None)
        if value is not None:
            return value
    return None


def _routed(obj):
    """Whether call_through's Router compiles a call of obj as a frame of its own."""
    if type(obj) is types.MethodType:
        obj = obj.__func__
    if type(obj) is types.FunctionType:
        return routable(obj) and not (
            "<locals>" in obj.__qualname__ and (obj.__defaults__ or obj.__kwdefaults__)
        )
    if isinstance(obj, torch.nn.Module):
        return not is_optimized_module(obj) and routable(getattr(type(obj), "forward", None))
    return False
