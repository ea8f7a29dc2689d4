"""Generator objects made while tracing (Note [Generators: eager consumption])."""

import dis
import types

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.variables.list_growth import _reaches, _unimplemented_frame
from kiln.frontend.variables.lists import ListIteratorVariable


class GeneratorItemsVariable(ListIteratorVariable):
    """A generator called while tracing, run to its end: iterated over its items; it is a
    generator to `type()`, and is rebuilt as one (over the items not yet consumed)."""

    keeps_identity = True
    effects = None  # the frame's SideEffects and their counts when the generator ran
    marks = (0, 0)

    def watch(self, effects):
        """Check each later item against the writes made after the generator ran."""
        self.effects, self.marks = effects, (effects.records, len(effects.written_vars))
        return self

    def next_item(self, tx=None):
        # Note [Generators: read after writes]
        # The generator ran to its end when it was called (Note [Generators: eager consumption]);
        # eager makes item k only when it is asked for, after the consumer's work on items
        # 0..k-1. If that work wrote anything the generator's code may read (an object or cell
        # reachable from what it was given; a global, attribute or outside container: counted
        # by `records`), the items made ahead may differ from eager's: the frame runs in Python.
        if self.effects is not None and self.index < len(self.items):
            records, start = self.marks
            written = self.effects.written_vars[start:]
            if self.effects.records > records or any(_reaches(self.reach, v) for v in written):
                _unimplemented_frame(
                    "a generator run ahead of time whose consumer wrote what it may read"
                )
        item = super().next_item(tx)
        if item is None:
            self.finished = True
        return item

    ran_ahead = True  # Note [Lists: growing by an iterator that ran ahead]
    finished = False  # raised StopIteration (Note [Generators: reads of later writes])
    lazy_reads = False  # its body read cells or globals
    stale = False  # one of them was written before it finished

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
        started = self.index > 0 or self.finished
        if started and not self.finished and self.uses_sent:
            # Note [Generators: rebuilt part way]
            unimplemented(
                "rebuilding a generator suspended at a yield whose value its code uses "
                "(send() would reach that code)"
            )
        cg.load_object(generator_over, push_null=True)
        for item in self.items[self.index :]:
            cg.reconstruct(item)
        cg.extend(emit.build_tuple(len(self.items) - self.index))
        ret = getattr(self, "gen_return", None)
        if ret is None:
            cg.extend(emit.load_const(None))
        else:
            cg.reconstruct(ret)
        state = "finished" if self.finished else "started" if started else "new"
        cg.extend(emit.load_const(self.names[0]) + emit.load_const(self.names[1]))
        cg.extend(emit.load_const(state))
        cg.extend(emit.call(5))

    names = ("generator_over", "generator_over")  # the function's __name__, __qualname__
    uses_sent = True  # a yield's value is used by its code (Note [Generators: rebuilt part way])


# Note [Generators: rebuilt part way]
# A generator run ahead of time (Note [Generators: eager consumption]) is rebuilt at a break as a
# generator over the items not yet taken, returning what the traced one returned, in the state
# the eager one is in: not started (send(non-None) raises TypeError, as on a new generator),
# started (suspended at a yield: send(v) resumes it), or finished (send raises StopIteration).
# A started one is rebuilt only when each yield of its code drops the value sent in (`yield x`
# as a statement): the run ahead of time saw None at every yield, so a value sent after the break
# would have to reach code that already ran (`return (yield 1)` returns it). That is a break.
def _items_then(items, ret):
    for item in items:  # noqa: UP028 (yield from would pass a sent value on to the tuple)
        yield item
    return ret


def _started_then(items, ret):
    yield  # (where the rebuilt generator is suspended: the next send resumes it here)
    return (yield from _items_then(items, ret))


def generator_over(items, ret, name, qualname, state):
    """A generator yielding `items` then returning `ret`, named as the traced one and in its
    state (Note [Generators: rebuilt part way]), rebuilt in the transformed code."""
    if state == "new":
        gen = _items_then(items, ret)
    else:
        gen = _started_then(items, ret)
        next(gen)
        if state == "finished":
            for _ in gen:
                pass
    gen.__name__, gen.__qualname__ = name, qualname
    return gen


def yields_use_sent_value(code):
    """Whether a yield of `code` uses the value sent in (anything but POP_TOP after it)."""
    after_yield = False
    for inst in dis.get_instructions(code):
        if inst.opname == "YIELD_VALUE":
            after_yield = True
        elif after_yield and inst.opname not in ("RESUME", "CACHE", "NOP"):
            if inst.opname != "POP_TOP":
                return True
            after_yield = False
    return False
