"""Generator objects made while tracing: stepped to each yield (Note [Generators: lazy])."""

import sys
import types

import torch

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.variables import generator_replay
from kiln.frontend.variables.base import next_serial
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.ctx_managers import _Yielded
from kiln.frontend.variables.exceptions import (
    ExceptionVariable,
    ObservedException,
    make_exception,
    raise_observed,
)
from kiln.frontend.variables.list_growth import _reaches
from kiln.frontend.variables.lists import _ITER_UNDO, ListIteratorVariable

PY311 = sys.version_info[:2] == (3, 11)
PY313_PLUS = sys.version_info >= (3, 13)
DRAIN_LIMIT = 1000  # items a suspended generator may yield when drained at a break


# Note [Generators: lazy]
# A generator called while tracing is a LazyGeneratorVariable holding the InliningTranslator of
# its body (made `suspendable`: YIELD_VALUE raises _Yielded, as for @contextmanager generators,
# Note [Blocks: context managers]). Nothing of the body runs at the call; each next()/send(v)
# runs it on to its next yield (v is pushed as the value of the yield it is suspended at), so
# the body's reads and writes interleave with the consumer's exactly as in eager:
#   throw(exc)  raises exc at the suspended yield, through the body's exception table (a yield
#               inside `yield from` hands it to the subgenerator first, as CPython does);
#   close()     throws GeneratorExit; a body that yields again is RuntimeError;
#   the end     a return leaves the value for StopIteration (`yield from` evaluates to it); an
#               exception leaves the generator finished; a StopIteration raised in the body is
#               RuntimeError (PEP 479).
# Consumers that stop early or interleave take its items one at a time (for loops, next, zip,
# map, enumerate, islice: Note [Iterators: lazy over live sources]; any, all, `in`, list.extend,
# deque.extendleft: `steps_lazily`); list(), sorted(), sum() ... step it to its end.
# The iterators' undo (_ITER_UNDO, Note [Iterators: lazy over live sources]) sees the number of
# steps taken as `index`: each step keeps the translator's state from before it, and setting
# `index` back restores it, so a root instruction that breaks after stepping the generator runs
# again in Python on the generator as it was.


class LazyGeneratorVariable(ListIteratorVariable):
    """A generator called while tracing, run on to its next yield at each step
    (Note [Generators: lazy])."""

    keeps_identity = True
    steps_lazily = True  # consumers take its items one at a time (any, `in`, list.extend ...)

    def __init__(self, gen_tx, **kw):
        self._saved = []  # the state before each step taken (index = len)
        super().__init__((), **kw)
        self.gen = gen_tx
        fn, code = gen_tx.fn, gen_tx.code
        self.names = (
            getattr(fn, "__name__", code.co_name),
            getattr(fn, "__qualname__", code.co_name),
        )
        self.started = False
        self.finished = False
        self.running = False
        self.returned = None  # the return value of the step that ended it (StopIteration's)
        self.rebuilt = None  # (items, return value, state, replay) once drained for a rebuild
        self.shared = False  # stepped by the drain of another generator
        output = gen_tx.output
        if not hasattr(output, "lazy_generators"):
            output.lazy_generators = []
        output.lazy_generators.append(self)  # (Note [Generators: closed when freed])

    # --- steps and their undo -------------------------------------------------------------------
    @property
    def index(self):
        return len(self._saved)

    @index.setter
    def index(self, k):
        if k < len(self._saved):
            self._restore(self._saved[k])
            del self._saved[k:]

    def _snapshot(self):
        g = self.gen
        return (
            g.ip,
            list(g.stack),
            dict(g.symbolic_locals),
            g.current_inst,
            g.exc_info,
            g.kw_names,
            list(g.with_handlers),
            g.catch_region,
            g.return_value,
            self.started,
            self.finished,
            self.returned,
        )

    def _restore(self, snap):
        g = self.gen
        (ip, stack, local_vars, g.current_inst, g.exc_info, g.kw_names, handlers) = snap[:7]
        g.ip, g.stack, g.symbolic_locals, g.with_handlers = ip, stack, local_vars, handlers
        g.catch_region, g.return_value = snap[7], snap[8]
        self.started, self.finished, self.returned = snap[9:]

    def step(self, tx, value=None, exc=None):
        """Run the body on to its next yield: the yielded value, or None when it returned
        (`returned` holds the value). `value` is sent in; `exc` (an ObservedException) is
        raised at the yield."""
        if self.running:
            raise_observed(tx, ValueError, "generator already executing")
        draining = self.gen.output.__dict__.get("draining")
        if draining and draining[-1][0] is not self and self.serial < draining[-1][1]:
            self.shared = True  # Note [Generators: drained one at a time]
            if self.rebuilt is not None:
                unimplemented(_SHARED)
        if self.finished:
            self.returned = None
            if exc is not None:
                raise exc
            return None
        _ITER_UNDO.append((self, self.index))
        self._saved.append(self._snapshot())
        gen = self.gen
        if tx is not None:
            gen.parent = tx  # (the frame whose exception state the body sees: the caller's)
        self.running = True
        if exc is not None and self.started:
            # its context is the exception the body is handling at the yield, not the
            # caller's (CPython chains an exception thrown in with the generator's own state)
            context = gen.exc_info
            if context is not None and context is not exc.var:
                exc.var.attrs["__context__"] = context
        try:
            if not self.started:
                self.started = True
                if exc is not None:
                    self.finished = True
                    raise exc
            elif exc is not None:
                if not self._throw_into_delegate(tx, exc):
                    gen.unwind(exc)
            else:
                gen.push(value if value is not None else ConstantVariable(None))
            gen.run_loop()
        except _Yielded as y:
            return y.value
        except ObservedException as e:
            self.finished = True
            if issubclass(e.var.cls, StopIteration):  # PEP 479
                err = ExceptionVariable(RuntimeError, [ConstantVariable(_PEP479)])
                err.attrs["__cause__"] = err.attrs["__context__"] = e.var
                err.attrs["__suppress_context__"] = ConstantVariable(True)
                raise ObservedException(err) from None
            raise
        finally:
            self.running = False
        self.finished = True
        self.returned = gen.return_value or ConstantVariable(None)
        return None

    # --- yield from: throw() and close() reach the subiterator ----------------------------------
    def delegate(self):
        """The iterator a suspended `yield from` delegates to, or None."""
        g = self.gen
        inst = g.current_inst
        if inst is None or inst.opname != "YIELD_VALUE" or inst.index == 0 or not g.stack:
            return None
        if g.instructions[inst.index - 1].opname != "SEND":
            return None
        return g.stack[-1]

    def _throw_into_delegate(self, tx, exc):
        """CPython's throw() into a generator inside `yield from sub`: sub.throw(exc) (close()
        then exc for GeneratorExit); a value it yields is yielded again, its return value ends
        the `yield from`, an exception it raises is raised at the yield. True when handled
        (the translator is set to run on), False to raise `exc` at the yield."""
        sub = self.delegate()
        if sub is None:
            return False
        if not isinstance(sub, LazyGeneratorVariable):
            return False  # (an iterator of items has neither close nor throw)
        g = self.gen
        if issubclass(exc.var.cls, GeneratorExit):
            try:
                sub.close(tx)
            except ObservedException as raised:  # raised at the yield instead
                g.unwind(raised)
                return True
            return False
        try:
            item = sub.step(tx, exc=exc)
        except ObservedException as raised:
            g.unwind(raised)
            return True
        if item is not None:
            raise _Yielded(item)  # (suspended at the same yield)
        # the subgenerator returned: `yield from` evaluates to its value, past the SEND loop
        send = g.instructions[g.current_inst.index - 1]
        if PY311:
            g.stack[-1] = sub.returned
        else:
            g.push(sub.returned)
        g.ip = send.target_index
        return True

    # --- the generator protocol -----------------------------------------------------------------
    def raise_stop(self):
        raise_stop(self)

    def next_item(self, tx=None):
        return self.step(tx)

    def unpack_var_sequence(self, tx):
        items = []
        while (item := self.step(tx)) is not None:
            items.append(item)
        return items

    def send(self, tx, value):
        """gen.send(value): the next yielded value; StopIteration at the end."""
        if not self.started and not (
            value.is_python_constant() and value.as_python_constant() is None
        ):
            raise_observed(tx, TypeError, "can't send non-None value to a just-started generator")
        item = self.step(tx, value=value)
        if item is None:
            raise_stop(self)
        return item

    def throw(self, tx, args):
        """gen.throw(exc) / gen.throw(type[, value]): the next yielded value."""
        exc = _exception_of(tx, args)
        item = self.step(tx, exc=ObservedException(exc))
        if item is None:
            raise_stop(self)
        return item

    def close(self, tx):
        """gen.close(): GeneratorExit at the yield; RuntimeError if the body yields again."""
        if not self.started or self.finished:
            _ITER_UNDO.append((self, self.index))  # (a step, undone with the instruction)
            self._saved.append(self._snapshot())
            self.started = self.finished = True
            return ConstantVariable(None)
        exit_exc = ObservedException(ExceptionVariable(GeneratorExit, []))
        try:
            item = self.step(tx, exc=exit_exc)
        except ObservedException as e:
            if issubclass(e.var.cls, (GeneratorExit, StopIteration)):
                return ConstantVariable(None)
            raise
        if item is not None:
            raise_observed(tx, RuntimeError, "generator ignored GeneratorExit")
        ret = self.returned if PY313_PLUS else None  # (3.13: close() returns the return value)
        self.returned = None
        return ret or ConstantVariable(None)

    def call_method(self, tx, name, args, kwargs):
        if kwargs:
            unimplemented(f"generator.{name} with keyword arguments")
        if name == "__next__" and not args:
            return self.send(tx, ConstantVariable(None))
        if name == "send" and len(args) == 1:
            return self.send(tx, args[0])
        if name == "throw" and 1 <= len(args) <= 3:
            return self.throw(tx, args)
        if name == "close" and not args:
            return self.close(tx)
        if name == "__iter__" and not args:
            return self
        unimplemented(f"generator.{name}")

    def python_type(self):
        return types.GeneratorType

    def var_getattr(self, tx, name):
        if name in ("__name__", "__qualname__"):
            return ConstantVariable(self.names[name == "__qualname__"])
        if name == "gi_running":
            return ConstantVariable(self.running)
        if name in ("send", "throw", "close", "__next__", "__iter__"):
            return super().var_getattr(tx, name)
        unimplemented(f"generator attribute .{name}")

    # --- a rebuild at a break -------------------------------------------------------------------
    def reconstruct(self, cg):
        if self.shared:
            unimplemented(_SHARED)
        call = getattr(self.gen, "call_args", None)
        if not self.started and call is not None:
            # not started: called again, on the same function and arguments (its body runs
            # lazily in Python, as in eager)
            args, kwargs = call
            cg.load_object(_call, push_null=True)
            cg.load_object(self.gen.fn)
            for a in args:
                cg.reconstruct(a)
            cg.extend(emit.build_tuple(len(args)))
            for k, v in kwargs.items():
                cg.extend(emit.load_const(k))
                cg.reconstruct(v)
            cg.extend(emit.build_map(len(kwargs)))
            cg.extend(emit.call(3))
            return
        items, ret, state, replay = self.rebuilt or self._drain()
        cg.load_object(generator_over, push_null=True)
        for item in items:
            _load_item(cg, item)
        cg.extend(emit.build_tuple(len(items)))
        _load_item(cg, ret)
        cg.extend(emit.load_const(self.names[0]) + emit.load_const(self.names[1]))
        cg.extend(emit.load_const(state))
        if replay is None:
            cg.extend(emit.call(5))
            return
        cg.load_object(replay.steps)
        generator_replay.load_outside(cg, self.gen.output, replay)
        cg.extend(emit.call(7))

    def _drain(self):
        """Note [Generators: drained at a break]: step the body to its end, or unimplemented."""
        if self.finished:
            self.rebuilt = ((), ConstantVariable(None), "finished", None)
            return self.rebuilt
        state = "started" if self.started else "new"
        if self.started:
            self._check_sent_dropped()
        output = self.gen.output
        effects, first = output.side_effects, output.last_node()
        floor, records, written = next_serial(), effects.records, len(effects.written)
        if self.shared:
            unimplemented(_SHARED)
        holds_outside = generator_replay.holds_outside_state(self)
        items, bounds = [], []
        grad = torch.is_grad_enabled()
        # (the rest is traced in the mode the program is in at the break: a with block it
        # leaves records its switch)
        mode = self._mode_at_break(output)
        reads = set()
        effects.lazy_readers.append(reads)
        draining = output.__dict__.setdefault("draining", [])  # (Note [... one at a time])
        draining.append((self, floor))
        try:
            torch._C._set_grad_enabled(mode)
            while (item := self.step(None)) is not None:
                items.append(item)
                bounds.append(output.last_node())
                self._check_sent_dropped()
                if len(items) > DRAIN_LIMIT:
                    unimplemented(
                        f"rebuilding a suspended generator that yields more than {DRAIN_LIMIT} "
                        "more items (it may never end)"
                    )
        except ObservedException as e:
            unimplemented(
                f"rebuilding a suspended generator whose rest raises {e.var.cls.__name__}"
            )
        finally:
            effects.lazy_readers.remove(reads)
            torch._C._set_grad_enabled(grad)
            draining.pop()
        bounds.append(output.last_node())  # (the step that ends it)
        if effects.records > records or any(s < floor for s in effects.written[written:]):
            # (the phrase torch.compile's break gives for the same cause comes first)
            unimplemented(
                "Generator reconstruction with mutations: Cannot reconstruct a generator with "
                "variable mutations (rebuilding a suspended generator whose rest writes state "
                "outside it)"
            )
        if reads:
            unimplemented("rebuilding a generator whose body read variables the frame may write")
        if holds_outside:
            unimplemented(
                "rebuilding a suspended generator whose frame holds a list, dict, object or "
                "iterator the code after the break may change (Note [Generators: a drained "
                "rest reads only its own state])"
            )
        ret, replay = self.returned, None
        if any(n.op != "placeholder" for n in _nodes_after(output.graph, first)):
            # Note [Generators: a drained rest computes nothing]
            replay, items, ret = generator_replay.plan(output, first, bounds, items, ret)
        self.rebuilt = (items, ret, state, replay)
        return self.rebuilt

    def _mode_at_break(self, output):
        """The grad mode the frame's graph so far ends in."""
        root = self.gen
        while getattr(root, "parent", None) is not None:
            root = root.parent
        mode = getattr(root, "initial_grad_mode", torch.is_grad_enabled())
        for n in output.graph.nodes:
            if n.op == "call_function" and n.target is torch._C._set_grad_enabled:
                mode = n.args[0]
        return mode

    def _check_sent_dropped(self):
        """Note [Generators: rebuilt part way]: a value sent at the yield the generator is
        suspended at must reach no code (the rebuilt generator drops it), nor an exception
        thrown in (throw() and close() would run the body's handlers, which it does not have)."""
        if self.sent_value_used():
            unimplemented(
                "rebuilding a generator suspended at a yield whose value its code uses "
                "(send() would reach that code)"
            )
        if self.has_cleanup(own_handlers_only=True):
            unimplemented(
                "rebuilding a suspended generator at a yield inside a try or with block "
                "(throw() and close() would run its handlers)"
            )

    def sent_value_used(self):
        """Whether a value sent in now would reach code: the yield's value is used (anything
        but POP_TOP after it), or the `yield from` it is in delegates to an iterator that is
        no generator, or to one that uses it."""
        sub = self.delegate()
        if sub is not None:
            return not isinstance(sub, LazyGeneratorVariable) or sub.sent_value_used()
        g = self.gen
        for inst in g.instructions[g.current_inst.index + 1 :]:
            if inst.opname not in ("RESUME", "CACHE", "NOP"):
                return inst.opname != "POP_TOP"
        return True

    def has_cleanup(self, own_handlers_only=False):
        """Whether close() would run code of the body: it is suspended at a yield inside a try
        or with block (or delegating to a generator that is)."""
        g = self.gen
        if not self.started or self.finished or self.running or g.current_inst is None:
            return False
        sub = self.delegate()
        if isinstance(sub, LazyGeneratorVariable) and sub.has_cleanup(own_handlers_only):
            return True
        inst = g.current_inst
        entry = inst.exn_tab_entry
        if own_handlers_only and entry is not None and entry.target.opname == "CLEANUP_THROW":
            return False  # (3.12+: the handler of `yield from` itself, not a try of the body)
        return entry is not None and not g.in_generator_handler(inst)

    def __repr__(self):
        return f"LazyGeneratorVariable({self.names[1]})"


# Note [Generators: closed when freed]
# CPython closes a suspended generator when its last reference goes (GeneratorExit at the yield:
# its finally blocks and handlers run then). kiln does not count references; it knows when a
# frame returns. When a traced frame (the root, an inlined call, a generator's body) returns, a
# generator of the trace that close() would run code of (suspended inside a try or with block)
# and that is one of the frame's locals (or on its stack), while nothing else holds it (the
# return value, a store the trace made, the callers' locals and stacks), is closed there, as
# eager does when the frame's locals go. At the root's return, one that nothing holds and that
# was not closed that way was freed earlier (a temporary), at a point kiln does not know; at a
# break, one that the live state does not hold likewise. Those cases, and a close that raises
# (eager prints it as ignored), are unimplemented: the frame runs in Python.
def _held_by(values, gen):
    return _reaches(values, gen)


def _logged_values(effects):
    """The variables the frame's recorded stores hold."""
    out, todo = [], [payload for _, payload in effects.log.values()]
    while todo:
        v = todo.pop()
        if isinstance(v, (tuple, list)):
            todo.extend(v)
        elif hasattr(v, "python_type"):
            out.append(v)
    return out


def close_freed_generators(tx, ret):
    """A frame returns `ret`: close what eager closes as its locals go."""
    gens = [g for g in getattr(tx.output, "lazy_generators", ()) if g.has_cleanup()]
    if not gens:
        return
    kept = [ret, *_logged_values(tx.output.side_effects)]
    caller = getattr(tx, "parent", None)
    while caller is not None:  # what the callers (and the stepped generators) still hold
        kept += [*caller.symbolic_locals.values(), *caller.stack_before, *caller.stack]
        caller = getattr(caller, "parent", None)
    dying = [*tx.symbolic_locals.values(), *tx.stack]
    freed = [g for g in gens if not _held_by(kept, g)]
    for v in dying:
        if any(v is g for g in freed) and v.has_cleanup():
            try:
                v.close(tx)
            except ObservedException as e:
                unimplemented(
                    f"closing a generator as its frame returns raised {e.var.cls.__name__} "
                    "(CPython prints it as ignored)"
                )
    if tx.is_root and any(g.has_cleanup() for g in freed):
        unimplemented(
            "a suspended generator with cleanup code (finally/except/with) freed before "
            "the frame returns (CPython closes it then)"
        )


def check_freed_generators(output, live):
    """At a break: a suspended generator with cleanup code that the live state does not hold
    was closed in eager before the break (Note [Generators: closed when freed])."""
    gens = [g for g in getattr(output, "lazy_generators", ()) if g.has_cleanup()]
    if gens:
        kept = [*live, *_logged_values(output.side_effects)]
        for gen in gens:
            if not _held_by(kept, gen):
                unimplemented(
                    "a suspended generator with cleanup code (finally/except/with) freed "
                    "before the break (CPython closes it then)"
                )


# Note [Generators: drained one at a time]
# A drain steps the rest of one generator to its end. When that rest steps another generator
# made before the drain (`b = (f(v) for v in a)` with `a` a generator too), the two share
# items: which one gets them depends on the order the code after the break asks, which the
# drain cannot know. The other generator is marked `shared`; rebuilding it (as a live value
# itself, or before the drain that steps it) is unimplemented. Held by the drained one only,
# as a `yield from` it is suspended in usually is, it is never rebuilt, so nothing is refused.
# The frame's OutputGraph keeps `draining`: (generator, the serial of the first variable its
# drain made) of each drain under way.
_SHARED = "rebuilding generators at a break where draining one steps another (they share items)"


# Note [Generators: drained at a break]
# At a break (or a return of the frame) with a generator of the trace not finished, its state
# is the body's translator, which Python cannot be handed. One not started is made again by
# calling its function (the same object) on the same arguments. Of a started one, if the rest
# of the body is pure, it is stepped to its end there and the generator is rebuilt over the
# items not yet taken (Note [Generators: rebuilt part way]), its tensor ops run again at each
# step (Note [Generators: a drained rest computes nothing]). "Pure": no write to anything that
# existed before the drain (an object, cell, global; a replayed call), no read of a cell or
# global (the code after the break may write it before the items are asked for), no exception,
# at most DRAIN_LIMIT items. Anything else is unimplemented: the frame runs in Python.

# Note [Generators: a drained rest computes nothing]
# Eager runs the rest of a suspended generator when its items are asked for, after the code that
# follows the break or the return. Values computed by a drain at the break would read their
# inputs too early (an in-place write in between, `t.add_(1)` or an optimizer step, is missed),
# in the grad mode and autocast state of the break rather than the consumer's (`with
# torch.no_grad(): next(gen)`), and draw random numbers out of order. So the ops a drain traces
# leave the frame's graph: generator_replay.plan cuts them into one small graph per step, and
# the rebuilt generator runs step k's graph (on the tensors it reads as they are then, in the
# mode then) before it yields item k. Items are then a tensor one of those graphs computes, a
# value that existed before the rest, or a constant; a container of them, an op whose result is
# no tensor (a size, a scalar read from data), and a switch of grad mode, autocast or saved-
# tensors hooks (a `with` block the generator is suspended in, left by its rest: the drain traces
# the rest in the mode the frame's graph ends in, so leaving it records its switch) are
# unimplemented. The step graphs run as they are (op by op, as the generator body would).
_PEP479 = "generator raised StopIteration"


def _nodes_after(graph, node):
    """The graph's nodes made after `node` (all of them when it is None)."""
    out = []
    for n in reversed(graph.nodes):
        if n is node:
            break
        out.append(n)
    return out


def _call(fn, args, kwargs):
    """fn(*args, **kwargs): a generator not started, made again in the transformed code."""
    return fn(*args, **kwargs)


def raise_stop(gen):
    """StopIteration(return value) at the end of `gen` (a plain one after that)."""
    ret = gen.returned
    gen.returned = None
    args = (
        []
        if ret is None or (ret.is_python_constant() and ret.as_python_constant() is None)
        else [ret]
    )
    raise ObservedException(ExceptionVariable(StopIteration, args))


def _exception_of(tx, args):
    """The exception gen.throw(*args) raises at the yield."""
    typ = args[0]
    if isinstance(typ, ExceptionVariable):
        return typ
    value = typ.as_python_constant() if typ.is_python_constant() else None
    if not (isinstance(value, type) and issubclass(value, BaseException)):
        if typ.is_python_constant():
            raise_observed(
                tx,
                TypeError,
                "exceptions must be classes or instances deriving from BaseException, not "
                f"{type(value).__name__}",
            )
        unimplemented(f"generator.throw({typ})")
    rest = [a for a in args[1:2] if not (a.is_python_constant() and a.as_python_constant() is None)]
    if rest and isinstance(rest[0], ExceptionVariable):
        return rest[0]
    return make_exception(tx, value, rest, {})


def cleanup_throw(tx):
    """3.12+ CLEANUP_THROW, the handler of a yield inside `yield from`:
    [sub, last, exc] -> [None, exc.value] for StopIteration, else exc raised on."""
    exc = tx.pop()
    tx.popn(2)
    if not issubclass(exc.cls, StopIteration):
        raise ObservedException(exc)
    tx.push(ConstantVariable(None))
    tx.push(exc.args[0] if exc.args else ConstantVariable(None))


# Note [Generators: rebuilt part way]
# A generator drained at a break (Note [Generators: drained at a break]) is rebuilt as a
# generator over the items not yet taken, returning what the traced one returned, in the state
# the eager one is in: not started (send(non-None) raises TypeError, as on a new generator),
# started (suspended at a yield: send(v) resumes it), or finished (send raises StopIteration).
# A started one is rebuilt only when each yield it is suspended at from then on (where it is at
# the break, and each one the drain reaches) drops the value sent in (`yield x` as a statement;
# in a `yield from`, the same of the subgenerator's yield): the drain sent None at each, so a
# value sent after the break would have to reach code that already ran (`return (yield 1)`
# returns it). That is a break; so is a yield inside a try or with block, where an exception
# thrown in (throw(), close()) would run the body's handlers, which the rebuilt one lacks.
def _items_then(items, ret):
    for item in items:  # noqa: UP028 (yield from would pass a sent value on to the tuple)
        yield item
    return ret


def _started_then(items, ret):
    yield  # (where the rebuilt generator is suspended: the next send resumes it here)
    return (yield from _items_then(items, ret))


def _started_then_replaying(rest):
    yield  # (as _started_then)
    return (yield from rest)


def _load_item(cg, item):
    """An item of a rebuilt generator: a value, or a Lazy name loaded as it is."""
    if isinstance(item, generator_replay.Lazy):
        cg.load_object(item)
    else:
        cg.reconstruct(item)


def generator_over(items, ret, name, qualname, state, steps=None, env=None):
    """A generator yielding `items` then returning `ret`, named as the traced one and in its
    state (Note [Generators: rebuilt part way]), rebuilt in the transformed code; with
    `steps`, each step runs its graph first (Note [Generators: a drained rest computes
    nothing])."""
    if steps is not None:
        rest = generator_replay.replaying(items, ret, steps, env)
        items, ret = (), None
    if state == "new":
        gen = _items_then(items, ret) if steps is None else rest
    else:
        gen = _started_then(items, ret) if steps is None else _started_then_replaying(rest)
        next(gen)
        if state == "finished":
            for _ in gen:
                pass
    gen.__name__, gen.__qualname__ = name, qualname
    return gen
