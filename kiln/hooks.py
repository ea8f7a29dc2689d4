"""Extension points the stages call and kiln.tools registers into (no stage imports kiln.tools).

    hooks.register("graph_break", fn)         # kiln.tools.hooks does this when kiln is imported
    hooks.fire("graph_break", record)         # the frontend, when a frame breaks
    compiled = hooks.chain("backend_graph", compiled, gm, example_inputs)

Events (arguments after the value for chain):
  frame_start(fn)                       the frontend starts tracing a frame
  compile_start(event)                  a frame's compile starts (kiln.on_compile_start)
  compile_end(event)                    a frame's compile ended, or raised
                                        (kiln.on_compile_end)
  frame_compiled(fn, entry, index, folder)  a frame's entry was dumped to the debug dir
  graph_break(record)                   a graph break was recorded
  recompile(fn, reasons)                a frame recompiles (reasons: the guards that failed;
                                        fired under config.debug_dir only)
  guard_failure(root_fn, reason)        a frame recompiles (fired only while listened to): the
                                        function the user compiled, and the first guard that
                                        failed in the newest entry
  backend(backend_fn, name) -> fn       chain: the backend the frontend is about to call
  backend_graph(compiled, gm, inputs) -> compiled   chain: the code generator compiled a graph
  backend_error(gm, inputs, error)      the code generator raised on a graph
"""

_HOOKS = {
    name: []
    for name in (
        "frame_start",
        "compile_start",
        "compile_end",
        "frame_compiled",
        "graph_break",
        "recompile",
        "guard_failure",
        "backend",
        "backend_graph",
        "backend_error",
    )
}


def register(event, fn):
    """Call fn on every `event` from now on."""
    if fn not in _HOOKS[event]:
        _HOOKS[event].append(fn)
    return fn


def unregister(event, fn):
    """Stop calling fn on `event` (no-op if it was not registered)."""
    if fn in _HOOKS[event]:
        _HOOKS[event].remove(fn)


def clear(event):
    """Stop calling every function registered for event."""
    _HOOKS[event].clear()


def listening(event):
    """Whether any function is registered for event (to skip work only a listener needs)."""
    return bool(_HOOKS[event])


def fire(event, *args):
    """Call every function registered for event."""
    for fn in _HOOKS[event]:
        fn(*args)


def chain(event, value, *args):
    """Pass value through every function registered for event; returns the last result."""
    for fn in _HOOKS[event]:
        value = fn(value, *args)
    return value
