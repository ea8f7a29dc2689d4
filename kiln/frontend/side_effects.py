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
"""

from kiln.bytecode import emit
from kiln.exc import unimplemented


class SideEffects:
    """Attribute stores on objects from outside the frame, mutated outside lists/dicts, globals."""

    def __init__(self):
        self.attrs = {}  # (id(obj), name) -> (obj_var, name, value_var), in store order
        self.containers = {}  # id(var) -> mutated List/ConstDict variable with a source
        self.globals = {}  # name -> value_var (the root function's globals)
        self.cells = {}  # free variable name of the root frame -> value_var
        self.cell_objects = {}  # id(real cell) -> free variable name (inlined code reads it)
        self.version = 0
        self.step_serial = 0  # set by the root translator before each instruction

    def __bool__(self):
        return bool(self.attrs or self.containers or self.globals or self.cells)

    # --- recording ------------------------------------------------------------------------------
    def store_attr(self, obj_var, name, value):
        if obj_var.source is None:
            unimplemented(f"attribute store .{name} on an object without a source")
        key = (id(obj_var.value), name)
        self.attrs.pop(key, None)
        self.attrs[key] = (obj_var, name, value)

    def load_attr(self, obj_var, name):
        """The value stored while tracing, or None."""
        hit = self.attrs.get((id(getattr(obj_var, "value", None)), name))
        return hit[2] if hit is not None else None

    def mutate_container(self, var):
        if var.source is not None:
            self.containers[id(var)] = var
        if var.serial < self.step_serial:
            # an object that existed before this root instruction: re-running the instruction
            # in Python would repeat the mutation (objects made by the instruction itself would
            # be made afresh)
            self.version += 1

    def store_global(self, name, value):
        self.globals[name] = value

    def store_cell(self, name, value, cell=None):
        self.cells[name] = value
        if cell is not None:
            self.cell_objects[id(cell)] = name

    def pending_cell(self, cell):
        """The value stored while tracing into this real cell object, or None."""
        name = self.cell_objects.get(id(cell))
        return self.cells.get(name) if name is not None else None

    def mutate_new_object(self, var):
        """An object made while tracing got an attribute: like a container mutation."""
        if var.serial < self.step_serial:
            self.version += 1

    def snapshot(self):
        """The recorded stores (attribute, global, cell), to undo an instruction that broke."""
        return dict(self.attrs), dict(self.globals), dict(self.cells), dict(self.containers)

    def restore(self, snap):
        self.attrs, self.globals, self.cells, self.containers = (dict(d) for d in snap)

    # --- replay ---------------------------------------------------------------------------------
    def codegen(self, cg):
        """Emit the replay (after the graph call, before anything reads the state)."""
        from kiln.frontend.variables.dicts import ConstDictVariable

        for obj_var, name, value in self.attrs.values():
            cg.reconstruct(value)
            obj_var.source.reconstruct(cg)
            cg.extend(emit.store_attr(name))
        for var in self.containers.values():
            if isinstance(var, ConstDictVariable):
                # new = {...}; d.clear(); d.update(new)  (the new contents may read the old)
                for k, v in var.items.items():
                    cg.extend(emit.load_const(k))
                    cg.reconstruct(v)
                cg.extend(emit.build_map(len(var.items)))
                tmp = cg.new_temp()
                cg.extend(emit.store_fast(tmp))
                for method, nargs in (("clear", 0), ("update", 1)):
                    load = type(cg)(cg.output)
                    var.source.reconstruct(load)
                    load.extend(emit.load_attr(method))
                    cg.extend(emit.with_null(load.instrs))
                    if nargs:
                        cg.extend(emit.load_fast(tmp))
                    cg.extend(emit.call(nargs) + emit.pop_top())
            else:
                # xs[:] = [items]
                for item in var.items:
                    cg.reconstruct(item)
                cg.extend(emit.build_list(len(var.items)))
                var.source.reconstruct(cg)
                cg.extend(emit.load_const(None) + emit.load_const(None) + emit.build_slice(2))
                cg.extend(emit.store_subscr())
        for name, value in self.globals.items():
            cg.reconstruct(value)
            cg.extend(emit.store_global(name))
        for name, value in self.cells.items():
            cg.reconstruct(value)
            cg.extend(emit.store_deref(name))
