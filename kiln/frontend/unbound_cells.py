"""Resume functions: an unbound read of the original frame's own cell raises UnboundLocalError.

Note [Resume: unbound cells of the original frame]
A resume function gets every cell of the original code as a free variable (Note [Resume:
layout]). CPython words an unbound cell by its kind in the code that reads it: a
cell variable of the reading frame raises UnboundLocalError, a free variable NameError. So
`a` deleted through `f.__closure__[0]` (or never assigned) read after a break would raise
NameError in the resume function where eager raised UnboundLocalError, and an
`except UnboundLocalError` would not catch it. Each LOAD_DEREF / DELETE_DEREF of a name that
was a cell variable of the original code gets an exception-table entry of its own (at the
depth of the entry that covered it, which also covers the handler) whose handler turns a
NameError into the UnboundLocalError CPython raises for a cell variable, and raises it: no cost
unless it raises. Translators never see these entries (kiln.frontend.indexed_insts): they trace
the instructions as the original's.
"""

from kiln.bytecode import ExceptionEntry, emit, make_inst

_GUARDED = frozenset({"LOAD_DEREF", "DELETE_DEREF"})


class UnboundCellError:
    """The handler's callable: NameError -> the UnboundLocalError of cell variable `name`."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __call__(self, exc):
        if type(exc) is not NameError:
            return exc
        return unbound_local_error(self.name)

    def __repr__(self):
        return f"<unbound cell {self.name!r}>"


def unbound_local_error(name):
    """The UnboundLocalError CPython raises reading cell variable `name` before assignment."""
    probe_name = name if name.isidentifier() else "x"
    namespace = {}
    exec(  # noqa: S102 (an identifier only)
        f"def probe():\n    def inner():\n        return {probe_name}\n"
        f"    return {probe_name}\n    {probe_name} = None\n",
        namespace,
    )
    try:
        namespace["probe"]()
    except UnboundLocalError as e:
        if probe_name != name:
            e.args = (e.args[0].replace(f"'{probe_name}'", f"'{name}'"),)
        e.__traceback__ = None
        return e
    raise AssertionError("reading an unassigned cell variable did not raise")  # pragma: no cover


def guard_cell_reads(insts, own_cells):
    """`insts` with each LOAD_DEREF / DELETE_DEREF of a name in `own_cells` covered by its own
    handler (appended at the end) that raises the UnboundLocalError eager raised."""
    handlers = []
    for inst in insts:
        if inst.opname not in _GUARDED or inst.argval not in own_cells:
            continue
        outer = inst.exn_tab_entry
        handler = [
            *emit.load_const(UnboundCellError(inst.argval)),
            *emit.swap(2),  # [callable, exc]: the call layout of a method and its self
            *emit.call(0),
            make_inst("RAISE_VARARGS", 1, 1),
        ]
        for h in handler:
            h.lineno, h.positions = inst.lineno, inst.positions
            h.exn_tab_entry = outer
        depth = outer.depth if outer is not None else 0
        inst.exn_tab_entry = ExceptionEntry(inst, inst, handler[0], depth, False)
        handlers += handler
    return insts + handlers


def unguarded_entry(inst):
    """The entry covering `inst` as in the original code (Note [Resume: unbound cells of the
    original frame]): a guard's entry is replaced by the one its handler runs under."""
    e = inst.exn_tab_entry
    if e is not None and e.target.opname == "LOAD_CONST":
        if isinstance(e.target.argval, UnboundCellError):
            return e.target.exn_tab_entry
    return e
