"""Side effects made while tracing, replayed by the transformed code right after the graph runs.

    def f(self, x, xs):               def f(self, x, xs):   # transformed
        self.count = self.count + 1       ___out = __kiln_compiled_fn_0(x)
        xs.append(x * 2)                  self.count = 4          # attribute stores, in order
        return x + 1                      xs[:] = [xs[0], ___out[1]]   # whole new contents
                                          return ___out[0]

While tracing, reads see the writes (`load_attr`). Stores are snapshotted per root instruction
and rolled back when that instruction breaks (it then runs in Python and makes them itself).
In-place mutations of containers and new objects that existed before the instruction cannot be
rolled back: they bump `version`, and a break after such a mutation is not placed (the frame
runs eagerly instead).

Note [Side effects: one variable per mutable container]
A real list, dict or deque reached from a source is wrapped once per frame: reaching it again
(`self.log` read in __enter__ and again in __exit__, or through another name) gives the same
variable, so each read sees the mutations made before it and the replay writes the final
contents once. (Two variables would each replay their own contents: the first append lost.)
"""

import inspect
import types
from typing import NamedTuple

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.source import GetItemSource, LocalSource, advance_iter
from kiln.frontend.variables.classes import in_making_order
from kiln.frontend.variables.constant import is_literal
from kiln.frontend.variables.dict_keys import is_stand_in, is_traced_tensor, key_var
from kiln.frontend.variables.dicts import ConstDictVariable
from kiln.frontend.variables.finalizers import check_drop_value, check_drops, check_local_drop
from kiln.frontend.variables.lists import (
    BaseListVariable,
    DequeVariable,
    ListIteratorVariable,
    iterator_steps,
)
from kiln.frontend.variables.misc import NullVariable
from kiln.frontend.variables.sets import SetVariable
from kiln.frontend.variables.user_attrs import instance_static
from kiln.frontend.variables.user_defined import NewObjectVariable, UserDefinedClassVariable

_UNSET = object()
DELETED = NullVariable()  # the value of an attribute deleted while tracing (never read)


class EffectsSnapshot(NamedTuple):
    """SideEffects.snapshot(): the recorded stores and how many traced-cell writes were made."""

    log: dict
    cell_writes: int
    draws: int = 0  # random draws made (Note [Random: draws before the graph])
    data_writes: int = 0  # `x.data = y` made (Note [Tensors: attributes stored in the frame])


def _own_dict(obj):
    """`obj.__dict__` read from its slot, not through a Python `__getattribute__` or property of
    its class (whose calls the program would see), or None."""
    slot = instance_static(type(obj), "__dict__", None)
    if type(slot) in (types.GetSetDescriptorType, types.MemberDescriptorType):
        try:
            return slot.__get__(obj, type(obj))
        except (AttributeError, TypeError):
            return None
    return None


class SideEffects:
    """Attribute stores on objects from outside the frame, mutated outside lists/dicts, globals,
    closure cells: one log in program order (Note [Side effects: replay order])."""

    def __init__(self):
        self.log = {}  # key -> (kind, payload), ordered by each key's last mutation
        self.cell_objects = {}  # id(real cell) -> free variable name (inlined code reads it)
        self.containers = {}  # id(real list/dict/deque from a source) -> (it, its variable)
        self.version = 0
        self.records = 0  # stores/calls recorded so far (Note [Generators: drained at a break])
        self.written = []  # serials of pre-existing objects and cells written, in order
        self.step_serial = 0  # set by the root translator before each instruction
        self.cell_undo = []  # (frame locals, name, old value) per traced-cell write
        self.lazy_readers = []  # per generator drained at a break: the cells/globals it read
        self.attr_order = {}  # ("attr"/"dictitem", id, name) -> when first stored (dict order)
        self.draws = []  # random draws, made before the graph (Note [Random: draws before the graph])
        self.data_undo = []  # per traced `x.data = y`: a call that undoes it on the variable

    def tracked_container(self, tx, value, source):
        """The variable already wrapping this real mutable container (a list, dict or deque
        reached again, through the same or another source: one variable, so that every read
        sees every mutation), or None. Another source is guarded to be the same object."""
        hit = self.containers.get(id(value))
        if hit is None:
            return None
        var = hit[1]
        if var.source != source:
            tx.output.guards.add(GuardKind.ALIASING, source, var.source)
        return var

    def track_container(self, value, var):
        self.containers[id(value)] = (value, var)  # (the value kept alive: ids stay unique)
        return var

    def track_iterator(self, var):
        """An iterator input: advanced after the graph by the items the trace took from it."""
        self.log[("iterator", id(var))] = ("iterator", var)  # (not a store: `records` unchanged)
        return var

    def __bool__(self):
        return any(kind != "iterator" or var.index for kind, var in self.log.values())

    def _record(self, key, kind, payload):
        self.records += 1
        self.log.pop(key, None)
        self.log[key] = (kind, payload)

    def load_global(self, name, globals_name=""):
        """The value stored while tracing into global `name` of the root function's module (or
        of the module whose globals dict the guard name `globals_name` binds), or None."""
        key = ("global", name) if not globals_name else ("global", name, globals_name)
        hit = self.log.get(key)
        return hit[1] if hit is not None else None

    def load_cell(self, name):
        """The value stored while tracing into the root frame's free variable `name`, or None."""
        hit = self.log.get(("cell", name))
        return hit[1] if hit is not None else None

    # --- recording ------------------------------------------------------------------------------
    def store_attr(self, obj_var, name, value, raw=False):
        """`obj.name = value`; raw: made by object.__setattr__ inside a user __setattr__, and
        replayed with it (Note [Side effects: stores through a user __setattr__])."""
        if obj_var.source is None:
            unimplemented(f"attribute store .{name} on an object without a source")
        key = ("attr", id(obj_var.value), name)
        if self.is_deleted(obj_var, name):
            unimplemented(f"attribute .{name} stored again after its deletion while tracing")
        self._check_attr_drop(key, obj_var, name, "assignment")
        self.attr_order.setdefault(key, len(self.attr_order))
        if key in self.log and name not in (getattr(obj_var.value, "__dict__", None) or ()):
            # a new attribute stored again: replayed where it was first stored, so that the
            # instance dict gets its keys in eager's order
            self.records += 1
            self.log[key] = ("attr", (obj_var, name, value, raw))
            return
        self._record(key, "attr", (obj_var, name, value, raw))

    def store_tensor_attr(self, tensor_var, name, value):
        """`t.name = value` on a traced tensor, replayed on the tensor after the graph (Note
        [Tensors: attributes stored in the frame])."""
        self._record(("tensorattr", id(tensor_var), name), "tensorattr", (tensor_var, name, value))

    def load_tensor_attr(self, tensor_var, name):
        """The value the frame stored as `t.name` on this traced tensor, or None."""
        hit = self.log.get(("tensorattr", id(tensor_var), name))
        return hit[1][2] if hit is not None else None

    def store_dict_item(self, obj_var, name, value):
        """`obj.__dict__[name] = value` for a name behind a data descriptor of obj's class
        (Note [Objects: the instance __dict__ as a view])."""
        key = ("dictitem", id(obj_var.value), name)
        self._check_attr_drop(key, obj_var, name, "assignment")
        self.attr_order.setdefault(key, len(self.attr_order))
        self._record(key, "attr", (obj_var, name, value, "dict"))

    def load_attr(self, obj_var, name):
        """The value stored while tracing, or None."""
        hit = self.log.get(("attr", id(getattr(obj_var, "value", None)), name))
        if hit is not None and hit[1][2] is DELETED:
            unimplemented(f"read of the attribute .{name} deleted while tracing")
        return hit[1][2] if hit is not None else None

    def delete_attr(self, obj_var, name):
        """`del obj.name` of an instance attribute (Note [Objects: the instance __dict__ as a
        view]): replayed as `del obj.name`."""
        key = ("attr", id(obj_var.value), name)
        self._check_attr_drop(key, obj_var, name, "deletion")
        hit = self.log.get(key)
        if hit is not None and hit[1][2] is not DELETED:
            if name not in (_own_dict(obj_var.value) or ()):
                # a new attribute stored and deleted in the frame: nothing to replay
                self.records += 1
                del self.log[key]
                return
        self.attr_order.setdefault(key, len(self.attr_order))
        self._record(key, "attr", (obj_var, name, DELETED, True))

    def _check_attr_drop(self, key, obj_var, name, what):
        """Break before a store over an attribute whose value may run a Python __del__ when
        dropped (Note [Finalizers: a store that may run __del__])."""
        what = f"attribute {what} .{name}"
        hit = self.log.get(key)
        if hit is not None:
            if hit[1][2] is not DELETED:
                check_drops([hit[1][2]], what)
            return
        obj = obj_var.value
        state = _own_dict(obj)
        old = state.get(name, _UNSET) if isinstance(state, dict) else _UNSET
        if old is _UNSET and key[0] == "attr":
            slot = inspect.getattr_static(type(obj), name, None)
            if type(slot) is types.MemberDescriptorType:
                try:
                    old = slot.__get__(obj, type(obj))
                except AttributeError:
                    old = _UNSET
        if old is not _UNSET:
            check_drop_value(old, what)

    def is_deleted(self, obj_var, name):
        """Whether `obj.name` was deleted while tracing (and not stored again)."""
        hit = self.log.get(("attr", id(getattr(obj_var, "value", None)), name))
        return hit is not None and hit[1][2] is DELETED

    def mutate_container(self, var):
        self.written.append(var.serial)
        if var.source is not None:
            self._record(("container", id(var)), "container", var)
        if var.serial < self.step_serial:
            # an object that existed before this root instruction: re-running the instruction
            # in Python would repeat the mutation (objects made by the instruction itself would
            # be made afresh)
            self.version += 1

    def write_cell_ref(self, ref, value):
        """A store into an enclosing traced frame's cell (`nonlocal`, a walrus in a genexp);
        journaled, so that an instruction that breaks leaves the cell as it found it."""
        frame_locals = ref.tx.symbolic_locals
        old = frame_locals.get(ref.name)
        if old is not None:
            check_local_drop(old, ref.name)
        self.written.append(ref.serial)
        self.cell_undo.append((frame_locals, ref.name, frame_locals.get(ref.name, _UNSET)))
        frame_locals[ref.name] = value

    def has_global_stores(self):
        return any(key[0] == "global" for key in self.log)

    def store_global(self, name, value, globals_name="", f_globals=None):
        """`global name; name = value` in the root function's module, or in another module's
        (Note [Side effects: globals of another module]); f_globals: that module's dict."""
        key = ("global", name) if not globals_name else ("global", name, globals_name)
        old = self.load_global(name, globals_name)
        if old is not None:
            check_drops([old], f"assignment to the global {name!r}")
        elif f_globals is not None and name in f_globals:
            check_drop_value(f_globals[name], f"assignment to the global {name!r}")
        self._record(key, "global", value)

    def store_cell(self, name, value, cell=None):
        old = self.load_cell(name)
        if old is not None:
            check_drops([old], f"assignment to the free variable {name!r}")
        elif cell is not None:
            try:
                check_drop_value(cell.cell_contents, f"assignment to the free variable {name!r}")
            except ValueError:
                pass  # (an empty cell)
        self._record(("cell", name), "cell", value)
        if cell is not None:
            self.cell_objects[id(cell)] = name

    def pending_cell(self, cell):
        """The value stored while tracing into this real cell object, or None."""
        name = self.cell_objects.get(id(cell))
        if name is not None:
            return self.load_cell(name)
        hit = self.log.get(("attr", id(cell), "cell_contents"))  # stored by an inlined function
        return hit[1][2] if hit is not None else None

    def record_call(self, key, fn_var, args, kwargs):
        """A call replayed after the graph with these (constant) arguments, e.g. a logging call
        (Note [Side effects: logging replayed after the graph])."""
        self._record(key, "call", (fn_var, args, kwargs))

    def mutate_new_object(self, var):
        """An object made while tracing got an attribute: like a container mutation."""
        self.written.append(var.serial)
        if var.serial < self.step_serial:
            self.version += 1

    # --- generators drained at a break (Note [Generators: drained at a break]) ------------------
    def note_read(self, key):
        """A cell or global read: remembered for each generator body being drained."""
        for keys in self.lazy_readers:
            keys.add(key)

    def snapshot(self):
        """The recorded stores, to undo an instruction that broke."""
        return EffectsSnapshot(
            dict(self.log), len(self.cell_undo), len(self.draws), len(self.data_undo)
        )

    def mark(self):
        """Counts of what was recorded so far (equal marks: nothing was stored in between)."""
        return (
            self.records,
            len(self.written),
            len(self.cell_undo),
            len(self.draws),
            len(self.data_undo),
            iterator_steps(),
        )

    def changed_since(self, snap):
        """Whether anything was stored since `snap` (a speculative trace must leave no effect)."""
        if self.log.keys() != snap.log.keys() or len(self.cell_undo) != snap.cell_writes:
            return True
        if len(self.draws) != snap.draws or len(self.data_undo) != snap.data_writes:
            return True
        return any(self.log[k] is not snap.log[k] for k in snap.log)

    def restore(self, snap):
        log, cell_writes, draws, data_writes = snap
        self.log = dict(log)
        while len(self.data_undo) > data_writes:
            self.data_undo.pop()()
        del self.draws[draws:]  # the instruction runs in Python: it draws them itself
        while len(self.cell_undo) > cell_writes:
            frame_locals, name, old = self.cell_undo.pop()
            if old is _UNSET:
                frame_locals.pop(name, None)
            else:
                frame_locals[name] = old

    # --- replay ---------------------------------------------------------------------------------
    def codegen(self, cg, pin=()):
        """Emit the replay (after the graph call, before anything reads the state); the values
        in `pin` are read before the stores (Note [Side effects: outputs read before the stores]).

        Note [Side effects: replay order]
        Two phases. First every value to store, and every object stored into, is loaded into a
        temporary: reads see the state before the call (`old = self.a; self.a = new;
        xs.append(old)` appends the old value, though its source `self.a` is stored first).
        Then the stores run in program order (each key at its last mutation), so that stores
        with observable effects (a setter, Module.__setattr__) happen in eager's order. A return
        value is loaded before the stores too: `kwargs["new"] = kwargs.pop("old"); return
        Out(cache=kwargs["new"])` returns the object its source `kwargs["old"]` held on entry.
        """
        stores = []
        advances = []  # after the stores: the step past a tuple's end may free it (its __del__
        # sees the frame's cells stored, as in eager, where next() ran after them)
        first = []  # before the stores: a dict's iterator (Note [Dicts: iterators at a break])
        for key, (kind, payload) in self.log.items():
            if kind == "iterator":
                if payload.index:
                    it = _to_temp(cg, lambda var=payload: var.source.reconstruct(cg))
                    if getattr(payload, "advance_first", False):
                        first.append(_advance(cg, it, payload.index))
                    else:
                        advances.append(_advance(cg, it, payload.index))
                continue
            if kind == "attr":
                obj_var, name, value, raw = payload
                if value is DELETED:  # del o.name
                    o = _to_temp(cg, lambda obj_var=obj_var: obj_var.source.reconstruct(cg))
                    stores.append(emit.load_fast(o) + emit.delete_attr(name))
                    continue
                v = _to_temp(cg, lambda value=value: cg.reconstruct(value))
                o = _to_temp(cg, lambda obj_var=obj_var: obj_var.source.reconstruct(cg))
                if raw == "dict":  # o.__dict__[name] = v
                    stores.append(
                        emit.load_fast(v)
                        + emit.load_fast(o)
                        + emit.load_attr("__dict__")
                        + emit.load_const(name)
                        + emit.store_subscr()
                    )
                    continue
                if raw:
                    cg.load_object(object.__setattr__)
                    f = cg.new_temp()
                    cg.extend(emit.store_fast(f))
                    stores.append(
                        emit.with_null(emit.load_fast(f))
                        + emit.load_fast(o)
                        + emit.load_const(name)
                        + emit.load_fast(v)
                        + emit.call(3)
                        + emit.pop_top()
                    )
                    continue
                stores.append(emit.load_fast(v) + emit.load_fast(o) + emit.store_attr(name))
            elif kind == "tensorattr":  # (the tensor: from its source, or a graph output)
                tensor_var, name, value = payload
                v = _to_temp(cg, lambda value=value: cg.reconstruct(value))
                o = _to_temp(cg, lambda tensor_var=tensor_var: cg.reconstruct(tensor_var))
                stores.append(emit.load_fast(v) + emit.load_fast(o) + emit.store_attr(name))
            elif kind == "container" and isinstance(payload, ConstDictVariable):
                by_key = _dict_stores(cg, payload)
                if by_key is not None:
                    stores.append(by_key)
                    continue
                # new = {...}; d.clear(); d.update(new)  (the new contents may read the old)
                var = payload

                def build_dict(var=var):
                    for k, v in var.items.items():
                        cg.reconstruct(key_var(k))
                        cg.reconstruct(v)
                    cg.extend(emit.build_map(len(var.items)))

                new = _to_temp(cg, build_dict)
                d = _to_temp(cg, lambda var=var: var.source.reconstruct(cg))
                stores.append(_calls(d, (("clear", None), ("update", new))))
            elif kind == "container" and isinstance(payload, SetVariable):
                # s.difference_update(removed); s.update(added)  (Note [Sets: inputs])
                var = payload
                gone, new = var.initial - var.values, var.values - var.initial
                # (added in the order the trace added them: the order of a set's items depends
                # on the order they went in)
                new = [v for v in var.added or () if v in new] + [
                    v for v in new if v not in (var.added or ())
                ]
                gone_t = _to_temp(cg, lambda gone=gone: SetVariable.build_set(cg, gone))
                new_t = _to_temp(
                    cg, lambda new=new: SetVariable.build_set(cg, new, emit.build_tuple)
                )
                s = _to_temp(cg, lambda var=var: var.source.reconstruct(cg))
                stores.append(_calls(s, (("difference_update", gone_t), ("update", new_t))))
            elif kind == "container":
                var = payload
                new = _to_temp(cg, lambda var=var: _build_list(cg, var.items))
                xs = _to_temp(cg, lambda var=var: var.source.reconstruct(cg))
                if isinstance(var, DequeVariable) and var.state == 0:
                    # only items set (d[i] = v, reverse()): stored one by one, as a change that
                    # clear/extend would count breaks the deque's iterators (Note [Deques:
                    # iterators])
                    f = _to_temp(cg, lambda: cg.load_object(store_deque_items))
                    code = emit.with_null(emit.load_fast(f)) + emit.load_fast(xs)
                    stores.append(code + emit.load_fast(new) + emit.call(2) + emit.pop_top())
                    continue
                if isinstance(var, DequeVariable):
                    # d.clear(); d.extend(new)  (the same maxlen: all of them fit)
                    stores.append(_calls(xs, (("clear", None), ("extend", new))))
                    continue
                # xs[:] = [items]
                stores.append(
                    emit.load_fast(new)
                    + emit.load_fast(xs)
                    + emit.load_const(None)
                    + emit.load_const(None)
                    + emit.build_slice(2)
                    + emit.store_subscr()
                )
            elif kind == "call":
                fn_var, args, kwargs = payload
                f = _to_temp(cg, lambda fn_var=fn_var: cg.reconstruct(fn_var))
                values = [
                    _to_temp(cg, lambda a=a: cg.reconstruct(a)) for a in [*args, *kwargs.values()]
                ]
                code = emit.with_null(emit.load_fast(f))
                for v in values:
                    code += emit.load_fast(v)
                if kwargs:
                    code += emit.call_kw(len(values), tuple(kwargs))
                else:
                    code += emit.call(len(values))
                stores.append(code + emit.pop_top())
            elif kind == "global" and len(key) == 3:  # another module's: its dict[name] = v
                v = _to_temp(cg, lambda payload=payload: cg.reconstruct(payload))
                d = _to_temp(cg, lambda key=key: cg.load_global_dict(key[2]))
                code = emit.load_fast(v) + emit.load_fast(d) + emit.load_const(key[1])
                stores.append(code + emit.store_subscr())
            elif kind == "global":
                v = _to_temp(cg, lambda payload=payload: cg.reconstruct(payload))
                stores.append(emit.load_fast(v) + emit.store_global(key[1]))
            else:  # cell
                v = _to_temp(cg, lambda payload=payload: cg.reconstruct(payload))
                stores.append(emit.load_fast(v) + emit.store_deref(key[1]))
        stores = first + stores + advances
        if stores:
            for var in pin:
                if _reads_state(var):
                    cg.pin(var)
        for code in stores:
            cg.extend(code)


def store_deque_items(d, items):
    """`d[i] = items[i]` for each i: a deque's items set in place (its length unchanged)."""
    for i, item in enumerate(items):
        d[i] = item


def _advance(cg, it, n):
    """`advance_iter(it, n)`: an iterator input takes the items the graph consumed."""
    cg.load_object(advance_iter)
    f = cg.new_temp()
    cg.extend(emit.store_fast(f))
    return (
        emit.with_null(emit.load_fast(f))
        + emit.load_fast(it)
        + emit.load_const(n)
        + emit.call(2)
        + emit.pop_top()
    )


def pin_state_reads(cg, values):
    """Load now the values whose rebuilding reads state other than the frame's own locals.

    Note [Graph breaks: values read before the instruction]
    At a break the transformed code runs the instruction in Python, then hands the live locals
    to the resume function. A local traced from a source (`orig = sys.stdout`, `w = self.w`) is
    rebuilt by reading that source; read after the instruction, it would see what the
    instruction did (`with redirect_stdout(f)` sets sys.stdout: orig became f). So each such
    value is loaded into a temporary before the instruction; a plain local of the frame (its own
    name, not a cell) cannot change under the instruction and is read where it is needed.
    """
    _pin_local_classes(cg, values)
    for var in values:
        if var is None:
            continue
        if _made_here(var):  # Note [Graph breaks: objects made in the frame exist at the break]
            cg.pin(var)
            continue
        if not _reads_state(var):
            continue
        source = var.source
        if isinstance(source, LocalSource) and not source.is_cell:
            continue
        cg.pin(var)


def _pin_local_classes(cg, values):
    """Build the classes made in the frame that are live at the break, in the order eager made
    them (Note [Graph breaks: objects made in the frame exist at the break])."""
    by_class = {}
    for var in values:
        cls = getattr(var, "value", None)
        if isinstance(var, UserDefinedClassVariable) and var.source is None:
            by_class.setdefault(id(cls), (cls, var))
    for cls in in_making_order([cls for cls, _ in by_class.values()]):
        cg.pin(by_class[id(cls)][1])


# Note [Graph breaks: objects made in the frame exist at the break]
# An object of a user class made in the frame and live at the break (on the stack, in a local)
# existed when eager ran the instruction. Rebuilt only after it (for the resume function), it
# would not exist yet while the instruction runs: the instruction would see the interpreter as
# it was before the object was made (CPython's shared instance-dict keys of its class, which
# size a dict made after it; a registry of live instances). So such objects, and their
# `obj.__dict__`, are rebuilt before the instruction, in stack-then-locals order. Classes made in
# the frame and live there are built first, in the order the trace made them: the instruction may
# list them (`Parent.__subclasses__()`, in the order they were made).
def _made_here(var):
    """An object of a user class made in the frame (or its __dict__), rebuilt by the replay."""
    obj = getattr(var, "obj", None) if type(var).__name__ == "AttrDictVariable" else var
    return isinstance(obj, NewObjectVariable) and obj.source is None


def _reads_state(var, seen=None):
    """Whether rebuilding `var` reads a source (directly or through the items it holds: a
    list's, a dict's, or the attributes of an object made in the frame, `Out(cache=kwargs["x"])`)."""
    if isinstance(var, NullVariable):
        return False
    if var.source is not None or getattr(var, "rebuilt_from_referent", False):
        return True  # (a weak reference made in the frame: `weakref.ref(<its referent>)`)
    seen = set() if seen is None else seen
    if id(var) in seen:
        return False
    seen.add(id(var))
    if isinstance(var, BaseListVariable):
        items = var.items
    elif isinstance(var, ListIteratorVariable):  # (the items it has left: `iter(d.valuerefs())`)
        items = var.items[var.index :]
    elif isinstance(var, ConstDictVariable):
        items = var.items.values()
    elif isinstance(var, NewObjectVariable):
        items = [*var.attrs.values(), *(var.dict_items or {}).values()]
    else:
        return False
    return any(_reads_state(v, seen) for v in items)


def _to_temp(cg, load):
    """Run `load` (emits code pushing one value) and store the value in a new temporary."""
    load()
    name = cg.new_temp()
    cg.extend(emit.store_fast(name))
    return name


def _build_list(cg, items):
    for item in items:
        cg.reconstruct(item)
    cg.extend(emit.build_list(len(items)))


# Note [Side effects: dicts replayed key by key]
# A dict input whose keys the trace only set, added or deleted (its surviving keys keep their
# order, the new ones follow) is replayed by key: `del d[k]` for the keys deleted, `d[k] = v`
# for the values changed and the keys added, in the dict's final order. Other changes (a key
# deleted and added again, an OrderedDict moved) replace the contents (clear, update). Replaying
# by key leaves alone what the trace did not touch: a module's globals (`globals()[k] = v`) keep
# the names the transformed code itself loads (`___kiln_obj_...`, installed while it is made).
# A key still holding the very variable its input value was wrapped in is untouched too, even
# when that variable has no source (a builtin function, kiln's own `___kiln_obj_...` values): a
# module's globals after many compiles hold hundreds of those, and storing each back made the
# transformed code thousands of instructions long.
def _dict_stores(cg, var):
    """The replay of a dict input by key, or None (Note [Side effects: dicts replayed key by
    key])."""
    initial = getattr(var, "initial_keys", None)
    if initial is None or not all(_replayable_key(k) for k in var.items):
        return None
    final = list(var.items)
    kept = [k for k in initial if k in var.items]
    if final[: len(kept)] != kept:
        return None
    sources = getattr(var, "item_sources", {})  # Note [Dicts: inputs keyed by tensors]
    initial_items = getattr(var, "initial_items", {})
    unchanged = {
        k
        for k in kept
        if var.items[k] is initial_items.get(k)  # the variable the input's value was wrapped in
        or (
            var.items[k].source is not None
            and (k in sources or not is_stand_in(k))
            and var.items[k].source.name() == sources.get(k, GetItemSource(var.source, k)).name()
        )
    }
    values = {
        k: _to_temp(cg, lambda v=var.items[k]: cg.reconstruct(v))
        for k in final
        if k not in unchanged
    }
    d = _to_temp(cg, lambda: var.source.reconstruct(cg))
    code = []
    for k in initial:
        if k not in var.items:
            code += emit.load_fast(d) + _load_key(cg, k) + emit.delete_subscr()
    for k, v in values.items():
        code += emit.load_fast(v) + emit.load_fast(d) + _load_key(cg, k) + emit.store_subscr()
    return code


def _replayable_key(k):
    """A key the replay can load: a constant, or a traced tensor (Note [Dicts: inputs keyed by
    tensors])."""
    return not is_stand_in(k) or is_traced_tensor(k.var)


def _load_key(cg, k):
    """Load a constant key: a literal as itself, another object (a class) as the bytecode writer
    loads it (not a constant of the code, which would keep it alive: Note [Bytecode: classes
    loaded weakly])."""
    if is_literal(k):
        return emit.load_const(k)
    return emit.load_fast(_to_temp(cg, lambda: cg.reconstruct(key_var(k))))


def _calls(obj, calls):
    """`obj.method(arg)` for each (method, temporary holding the argument or None), results
    dropped."""
    code = []
    for method, arg in calls:
        code += emit.with_null(emit.load_fast(obj) + emit.load_attr(method))
        if arg is not None:
            code += emit.load_fast(arg)
        code += emit.call(int(arg is not None)) + emit.pop_top()
    return code


# Note [Side effects: globals of another module]
# A function inlined from another module assigns that module's globals (`global _count;
# _count += 1`). The store is recorded under the guard name of that module's globals dict (the
# dict the transformed code reaches as an extra global, output_graph.globals_name), later reads
# in the trace see it, and it is replayed after the graph as `<that dict>[name] = value`.
