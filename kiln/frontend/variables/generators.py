"""Generator objects made while tracing (Note [Generators: eager consumption])."""

import types

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.variables.lists import ListIteratorVariable


class GeneratorItemsVariable(ListIteratorVariable):
    """A generator called while tracing, run to its end: iterated over its items; it is a
    generator to `type()`, and is rebuilt as one (over the items not yet consumed)."""

    keeps_identity = True
    finished = False  # raised StopIteration (Note [Generators: reads of later writes])
    lazy_reads = False  # its body read cells or globals
    stale = False  # one of them was written before it finished

    def next_item(self):
        item = super().next_item()
        if item is None:
            self.finished = True
        return item

    def unpack_var_sequence(self, tx):
        self.finished = True
        return super().unpack_var_sequence(tx)

    def python_type(self):
        return types.GeneratorType

    def call_method(self, tx, name, args, kwargs):
        if name == "__next__":
            return super().call_method(tx, name, args, kwargs)
        unimplemented(f"generator.{name}() on a generator run to its end while tracing")

    def var_getattr(self, tx, name):
        unimplemented(f"generator attribute .{name} on a generator run to its end while tracing")

    def reconstruct(self, cg):
        if self.stale or (self.lazy_reads and not self.finished):
            unimplemented("rebuilding a generator whose body read variables the frame may write")
        cg.load_object(generator_over, push_null=True)
        for item in self.items[self.index :]:
            cg.reconstruct(item)
        cg.extend(emit.build_tuple(len(self.items) - self.index))
        cg.extend(emit.call(1))


def generator_over(items):
    """A generator yielding `items` (a traced generator rebuilt in the transformed code)."""
    yield from items
