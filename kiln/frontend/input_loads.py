"""The loads of a compiled graph's inputs in the transformed code, module paths read once.

Note [Bytecode: module paths read once]
A model's graph takes every parameter and buffer as an input, each rebuilt from its source:
`self._modules['h']._modules['0']._modules['attn']._modules['c_attn']._parameters['weight']`,
the whole path again for each tensor (resnet: 78 inputs, ~600 attribute and item reads a call).
A path that two inputs or more share is read once, kept in a temporary for the following loads,
and the temporaries are cleared after the call. Only nn.Module's own dicts are cached this way
(`m._modules`, `m._parameters`, `m._buffers` and their items: plain dicts, whose reads run no
code), and nothing runs between the loads, so each load still finds what it found before.
"""

from collections import Counter

from kiln.bytecode import emit
from kiln.frontend.source import AttrSource, GetItemSource

_MODULE_DICTS = ("_modules", "_parameters", "_buffers")


def _module_step(source):
    """Whether `source` reads one of a module's own dicts, or an item of one."""
    t = type(source)
    if t is AttrSource:
        return source.attr in _MODULE_DICTS
    if t is GetItemSource:
        parent = source.source
        return (
            type(parent) is AttrSource
            and parent.attr in _MODULE_DICTS
            and type(source.index) in (str, int)
        )
    return False


def _prefixes(source):
    """The proper ancestors of `source` reached by module steps only, down from it."""
    out = []
    s = source.source if _module_step(source) else None
    while s is not None and _module_step(s):
        out.append(s)
        s = s.source
    return out


def load_inputs(call, body, sources):
    """Emit the loads of `sources` into `call` (temporaries named in `body`); returns the
    temporaries, for clear_temps after the call (Note [Bytecode: module paths read once])."""
    children = {}  # prefix -> the sources read from it: kept when it has two or more
    for s in sources:
        child = s
        for p in _prefixes(s):
            children.setdefault(p, set()).add(child)
            child = p
    counts = Counter({p: len(c) for p, c in children.items()})
    temps = {}
    for source in sources:
        _load(call, body, source, counts, temps)
    return list(temps.values())


def _load(call, body, source, counts, temps):
    name = temps.get(source)
    if name is not None:
        call.extend(emit.load_fast(name))
        return
    if not _module_step(source):
        source.reconstruct(call)
        return
    _load(call, body, source.source, counts, temps)
    if type(source) is AttrSource:  # (the step of AttrSource/GetItemSource.reconstruct)
        call.extend(emit.load_attr(source.attr))
    else:
        call.extend(emit.load_const(source.index))
        call.extend(emit.binary_subscr())
    if counts.get(source, 0) >= 2:
        name = f"___kiln_path_{len(body.temp_names)}"
        body.temp_names.append(name)
        call.extend(emit.copy(1))
        call.extend(emit.store_fast(name))
        temps[source] = name


def clear_temps(call, names):
    """Drop the temporaries' references (the frame holds nothing the call did not)."""
    for name in names:
        call.extend(emit.load_const(None))
        call.extend(emit.store_fast(name))
