"""Generator objects made while tracing (Note [Generators: eager consumption])."""

import types

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.variables.lists import ListIteratorVariable


class GeneratorItemsVariable(ListIteratorVariable):
    """A generator called while tracing, run to its end: iterated over its items; it is a
    generator to `type()`, and is rebuilt as one (over the items not yet consumed)."""

    keeps_identity = True
    ran_ahead = True  # Note [Lists: growing by an iterator that ran ahead]

    def python_type(self):
        return types.GeneratorType

    def call_method(self, tx, name, args, kwargs):
        if name == "__next__":
            return super().call_method(tx, name, args, kwargs)
        unimplemented(f"generator.{name}() on a generator run to its end while tracing")

    def var_getattr(self, tx, name):
        unimplemented(f"generator attribute .{name} on a generator run to its end while tracing")

    def reconstruct(self, cg):
        cg.load_object(generator_over, push_null=True)
        for item in self.items[self.index :]:
            cg.reconstruct(item)
        cg.extend(emit.build_tuple(len(self.items) - self.index))
        cg.extend(emit.call(1))


def generator_over(items):
    """A generator yielding `items` (a traced generator rebuilt in the transformed code)."""
    yield from items
