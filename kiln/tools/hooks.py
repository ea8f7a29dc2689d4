"""kiln.tools' registrations in kiln.hooks: the debug dir report and the minifier's repro files.

Each hook checks its setting first (config.debug_dir, config.repro_after), so with both unset a
compile pays one function call per event; debug_dir.py and minifier.py (with
the backend and autograd under them) are imported on first use, keeping `import kiln` light.
"""

from kiln import config, hooks


def _frame_start(fn):
    if config.debug_dir:
        from kiln.tools import debug_dir

        debug_dir.on_frame_start(fn)


def _frame_compiled(fn, entry, index, folder):
    if config.debug_dir:
        from kiln.tools import debug_dir

        debug_dir.on_frame(fn, entry, index, folder)


def _graph_break(record):
    if config.debug_dir:
        from kiln.tools import debug_dir

        debug_dir.on_break(record)


def _recompile(fn, reasons):
    if config.debug_dir:
        from kiln.tools import debug_dir

        debug_dir.on_recompile(fn, reasons)


def _backend(backend_fn, name):
    if config.repro_after != "backend":
        return backend_fn
    from kiln.tools import minifier

    return minifier.backend_with_repro(backend_fn, name)


def _backend_graph(compiled, gm, example_inputs):
    if config.repro_after == "aot" and config.repro_level == "accuracy":
        from kiln.tools import minifier

        minifier.after_aot(gm, example_inputs, compiled=compiled)
    if config.debug_dir:
        from kiln.tools import debug_dir

        compiled = debug_dir.on_backend_graph(gm, example_inputs, compiled)
    return compiled


def _backend_error(gm, example_inputs, error):
    if config.repro_after == "aot":
        from kiln.tools import minifier

        minifier.after_aot(gm, example_inputs, error=error)


def install():
    """Register every hook (idempotent)."""
    hooks.register("frame_start", _frame_start)
    hooks.register("frame_compiled", _frame_compiled)
    hooks.register("graph_break", _graph_break)
    hooks.register("recompile", _recompile)
    hooks.register("backend", _backend)
    hooks.register("backend_graph", _backend_graph)
    hooks.register("backend_error", _backend_error)


install()
