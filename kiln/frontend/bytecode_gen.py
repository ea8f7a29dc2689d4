"""Emits the transformed bytecode: call the compiled graph, rebuild the return value, return.

def f(x, mod):                       def f(x, mod):   # transformed
    y = mod(x)                           ___out = __kiln_compiled_fn_0(x)
    return torch.log(y)                  return ___out[0]
"""

import sys
import weakref

import torch

from kiln import faults, logs
from kiln.bytecode import (
    decode,
    emit,
    encode,
    first_resume,
    format_code,
)
from kiln.exc import unimplemented
from kiln.frontend import input_loads, installed_globals
from kiln.frontend.guards import held_weakly
from kiln.frontend.variables import random_draws
from kiln.frontend.variables.dicts import ConstDictVariable
from kiln.frontend.variables.lists import ListVariable
from kiln.frontend.variables.sets import SetVariable
from kiln.frontend.variables.user_defined import NewObjectVariable

GRAPH_OUT = "___kiln_graph_out"


# Note [Bytecode: classes loaded weakly]
# load_object puts the object in a global of the root function's module, which lives as long as
# the module: a class defined in Python that the transformed code loads (a dict key replayed, a
# class rebuilt as a constant) would never die, nor the cache entry whose identity guard on it
# should fail when it does (Note [Guards: identity without ownership]). Such a class is loaded
# through a WeakLoad instead: `___kiln_weak_A_<id>()`, one holder per class, which raises if the
# class is gone (never reached: the guards on it fail first).
class WeakLoad:
    """A callable giving back a class it holds by a weak reference."""

    __slots__ = ("ref", "__weakref__")
    _holders = weakref.WeakKeyDictionary()  # class -> its holder

    @classmethod
    def of(cls, value):
        holder = cls._holders.get(value)
        if holder is None:
            holder = cls._holders[value] = cls()
            holder.ref = weakref.ref(value)
        return holder

    def __call__(self):
        value = self.ref()
        if value is None:
            raise RuntimeError("kiln: a class the compiled code loads has died")
        return value


def _held_weakly(value):
    """A class defined in Python outside the library (Note [Bytecode: classes loaded weakly])."""
    return isinstance(value, type) and held_weakly(value)


PY311 = sys.version_info[:2] == (3, 11)


class PyCodegen:
    """Collects instructions; tensors not from a source become outputs of the graph."""

    def __init__(self, output, callee_factory=None):
        self.output = output
        self.instrs = []
        self.graph_outputs = []  # TensorVariables, in graph output order
        self._output_index = {}
        self._temps = {}  # id(mutable container) -> local holding the rebuilt object
        self._rebuilding = set()  # ids of the containers being rebuilt now (a cycle check)
        self._pinned = {}  # id(variable) -> (local holding its value, the variable)
        self.class_temps = {}  # id(local class) -> local holding it, built again
        self.temp_names = []
        self.compile_callees = False  # rebuild user callables as kiln-compiled frames
        self.callee_factory = callee_factory
        self.closure_callee = None

    def callee(self, fn, module_root=False):
        """The kiln-compiled wrapper of a user function (a break inside it: its own frame)."""
        return self.callee_factory(fn, module_root)

    def closure_entry(self, fn):
        """The kiln-compiled entry of a closure's code under its own globals: `entry(fn, ...)`."""
        return self.callee_factory(fn, cells_per_call=True)

    def rebuilt(self, restore=None):
        """What has been rebuilt into temps so far; with `restore`, go back to that."""
        if restore is None:
            return dict(self._temps), dict(self.class_temps)
        self._temps, self.class_temps = dict(restore[0]), dict(restore[1])
        return restore

    def new_temp(self):
        name = f"___kiln_tmp_{len(self.temp_names)}"
        self.temp_names.append(name)
        return name

    def append(self, instr):
        self.instrs.append(instr)

    def extend(self, instrs):
        self.instrs.extend(instrs)

    def pin(self, var):
        """Load `var` now into a temporary that every later reconstruction of it loads.

        Note [Side effects: outputs read before the stores]
        A value traced from a source (`old = self.a`, `res = xs.pop()` on an input list) is
        rebuilt by reading that source. The replayed stores change what sources read
        (`self.a = new`, `xs[:] = [...]`), so the values the transformed code returns or hands
        to a resume function (return value, stack, live locals, cells) are read first, between
        the side effects' two phases, and the stores run after them.
        """
        if id(var) in self._pinned:
            return
        self.reconstruct(var)
        name = self.new_temp()
        self.extend(emit.store_fast(name))
        self._pinned[id(var)] = (name, var)

    def reconstruct(self, var):
        pinned = self._pinned.get(id(var))
        if pinned is not None:
            self.extend(emit.load_fast(pinned[0]))
            return
        if var.source is None and (
            isinstance(var, (ListVariable, ConstDictVariable, NewObjectVariable, SetVariable))
            or getattr(var, "keeps_identity", False)
        ):
            # Mutable containers (and objects with state: a contextmanager, a generator) are
            # rebuilt once; every later use loads the same object.
            name = self._temps.get(id(var))
            if name is not None:
                self.extend(emit.load_fast(name))
                return
            if getattr(var, "rebuilt_in_two_steps", False):
                # Note [Rebuilding: objects in a cycle]
                # An object made in the frame may reach itself through its values (`a.peer = b;
                # b.peer = a`, a tree's parent links). So it is built empty and stored in its
                # temporary first, and its values, rebuilt after, load that temporary where they
                # reach it (rebuilt in one call, the values recursed into the object forever).
                var.reconstruct_empty(self)
                name = self._temps[id(var)] = self.new_temp()
                self.extend(emit.copy(1) + emit.store_fast(name))
                var.reconstruct_fill(self, name)
                return
            if id(var) in self._rebuilding:  # (a list that holds itself, an object's deque that
                # holds the object: built in one call, it would be a second copy of itself)
                unimplemented(f"rebuilding a {var.python_type().__name__} that contains itself")
            self._rebuilding.add(id(var))
            try:
                var.reconstruct(self)
            finally:
                self._rebuilding.discard(id(var))
            name = self._temps[id(var)] = self.new_temp()
            self.extend(emit.copy(1) + emit.store_fast(name))
            return
        var.reconstruct(self)

    def reconstruct_tensor(self, var):
        if var.source is not None:
            var.source.reconstruct(self)
            return
        key = id(var.proxy)
        if key not in self._output_index:
            self._output_index[key] = len(self.graph_outputs)
            self.graph_outputs.append(var)
        self.extend(emit.load_fast(GRAPH_OUT))
        self.extend(emit.load_const(self._output_index[key]))
        self.extend(emit.binary_subscr())

    def load_object(self, value, push_null=False):
        """Load an object kiln holds (a dtype, a torch.Size ...) via a global of the root function
        (a class that can die through a weak reference: Note [Bytecode: classes loaded weakly])."""
        if _held_weakly(value):
            holder = WeakLoad.of(value)
            name = f"___kiln_weak_{value.__name__}_{id(holder)}"
            installed_globals.install(self.output, name, holder)
            load = emit.with_null(emit.load_global(name)) + emit.call(0)
            self.extend(emit.with_null(load) if push_null else load)
            return
        name = f"___kiln_obj_{type(value).__name__}_{id(value)}"
        installed_globals.install(self.output, name, value)
        self.extend(emit.load_global(name, push_null=push_null))

    def load_global_dict(self, guard_name):
        self.load_object(self.output.extra_globals[guard_name])


def assemble(code, body, temps=()):
    """A code object like `code` (arguments, cells, prologue up to RESUME) that runs `body`."""
    faults.hit("bytecode")
    original = decode(code)
    prologue = original[: first_resume(original) + 1]
    varnames = code.co_varnames
    for name in (GRAPH_OUT, *temps):
        if name not in varnames:
            varnames = (*varnames, name)
    return encode(prologue + body, like=code, co_varnames=varnames)


def log_bytecode(code, new_code):
    if logs.enabled("bytecode"):
        text = f"{format_code(code)}\n--- transformed ---\n{format_code(new_code)}"
        logs.log("bytecode", "bytecode of %s:\n%s", code.co_qualname, text)


def graph_call(output, body):
    """Compile the graph with the outputs `body` needs; the instructions that run it."""
    name, input_sources = output.compile_subgraph(body.graph_outputs)
    if name is None and body.graph_outputs:
        unimplemented("returning a tensor made without a tensor op")
    call = PyCodegen(output)
    body.temp_names.extend(random_draws.emit_draws(output, call))  # Note [Random: draws ...]
    if name is not None:
        call.extend(emit.load_global(name, push_null=True))
        temps = input_loads.load_inputs(call, body, input_sources)  # Note [Bytecode: module ...]
        call.extend(emit.call(len(input_sources)))
        call.extend(emit.store_fast(GRAPH_OUT))
        input_loads.clear_temps(call, temps)
    _end_grad_mode(output, call)
    return call.instrs


def _end_grad_mode(output, call):
    """A graph whose grad-mode switches leave a mode other than the frame's (a plain
    `torch.set_grad_enabled(b)` call) sets it after the graph: compiled graphs hold no switch."""
    switches = [
        n.args[0]
        for n in output.graph.nodes
        if n.op == "call_function" and n.target is torch._C._set_grad_enabled
    ]
    if switches:  # each sets the mode outright: the last one is where the graph ends
        call.load_object(torch._C._set_grad_enabled, push_null=True)
        call.load_object(switches[-1])
        call.extend(emit.call(1))
        call.extend(emit.pop_top())


def transformed_code(output, code, return_var):
    """The transformed code object of a frame that traced to `return return_var` in one graph."""
    body = PyCodegen(output)
    output.side_effects.codegen(body, pin=[return_var])
    body.reconstruct(return_var)  # (a SizeVariable rebuilds torch.Size from its items)
    body.extend(emit.return_value())
    new_code = assemble(code, graph_call(output, body) + body.instrs, body.temp_names)
    log_bytecode(code, new_code)
    return new_code
