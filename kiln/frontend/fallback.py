"""What happens when kiln's own code fails on a frame: Note [Faults: the crash contract]."""

import dis
import os
import re
import weakref

from kiln import config, logs
from kiln.exc import UserError

_KILN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def reraise(fullgraph):
    """Whether an internal error goes to the user instead of falling back (fullgraph, strict)."""
    return fullgraph or config.strict


def warn(fn, e, when):
    """The one warning of a frame kiln failed on: the function, where it is, the error."""
    code = fn.__code__
    logs.warn(
        "kiln: internal error %s %s (%s:%d): %s: %s; the function runs eagerly",
        when,
        fn.__qualname__,
        code.co_filename,
        code.co_firstlineno,
        type(e).__name__,
        e,
    )
    logs.counters["frames"]["internal_errors"] += 1


def raised_by_kiln(e):
    """Whether an exception from running compiled code came from kiln itself: its innermost
    frame is kiln's own code or a graph kiln generated (not the user's code, nor torch's)."""
    tb = e.__traceback__
    if tb is None or isinstance(e, UserError) or hasattr(e, "kiln_users_data"):  # (the user's)
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    filename = tb.tb_frame.f_code.co_filename
    if filename.startswith("<eval_with_key>"):
        return True  # an FX graph's generated forward
    return os.path.abspath(filename).startswith(_KILN_DIR + os.sep)


# Note [Faults: no eager rerun after the compiled code ran]
# When the first run of a compiled frame fails inside kiln, running the whole frame eagerly is
# safe only if nothing of the transformed code had an effect yet: a graph that ran its in-place
# writes, a replayed side effect (an append, a print, a hook registered), a resume function that
# ran the user's code after a break would all happen a second time. The transformed code first
# loads the graph's inputs (reads of the frame's sources, through kiln's helpers) and then calls
# the graph; a failure at an instruction before the graph's call (or, for a frame without a
# graph, before its first call of anything) is one of input preparation and the frame runs
# eagerly. A failure in the graph's own call goes the same way when the graph writes nothing
# and draws no random numbers (`graph_without_effects`: it can run again from the start, which
# is what a Triton kernel compiled at its first launch and failing needs). Any later failure, or
# one inside a graph with writes (it may have written into its inputs before it failed), goes to
# the user with a note naming kiln and the user's function.
_rerunnable = weakref.WeakSet()  # installed graph callables without effects


def graph_without_effects(installed, graph):
    """Record that the installed callable of FX `graph` writes nothing and draws nothing."""
    if not has_effects(graph):
        try:
            _rerunnable.add(installed)
        except TypeError:  # (not weakly referable: counted as having effects)
            pass


def has_effects(graph):
    """Whether FX `graph` writes into anything or draws random numbers."""
    return any(_effect(n) for n in graph.nodes)


_INPLACE_OPERATORS = {
    f"i{op}" for op in ("add sub mul truediv floordiv mod pow and or xor").split()
}
_INPLACE_OPERATORS |= {"ilshift", "irshift", "imatmul", "setitem", "delitem"}
_RANDOM = re.compile(
    r"rand|dropout|bernoulli|normal|multinomial|poisson|exponential|cauchy|geometric"
)


def _effect(node):
    if node.op not in ("call_function", "call_method"):
        return False
    target = node.target
    schema = getattr(target, "_schema", None)
    if schema is not None and schema.is_mutable:
        return True
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    if name.endswith("_") and not name.endswith("__") and name != "_set_grad_enabled":
        return True  # (an in-place method: add_, copy_, uniform_)
    return name in _INPLACE_OPERATORS or "out" in node.kwargs or bool(_RANDOM.search(name))


def nothing_ran(e, code):
    """Whether a failure `e` of the transformed code `code`'s first run came before any effect."""
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code is not code:
        tb = tb.tb_next
    if tb is None:
        return True  # the transformed code never started (its arguments failed to bind)
    return tb.tb_lasti < _first_effect(code, tb.tb_frame.f_globals)


def _first_effect(code, globals_):
    """The offset of the transformed code's first effect: its graph call (unless the graph has
    no effects: then what follows it), a store into anything but a local, or (without a graph)
    its first call of anything."""
    graph_loaded = graph_called = False
    for inst in dis.get_instructions(code):
        if inst.opname == "LOAD_GLOBAL" and str(inst.argval).startswith("__kiln_compiled_fn_"):
            graph_loaded = True
            rerunnable = globals_.get(inst.argval) in _rerunnable
        elif inst.opname.startswith("CALL") or inst.opname in _STORES:
            if graph_loaded and not graph_called and rerunnable and inst.opname.startswith("CALL"):
                graph_called = True  # (the graph's own call: it can run again)
                continue
            if graph_loaded or inst.opname in _STORES or not _graph_in(code):
                return inst.offset
    return len(code.co_code)  # (no effect anywhere)


def _graph_in(code):
    return any(n.startswith("__kiln_compiled_fn_") for n in code.co_names)


_STORES = {
    "STORE_ATTR",
    "STORE_SUBSCR",
    "STORE_SLICE",
    "STORE_GLOBAL",
    "STORE_DEREF",
    "DELETE_ATTR",
    "DELETE_SUBSCR",
    "DELETE_GLOBAL",
    "DELETE_DEREF",
}


TRY_BLOCKS_BREAK = "try blocks break"  # restart note: no eager rerun, break at try blocks


def eager_on_error(compiled, code, run_eager):
    """`compiled` (running transformed `code`) that, when it raises before any of its effects,
    runs the frame again in Python: Note [Blocks: ops inside try blocks]."""

    def call(*args, **kwargs):
        try:
            return compiled(*args, **kwargs)
        except Exception as e:
            if not nothing_ran(e, code):
                raise
            e.__traceback__ = None  # (it holds the compiled frame's values)
        # (after, not inside, the except clause: eager's own error gets no __context__)
        logs.counters["frames"]["eager_reruns"] += 1
        return run_eager(args, kwargs)

    return call


def reraise_after_run(fn, e):
    """Give the user a first-run failure that came after the compiled code had effects."""
    if any("not run again eagerly" in n for n in getattr(e, "__notes__", ())):
        return  # (a resume function's first run, re-raised through its caller's)
    code = fn.__code__
    e.add_note(
        f"kiln: internal error in the first run of the compiled {fn.__qualname__} "
        f"({code.co_filename}:{code.co_firstlineno}); not run again eagerly: part of the "
        "compiled code had already run (Note [Faults: no eager rerun after the compiled code ran])"
    )
    logs.counters["frames"]["internal_errors"] += 1
