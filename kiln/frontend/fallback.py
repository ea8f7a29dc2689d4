"""What happens when kiln's own code fails on a frame: Note [Faults: the crash contract]."""

import dis
import inspect
import os
import re
import weakref

import torch

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
_redrawing = weakref.WeakSet()  # ... whose one effect is drawing from the default generators


def graph_without_effects(installed, graph):
    """Record that the installed callable of FX `graph` writes nothing and draws nothing (or
    only draws from the default generators: it can run again once their states are restored)."""
    kinds = effects(graph)
    record = _rerunnable if not kinds else _redrawing if kinds == {"draws"} else None
    if record is not None:
        try:
            record.add(installed)
        except TypeError:  # (not weakly referable: counted as having effects)
            pass


def effects(graph):
    """What FX `graph` does beyond computing its outputs: {"writes", "draws"} or fewer
    ("draws": random numbers from the default generators only)."""
    return {kind for n in graph.nodes if (kind := _effect(n))}


_INPLACE_OPERATORS = {
    f"i{op}" for op in ("add sub mul truediv floordiv mod pow and or xor").split()
}
_INPLACE_OPERATORS |= {"ilshift", "irshift", "imatmul", "setitem", "delitem"}
_RANDOM = re.compile(
    r"rand|dropout|bernoulli|normal|multinomial|poisson|exponential|cauchy|geometric"
)


def _effect(node):
    """ "writes", "draws" or None (Note [Faults: no eager rerun after the compiled code ran])."""
    if node.op not in ("call_function", "call_method"):
        return None
    target = node.target
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    if "dropout" in name and not isinstance(target, str):
        return _dropout_effect(node)
    schema = getattr(target, "_schema", None)
    if schema is not None and schema.is_mutable:
        return "writes"
    draws = bool(_RANDOM.search(name)) or name in _RANDOM_FILLS
    if draws and node.kwargs.get("generator") is not None:
        return "writes"  # (a generator of the user's: its state is not put back)
    if _in_place(name):  # (an in-place method: add_, copy_, uniform_)
        if node.args and _made_by_graph(node.args[0]):
            return "draws" if draws else None  # (into a tensor no one else sees)
        return "writes"
    if name in _INPLACE_OPERATORS or "out" in node.kwargs:
        return "writes"
    return "draws" if draws else None


def _in_place(name):
    return name.endswith("_") and not name.endswith("__") and name != "_set_grad_enabled"


# factories: their result is a new tensor no input shares (`torch.empty(n).normal_()`)
_FACTORIES = {
    *(getattr(torch, n) for n in ("empty", "zeros", "ones", "full", "rand", "randn", "clone")),
    *(getattr(torch, f"{n}_like") for n in ("empty", "zeros", "ones", "full", "rand", "randn")),
}
_FACTORY_METHODS = {"new_empty", "new_zeros", "new_ones", "new_full", "clone"}
_RANDOM_FILLS = {"normal_", "uniform_", "random_", "exponential_", "cauchy_", "geometric_"}


def _made_by_graph(node):
    """Whether a graph value is a tensor made inside the graph by a factory (or clone), possibly
    through in-place methods on it: writing into it is seen by no input nor anyone else."""
    for _ in range(64):
        if not isinstance(node, torch.fx.Node):
            return False
        if node.op == "call_function" and node.target in _FACTORIES:
            return True
        if node.op == "call_method" and node.target in _FACTORY_METHODS:
            return True
        if node.op == "call_method" and _in_place(node.target) and node.args:
            node = node.args[0]  # (`t.normal_()` is t)
            continue
        return False
    return False


def _dropout_effect(node):
    """A dropout call draws random numbers (and, in place, writes) only in training with p > 0
    (eager returns its input as it is otherwise)."""
    try:
        bound = inspect.signature(node.target).bind(*node.args, **node.kwargs)
    except (TypeError, ValueError):  # (no signature to read: counted as writing)
        return "writes"
    bound.apply_defaults()
    arguments = bound.arguments
    training = arguments.get("training", arguments.get("train", True))
    p = arguments.get("p", 0.5)
    if not isinstance(training, bool) or not isinstance(p, (int, float)):
        return "writes"  # (a value the graph computes)
    if not training or p == 0:
        return None
    return "writes" if arguments.get("inplace") else "draws"


def rng_states():
    """The default generators' states (CPU, and CUDA's once initialised)."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    return torch.get_rng_state(), cuda


def restore_rng_states(states):
    cpu, cuda = states
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


def nothing_ran(e, code, rng_restored=False):
    """Whether a failure `e` of the transformed code `code` came before any effect (a graph's
    draws count as none when the caller restores the generators' states)."""
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code is not code:
        tb = tb.tb_next
    if tb is None:
        return True  # the transformed code never started (its arguments failed to bind)
    return tb.tb_lasti < _first_effect(code, tb.tb_frame.f_globals, rng_restored)


def _first_effect(code, globals_, rng_restored):
    """The offset of the transformed code's first effect: its graph call (unless the graph has
    no effects: then what follows it), a store into anything but a local, or (without a graph)
    its first call of anything."""
    graph_loaded = graph_called = False
    for inst in dis.get_instructions(code):
        if inst.opname == "LOAD_GLOBAL" and str(inst.argval).startswith("__kiln_compiled_fn_"):
            graph_loaded = True
            graph = globals_.get(inst.argval)
            rerunnable = graph in _rerunnable or (rng_restored and graph in _redrawing)
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


NO_EAGER_RERUN = "no eager rerun"  # restart note: breaks where a rerun was planned


def eager_on_error(compiled, code, run_eager, draws):
    """`compiled` (running transformed `code`) that, when it raises before any of its effects,
    runs the frame again in Python: Note [Blocks: ops inside try blocks]. A graph that `draws`
    random numbers has the generators' states put back first (the rerun draws the same)."""

    def call(*args, **kwargs):
        states = rng_states() if draws else None
        try:
            return compiled(*args, **kwargs)
        except Exception as e:
            if not nothing_ran(e, code, rng_restored=draws):
                raise
            e.__traceback__ = None  # (it holds the compiled frame's values)
        # (after, not inside, the except clause: eager's own error gets no __context__)
        if states is not None:
            restore_rng_states(states)
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
