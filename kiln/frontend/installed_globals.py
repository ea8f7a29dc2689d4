"""The globals a transformed code loads live as long as that code
(Note [Globals: installed for as long as the code that loads them])."""

import weakref

# Note [Globals: installed for as long as the code that loads them]
# The transformed code of a frame loads what kiln holds through globals of the frame's module:
# its compiled graph (`__kiln_compiled_fn_N`), objects with no source (`___kiln_obj_<type>_<id>`:
# a resume function's entry, a helper, a constant), cells (`___kiln_cell_<id>`) and weak class
# holders (`___kiln_weak_...`). Installed and never removed, they kept every compiled graph and
# whatever a resume function's frame cache held (the closure cells of the user's function, so
# the objects in them) for the life of the module: a test worker compiling thousands of frames
# grew to gigabytes. Each name is now counted per live transformed code that loads it and
# removed from the module when the last such code dies (its frame cache was reset, its entry
# dropped). A code object lives while any frame runs it or any function made from it exists,
# so no running code loses a global. A value stays alive as long as a code that loads it; kiln
# keeps no other strong reference (the weak class holders: Note [Bytecode: classes loaded
# weakly]). A child frame cache (a resume function's) holds its root cache weakly: the root's
# code holds the child through these globals, and a strong way back made a cycle through the
# module. A trace holds the names it installs until it made its code (they pass to the code) or
# failed (they are let go of). A code dies at any moment (in a collection, while the program
# iterates over a module's globals), so its names are removed at kiln's own moments, as they
# were installed: when a frame compiles next, or at kiln.reset().
_counts = {}  # (id of the globals dict, name) -> traces and live transformed codes holding it
_dead = []  # (globals dict, names) of codes that died, until the next flush()


def install(output, name, value):
    """Set global `name` of the frame's module to `value`, held for `output`'s trace."""
    g = output.root_fn.__globals__
    g[name] = value
    if name not in output.installed_globals:
        output.installed_globals.append(name)
        _counts[(id(g), name)] = _counts.get((id(g), name), 0) + 1


def keep_while(code, output):
    """Hand the names `output`'s trace holds to `code` (its transformed code): kept while it
    lives."""
    names = tuple(output.installed_globals)
    output.installed_globals = []
    if names:
        finalizer = weakref.finalize(code, _dead.append, (output.root_fn.__globals__, names))
        finalizer.atexit = False


def flush():
    """Remove the names of codes that died (kiln's own moments: a compile starts, a reset)."""
    while _dead:
        _release(*_dead.pop())


def release_unused(output):
    """Let go of the names a trace that made no entry holds."""
    _release(output.root_fn.__globals__, tuple(output.installed_globals))
    output.installed_globals = []


def _release(g, names):
    for n in names:
        key = (id(g), n)
        left = _counts.get(key, 0) - 1
        if left > 0:
            _counts[key] = left
            continue
        _counts.pop(key, None)
        g.pop(n, None)
