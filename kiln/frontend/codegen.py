"""Emits the transformed bytecode: call the compiled graph, rebuild the return value, return.

def f(x, mod):                       def f(x, mod):   # transformed
    y = mod(x)                           ___out = __kiln_compiled_fn_0(x)
    return torch.log(y)                  return ___out[0]
"""

from kiln import logs
from kiln.bytecode import decode, emit, encode, first_resume
from kiln.exc import unimplemented
from kiln.frontend.variables.dicts import ConstDictVariable
from kiln.frontend.variables.lists import ListVariable, SetVariable
from kiln.frontend.variables.user_defined import NewObjectVariable

GRAPH_OUT = "___kiln_graph_out"


class PyCodegen:
    """Collects instructions; tensors not from a source become outputs of the graph."""

    def __init__(self, output, callee_factory=None):
        self.output = output
        self.instrs = []
        self.graph_outputs = []  # TensorVariables, in graph output order
        self._output_index = {}
        self._temps = {}  # id(mutable container) -> local holding the rebuilt object
        self.temp_names = []
        self.compile_callees = False  # rebuild user callables as kiln-compiled frames
        self.callee_factory = callee_factory

    def callee(self, fn, module_root=False):
        """The kiln-compiled wrapper of a user function (a break inside it: its own frame)."""
        return self.callee_factory(fn, module_root)

    def new_temp(self):
        name = f"___kiln_tmp_{len(self.temp_names)}"
        self.temp_names.append(name)
        return name

    def append(self, instr):
        self.instrs.append(instr)

    def extend(self, instrs):
        self.instrs.extend(instrs)

    def reconstruct(self, var):
        if (
            isinstance(var, (ListVariable, ConstDictVariable, NewObjectVariable, SetVariable))
            and var.source is None
        ):
            # Mutable containers are rebuilt once; every later use loads the same object.
            name = self._temps.get(id(var))
            if name is not None:
                self.extend(emit.load_fast(name))
                return
            var.reconstruct(self)
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
        """Load an object kiln holds (a dtype, a torch.Size ...) via a global of the root function."""
        name = f"___kiln_obj_{type(value).__name__}_{id(value)}"
        self.output.root_fn.__globals__[name] = value
        self.extend(emit.load_global(name, push_null=push_null))

    def load_global_dict(self, guard_name):
        self.load_object(self.output.extra_globals[guard_name])


def assemble(code, body, temps=()):
    """A code object like `code` (arguments, cells, prologue up to RESUME) that runs `body`."""
    original = decode(code)
    prologue = original[: first_resume(original) + 1]
    varnames = code.co_varnames
    for name in (GRAPH_OUT, *temps):
        if name not in varnames:
            varnames = (*varnames, name)
    return encode(prologue + body, like=code, co_varnames=varnames)


def _log_bytecode(code, new_code):
    if logs.enabled("bytecode"):
        from kiln.bytecode import format_code

        text = f"{format_code(code)}\n--- transformed ---\n{format_code(new_code)}"
        logs.log("bytecode", "bytecode of %s:\n%s", code.co_qualname, text)


def _graph_call(output, body):
    """Compile the graph with the outputs `body` needs; the instructions that run it."""
    name, input_sources = output.compile_subgraph(body.graph_outputs)
    if name is None and body.graph_outputs:
        unimplemented("returning a tensor made without a tensor op")
    call = PyCodegen(output)
    if name is not None:
        call.extend(emit.load_global(name, push_null=True))
        for source in input_sources:
            source.reconstruct(call)
        call.extend(emit.call(len(input_sources)))
        call.extend(emit.store_fast(GRAPH_OUT))
    return call.instrs


def transformed_code(output, code, return_var):
    """The transformed code object of a frame that traced to `return return_var` in one graph."""
    body = PyCodegen(output)
    output.side_effects.codegen(body)
    body.reconstruct(return_var)  # (a SizeVariable rebuilds torch.Size from its items)
    body.extend(emit.return_value())
    new_code = assemble(code, _graph_call(output, body) + body.instrs, body.temp_names)
    _log_bytecode(code, new_code)
    return new_code


class NoBreakHere(Exception):
    """A graph break cannot be placed at this instruction; the frame runs eagerly."""


# Instructions a graph break may execute in Python between the graph and the resume function,
# with the number of values each pushes (Note [Graph breaks: the transformed code]).
_BREAKABLE_PUSHES = {
    "CALL": 1,
    "CALL_KW": 1,
    "CALL_FUNCTION_EX": 1,
    "BINARY_OP": 1,
    "BINARY_SUBSCR": 1,
    "COMPARE_OP": 1,
    "CONTAINS_OP": 1,
    "IS_OP": 1,
    "UNARY_NEGATIVE": 1,
    "UNARY_NOT": 1,
    "UNARY_INVERT": 1,
    "TO_BOOL": 1,
    "FORMAT_VALUE": 1,
    "BUILD_STRING": 1,
    "STORE_ATTR": 0,
    "STORE_SUBSCR": 0,
    "DELETE_SUBSCR": 0,
    "STORE_GLOBAL": 0,
}
_BRANCHES = {
    "POP_JUMP_IF_FALSE": emit.pop_jump_if_false,
    "POP_JUMP_FORWARD_IF_FALSE": emit.pop_jump_if_false,
    "POP_JUMP_BACKWARD_IF_FALSE": emit.pop_jump_if_false,
    "POP_JUMP_IF_TRUE": emit.pop_jump_if_true,
    "POP_JUMP_FORWARD_IF_TRUE": emit.pop_jump_if_true,
    "POP_JUMP_BACKWARD_IF_TRUE": emit.pop_jump_if_true,
}


def transformed_code_at_break(output, code, e, instructions, resume_factory, callee_factory):
    """The transformed code of a frame whose trace stopped with Unsupported `e`.

    Note [Graph breaks: the transformed code]
        ___out = <graph so far>(inputs...)            # the graph of what came before
        <rebuild the stack from graph outputs / sources / constants>
        <the unsupported instruction, run by Python>  # a call: a user callee that broke
                                                       # inside runs through kiln's frame entry
        return __resume_at_N(<stack>, <live locals>)  # kiln-compiled resume function
    A data-dependent branch (POP_JUMP_IF_* on a tensor) becomes the jump itself with one resume
    function per side. Breaks inside try blocks, in frames with cells, or at instructions not in
    the tables above raise NoBreakHere: the frame runs eagerly instead.
    """
    from kiln.frontend.resume import ResumeUnsupported, make_resume_function
    from kiln.frontend.variables.misc import DeletedVariable, NullVariable

    inst = instructions[e.root_index]
    if getattr(e, "no_resume", False):
        raise NoBreakHere("the graph so far holds code from a try/except block")
    if inst.exn_tab_entry is not None and not e.root_tx.only_reraises(inst.exn_tab_entry.target):
        # (a try/finally is fine: Note [Translator: try/finally]; the resume function keeps
        # the exception table for what follows)
        raise NoBreakHere("inside a try/except or with block")
    if any(
        i.target_index is not None and i.target_index <= e.root_index
        for i in instructions[e.root_index :]
    ):
        # Note [Graph breaks: loops]: a resume function inside a loop would call itself once
        # per iteration (unbounded recursion), so a frame that breaks inside a loop runs eagerly.
        raise NoBreakHere("graph break inside a loop")
    branch = _BRANCHES.get(inst.opname)
    if branch is None and inst.opname not in _BREAKABLE_PUSHES:
        raise NoBreakHere(f"at {inst.opname}")
    if output.side_effects.version != e.root_effects_version:
        # the instruction (an inlined call) already mutated state before it broke: running it
        # again in Python would repeat those mutations
        raise NoBreakHere("side effects inside the call that broke")
    output.rollback(e.root_checkpoint)
    output.side_effects.restore(e.root_effects_snapshot)  # the instruction makes them itself
    stack = list(e.root_stack)
    live = [
        n
        for n, v in e.root_locals.items()
        if not isinstance(v, DeletedVariable) and not n.startswith("__stack")  # resume's own
    ]
    body = PyCodegen(output, callee_factory)
    output.side_effects.codegen(body)
    for name in code.co_cellvars:
        # cell variables were traced symbolically: put their values in the real cells, which
        # the resume function shares
        value = e.root_locals.get(name)
        if value is not None and not isinstance(value, DeletedVariable):
            body.reconstruct(value)
            body.extend(emit.store_deref(name))
    callee_slot = _callee_slot(inst, stack) if len(e.frames) > 1 else None
    for k, v in enumerate(stack):
        if isinstance(v, NullVariable):
            body.extend(emit.push_null())
        else:
            body.compile_callees = k == callee_slot
            body.reconstruct(v)
            body.compile_callees = False

    def call_resume(index, depth, nulls):
        try:
            resume = make_resume_function(code, index, depth, nulls, live)
        except ResumeUnsupported as err:
            raise NoBreakHere(str(err)) from err
        temps = [body.new_temp() for _ in range(depth)]
        for k in reversed(range(depth)):
            body.extend(emit.store_fast(temps[k]))
        body.load_object(resume_factory(resume.code), push_null=True)
        extra = 0
        if resume.code.co_freevars:
            # the resume function shares this call's cells: made here, passed first
            # (Note [Cache: closures made per call])
            body.extend(resume.emit_make_function())
            extra = 1
        for k in resume.stack_args:
            body.extend(emit.load_fast(temps[k]))
        for name in resume.live_locals:
            body.reconstruct(e.root_locals[name])
        body.extend(emit.call(extra + len(resume.stack_args) + len(resume.live_locals)))
        body.extend(emit.return_value())

    nulls_below = [k for k, v in enumerate(stack) if isinstance(v, NullVariable)]
    if branch is not None:
        other = emit.nop()
        body.extend(branch(other[0]))
        depth = len(stack) - 1
        nulls = [k for k in nulls_below if k < depth]
        call_resume(e.root_index + 1, depth, nulls)
        body.extend(other)
        call_resume(inst.target_index, depth, nulls)
    else:
        if inst.opname == "CALL" and e.root_kw_names:
            body.extend(emit.call_kw(inst.arg, e.root_kw_names))
        elif inst.opname == "CALL":
            body.extend(emit.call(inst.arg))
        else:
            body.append(inst.copy(target=None, exn_tab_entry=None, offset=None))
        depth = len(stack) + _stack_effect(inst)
        pushes = _BREAKABLE_PUSHES[inst.opname]
        nulls = [k for k in nulls_below if k < depth - pushes]
        call_resume(e.root_index + 1, depth, nulls)
    new_code = assemble(code, _graph_call(output, body) + body.instrs, body.temp_names)
    _log_bytecode(code, new_code)
    return new_code


def _stack_effect(inst):
    """Net stack effect of the instruction a break executes (calls counted whole)."""
    import dis

    if inst.opname == "CALL":
        return -(inst.arg + 2) + 1  # NULL|self, callable, args -> result
    if inst.opname == "CALL_KW":
        return -(inst.arg + 3) + 1  # ... + the names tuple
    if inst.opname == "CALL_FUNCTION_EX":
        return -(3 + (inst.arg & 1)) + 1
    return dis.stack_effect(inst.opcode, inst.arg, jump=False)


def _callee_slot(inst, stack):
    """Stack position of the callable of a CALL (the frame that broke inside)."""
    from kiln.bytecode import PY313_PLUS
    from kiln.frontend.variables.misc import NullVariable

    if inst.opname == "CALL_FUNCTION_EX":
        kw = inst.arg & 1
        slot = len(stack) - (3 if PY313_PLUS else 2) - kw
        if slot < 0:
            return None
        if not PY313_PLUS and slot >= 1 and not isinstance(stack[slot - 1], NullVariable):
            return slot - 1  # [callable, self, args]: a method call
        return slot
    if inst.opname not in ("CALL", "CALL_KW"):
        return None

    argc = inst.arg
    base = len(stack) - argc - 2 - (1 if inst.opname == "CALL_KW" else 0)
    if base < 0:
        return None
    if PY313_PLUS:
        return base
    return base + 1 if isinstance(stack[base], NullVariable) else base
