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
# module. A name installed by a trace that made no entry is removed at once unless live code
# loads it too.
_counts = {}  # (id of the globals dict, name) -> live transformed codes that load it


def install(output, name, value):
    """Set global `name` of the frame's module to `value`, recorded on the output graph."""
    output.root_fn.__globals__[name] = value
    output.installed_globals.append(name)


def keep_while(code, output):
    """Keep the names `output` installed while `code` (the transformed code) lives."""
    g = output.root_fn.__globals__
    names = tuple(dict.fromkeys(output.installed_globals))
    output.installed_globals = []
    if not names:
        return
    for n in names:
        _counts[(id(g), n)] = _counts.get((id(g), n), 0) + 1
    weakref.finalize(code, _release, g, names).atexit = False


def release_unused(output):
    """Remove the names a trace that made no entry installed (unless live code loads them)."""
    g = output.root_fn.__globals__
    for n in dict.fromkeys(output.installed_globals):
        if (id(g), n) not in _counts:
            g.pop(n, None)
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
