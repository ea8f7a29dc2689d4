"""The symbolic interpreter: runs a frame's bytecode on VariableTrackers, one method per opcode.

Handlers are named exactly after the opcode. Where Python versions differ, the handler carries the
versions it serves (`@since(3, 12)`-style gates are plain `if PY311` branches in the handler, or
separate handlers for opcodes that exist in one version only). 3.11 is exercised by the tests (the
only version with torch here); the 3.12/3.13 handlers follow the `dis` documentation.

    def f(x, mod):            LOAD_FAST x; LOAD_FAST mod; ... CALL 1   stack: [NULL, mod, x]
        y = mod(x)            -> NNModuleVariable.call_function inlines A.forward
        return torch.log(y)   -> graph: exp(mul(2, x)) -> log ; RETURN_VALUE -> compile_subgraph
"""

import importlib
import inspect
import linecache
import sys
import types

import torch

from kiln import config, faults
from kiln.bytecode import loads_cell
from kiln.contracts import NestedState
from kiln.exc import Unsupported, unimplemented
from kiln.frontend import break_policy, installed_globals, node_meta
from kiln.frontend.blocks import MISSING, BlockStackMixin, global_value
from kiln.frontend.entered import withs_to_rewind
from kiln.frontend.guards import GuardKind
from kiln.frontend.indexed_insts import decode
from kiln.frontend.jump_ops import JumpOpsMixin
from kiln.frontend.loop_breaks import own_calls
from kiln.frontend.source import (
    AttrSource,
    ClosureSource,
    ConstSource,
    GetItemSource,
    GlobalSource,
    LocalSource,
)
from kiln.frontend.value_ops import ValueOpsMixin
from kiln.frontend.variables import namedtuples
from kiln.frontend.variables.base import VariableTracker, next_serial, probe, wrap_loaded
from kiln.frontend.variables.builder import wrap_constant_like, wrap_value
from kiln.frontend.variables.builtin import BuiltinVariable
from kiln.frontend.variables.classes import constant_cell
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.ctx_managers import EnteredExitVariable, WithExitVariable
from kiln.frontend.variables.dicts import ConstDictVariable
from kiln.frontend.variables.exceptions import ExceptionVariable, ObservedException, raise_observed
from kiln.frontend.variables.finalizers import (
    check_local_drop,
    check_stack_drops,
    frame_finalized,
)
from kiln.frontend.variables.functions import NestedUserFunctionVariable, inline_call
from kiln.frontend.variables.generator_ctx import _Yielded, leave_enter_call_to_python
from kiln.frontend.variables.generators import (
    LazyGeneratorVariable,
    cleanup_throw,
    close_freed_generators,
)
from kiln.frontend.variables.instance_dict import delete_instance_attr
from kiln.frontend.variables.lists import (
    TupleVariable,
    start_instruction,
)
from kiln.frontend.variables.misc import DeletedVariable, NullVariable, _is_skipped_module
from kiln.frontend.variables.nn_module import NNModuleVariable, replaces_parameter
from kiln.frontend.variables.tensor import TensorVariable
from kiln.frontend.variables.user_attrs import (
    has_instance_dict,
    instance_static,
    is_thread_local,
    load_attr,
    no_attribute_message,
    python_set,
    raw_store_attr,
)
from kiln.frontend.variables.user_defined import NewObjectVariable, UserDefinedObjectVariable
from kiln.frontend.variables.user_protocol import (
    user_iter_builtin,
)

PY311 = sys.version_info[:2] == (3, 11)
PY313 = sys.version_info[:2] >= (3, 13)

NULL = NullVariable()
# the instructions between a load and the CALL it is an argument of (3.11's PRECALL)
_KEEPS_FRESH = frozenset(("PRECALL", "CALL"))


class LazyVariable(VariableTracker):
    """An argument of the root frame, wrapped (and guarded) only when the code first reads it."""

    def __init__(self, value, source):
        super().__init__(source=source)
        self.value = value

    def realize(self, tx):
        v = self.value
        if probe(v, "__name__") == "__exit__" and probe(v, "__self__") is not None:
            # the __exit__ of a manager Python entered, on a resume function's stack (Note
            # [Blocks: context managers]): only ever called in Python, so nothing to guard
            return EnteredExitVariable(v, source=self.source)
        return wrap_value(tx, v, self.source)


class CellRefVariable(VariableTracker):
    """A cell of a translator's frame, captured by a function made while tracing."""

    def __init__(self, tx, name):
        super().__init__()
        self.tx = tx
        self.name = name


class FrameCellVariable(VariableTracker):
    """A real cell (a free variable of the root frame or of an inlined function with a source),
    captured by a function made while tracing."""

    def __init__(self, ref):
        super().__init__()
        self.ref = ref  # (cell, ClosureSource)


def _cell_refs(cells):
    """The closure entries of a function made while tracing, by what its cells are."""
    if not all(isinstance(c, CellRefVariable | FrameCellVariable) for c in cells):
        unimplemented("closure over cells kiln does not track")
    return cells


class CellObjectVariable(VariableTracker):
    """A real closure cell reached from a source (`fn.__closure__[i]`), stored into."""

    def __init__(self, value, source):
        super().__init__(source=source)
        self.value = value


class _Stop(Exception):
    """Raised by RETURN_VALUE to end the instruction loop."""


def user_location(code, lineno):
    """`file:line: source text` of a line of user code."""
    text = linecache.getline(code.co_filename, lineno).strip() if lineno else ""
    return f"{code.co_filename}:{lineno}: {text}"


class InstructionTranslatorBase(BlockStackMixin, ValueOpsMixin, JumpOpsMixin):
    """The stack machine shared by the root frame and inlined calls."""

    def __init__(self, output, code, f_globals, symbolic_locals, closure, inline_depth):
        self.output = output
        output.translators.append(self)  # (cleared when the trace ends: frame_cache)
        self.code = code
        self.f_globals = f_globals
        self.instructions = decode(code)
        self.symbolic_locals = dict(symbolic_locals)
        self.closure = closure  # freevar name -> (cell, source) or CellRefVariable
        self.cell_names = frozenset(code.co_cellvars + code.co_freevars)
        self.inline_depth = inline_depth
        self.stack = []
        self.ip = 0
        self.kw_names = ()
        self.fresh_function = None  # (var, guard keys) of a function the last load wrapped
        self.current_inst = None
        self.stack_before = []
        self.return_value = None
        self.is_root = False
        self.finalized_on_stack = []  # (Note [Finalizers: values on a resume's stack])
        self.with_handlers = []  # cleanup handlers of the traced `with` blocks now open
        self._handler_kinds = {}
        self.exc_info = None  # the exception an except/finally handler of this frame handles
        self.catch_region = None  # graph checkpoint where a try block that may catch began

    # --- the loop -------------------------------------------------------------------------------
    def run_loop(self):
        insts = self.instructions
        while True:
            inst = insts[self.ip]
            self.current_inst = inst
            self.stack_before = list(self.stack)
            if self.is_root:
                self.checkpoint = self.output.last_node()
                self.locals_before = dict(self.symbolic_locals)
                self.kw_before = self.kw_names
                self.effects_before = self.output.side_effects.version
                self.effects_snapshot = self.output.side_effects.snapshot()
                self.output.side_effects.step_serial = next_serial()
                start_instruction()
            else:  # (what a break placed here needs: Note [Nested breaks: placing the break ...])
                self.checkpoint = self.output.last_node()
                self.kw_before = self.kw_names
                self.effects_mark = self.output.side_effects.mark()
            self.ip += 1
            output = self.output
            output.steps_left -= 1
            if output.steps_left == 0:
                self._long_python_trace()
            if inst.opname not in _KEEPS_FRESH:  # Note [Hooks: read from their source at run time]
                self.fresh_function = None
            handler = getattr(self, inst.opname, None)
            try:
                if handler is None:
                    unimplemented(f"opcode {inst.opname} is not supported")
                self.note_handlers(inst)
                last = self.output.last_node()
                try:
                    handler(inst)
                    if self.is_root and self.finalized_on_stack:
                        check_stack_drops(self)
                    if inst.opname == "CALL":  # (its arguments are consumed)
                        self.fresh_function = None
                    own, made = node_meta.mark_new_nodes(self.output.graph, last, self.code, inst)
                    if self.is_root:  # Note [Graph breaks: a loop that only calls]
                        self.output.own_calls += own_calls(self.stack_before, inst, own, made)
                except ObservedException as exc:
                    self.unwind(exc)  # Note [Blocks: exceptions while tracing]
            except _Stop:
                return
            except Unsupported as e:
                self._annotate(e)
                raise

    def _annotate(self, e):
        break_policy.note(e, self.output)  # Note [Break policy: error_on_graph_break]
        frames = e.frames
        lineno = self.current_inst.lineno if self.current_inst else self.code.co_firstlineno
        loc = user_location(self.code, lineno)
        frames.append((self.code, self.current_inst.index, lineno))
        if not self.is_root and self.current_inst is not None:
            e.nested.append(
                NestedState(
                    tx=self,
                    index=self.current_inst.index,
                    stack=list(self.stack_before),
                    locals=dict(self.symbolic_locals),
                    checkpoint=self.checkpoint,
                    kw_names=self.kw_before,
                    effects_mark=self.effects_mark,
                )
            )
        if e.user_location is None:
            e.user_location = loc

    # --- stack helpers --------------------------------------------------------------------------
    def push(self, v):
        self.stack.append(v)

    def pop(self):
        return self.stack.pop()

    def popn(self, n):
        if n == 0:
            return []
        out = self.stack[-n:]
        del self.stack[-n:]
        return out

    def jump(self, inst):
        if inst.target_index <= self.current_inst.index:  # Note [Translator: long loops]
            output = self.output
            output.loop_passes = getattr(output, "loop_passes", 0) + 1
            if output.loop_passes > config.loop_pass_limit:
                e = Unsupported(
                    f"more than {config.loop_pass_limit} loop passes in one trace "
                    "(an infinite loop, or a list() of an infinite generator?)"
                )
                e.eager_frame = True
                raise e
        self.ip = inst.target_index

    def _long_python_trace(self):
        """config.python_trace_limit instructions traced: the frame runs eagerly if its graph has
        no tensor op yet (Note [Translator: long loops])."""
        if self.output.count_calls() == 0:
            e = Unsupported(
                f"{config.python_trace_limit} instructions traced without a tensor op "
                "(config.python_trace_limit)"
            )
            e.eager_frame = True
            raise e

    # Note [Translator: long loops]
    # Loops are unrolled into the trace. A loop of a million passes (or one per item of a long
    # list) would take minutes to trace and make a graph as long, so past config.loop_pass_limit
    # backward jumps in one trace the frame runs eagerly: no graph break inside the loop would
    # help (each resume function would unroll the rest again). Likewise a frame that traced
    # config.python_trace_limit instructions (its callees' included) without one tensor op: pure
    # Python work (a loop calling a recursive function per pass) costs nothing to run eagerly and
    # minutes to trace (fullgraph=True asks for the graph whatever it costs: no limit there).

    def call_function(self, fn, args, kwargs):
        result = user_iter_builtin(self, fn, args, kwargs)
        if result is None:
            result = fn.call_function(self, list(args), dict(kwargs))
        self.push(result)

    def load_global_value(self, name):
        if self.f_globals is self.output.root_fn.__globals__:
            self.output.side_effects.note_read(("global", name))
            stored = self.output.side_effects.load_global(name)
            if stored is not None:
                return stored
        else:  # Note [Side effects: globals of another module]
            gname = self.output.globals_name(self.f_globals)
            self.output.side_effects.note_read(("global", name, gname))
            stored = self.output.side_effects.load_global(name, gname)
            if stored is not None:
                return stored
        if name in self.f_globals:
            return wrap_loaded(self, self.f_globals[name], self.global_source(name))
        value = global_value(self.f_globals, name)  # a builtin
        if value is not MISSING:
            return wrap_constant_like(self, value)
        unimplemented(f"NameError: name {name!r} is not defined")

    def global_source(self, name):
        return GlobalSource(name, self.output.globals_name(self.f_globals))

    def get_local(self, name, free=False):
        """The value of a local (or cell) of this frame; an unbound one (never assigned,
        deleted, an `except ... as name` after its handler) raises as Python does: in the
        traced code, UnboundLocalError (NameError for a free variable of a nested function)."""
        v = self.symbolic_locals.get(name)
        if isinstance(v, LazyVariable):
            v = self.symbolic_locals[name] = v.realize(self)
        if v is None or isinstance(v, DeletedVariable):
            if free:
                message = f"cannot access free variable {name!r} where it is not associated"
                raise_observed(self, NameError, message + " with a value in enclosing scope")
            message = f"cannot access local variable {name!r} where it is not associated"
            raise_observed(self, UnboundLocalError, message + " with a value")
        return v

    def realize_all(self):
        for name, v in list(self.symbolic_locals.items()):
            if isinstance(v, LazyVariable):
                self.symbolic_locals[name] = v.realize(self)

    @property
    def output_guards(self):
        return self.output.guards

    # --- no-ops ---------------------------------------------------------------------------------
    def NOP(self, inst):
        pass

    RESUME = NOP
    CACHE = NOP
    EXTENDED_ARG = NOP
    PRECALL = NOP  # 3.11
    MAKE_CELL = NOP  # cells of this frame are kept symbolically in symbolic_locals
    COPY_FREE_VARS = NOP
    NOT_TAKEN = NOP

    # --- locals, constants, globals, cells ------------------------------------------------------
    def LOAD_FAST(self, inst):
        if loads_cell(inst, self.cell_names):  # 3.13: the cell itself, for a closure
            self.LOAD_CLOSURE(inst)
            return
        self.push(self.get_local(inst.argval))

    LOAD_FAST_CHECK = LOAD_FAST
    LOAD_FAST_BORROW = LOAD_FAST

    def LOAD_FAST_AND_CLEAR(self, inst):  # 3.12+: inlined comprehensions
        v = self.symbolic_locals.get(inst.argval)
        self.push(v if v is not None else NULL)
        self.symbolic_locals[inst.argval] = DeletedVariable()

    def LOAD_FAST_LOAD_FAST(self, inst):  # 3.13
        a, b = inst.argval
        self.push(self.get_local(a))
        self.push(self.get_local(b))

    def STORE_FAST(self, inst):
        self._rebind(inst.argval)
        v = self.pop()
        self._name_node(v, inst.argval)
        self.symbolic_locals[inst.argval] = DeletedVariable() if v is NULL else v

    def _rebind(self, *names):
        """Break before a store dropping a root-frame local's value that may run a Python
        __del__ (Note [Finalizers: locals])."""
        if not self.is_root:
            return
        for name in names:
            old = self.symbolic_locals.get(name)
            if old is None or not frame_finalized(old):
                continue
            if any(v is old for v in self.stack):
                if name.startswith("__stack"):  # Note [Finalizers: values on a resume's stack]
                    self.finalized_on_stack.append(old)
                continue  # (still on the stack: a resume function's prologue moves it there)
            if not self._held_elsewhere(old, name):
                check_local_drop(old, name)

    def _held_elsewhere(self, var, name):
        """Whether another local holds var, or the argument var was read from (`for x in xs`
        over an argument list: xs holds x)."""
        base = var.source.base() if var.source is not None else None
        for k, v in self.symbolic_locals.items():
            if k != name and (v is var or (base is not None and v.source == base)):
                return True
        return False

    def _name_node(self, v, name):
        if isinstance(v, TensorVariable):  # Note [Graph: node names and lines]
            node_meta.name_after_local(v, name, self.output.graph)

    def STORE_FAST_STORE_FAST(self, inst):  # 3.13
        a, b = inst.argval
        self._rebind(a, b)
        for name in (a, b):
            self.symbolic_locals[name] = v = self.pop()
            self._name_node(v, name)

    def STORE_FAST_LOAD_FAST(self, inst):  # 3.13
        a, b = inst.argval
        self._rebind(a)
        self.symbolic_locals[a] = v = self.pop()
        self._name_node(v, a)
        self.push(self.get_local(b))

    def DELETE_FAST(self, inst):
        self.get_local(inst.argval)
        self._rebind(inst.argval)
        self.symbolic_locals[inst.argval] = DeletedVariable()

    def LOAD_CONST(self, inst):
        self.push(ConstantVariable(inst.argval))

    LOAD_SMALL_INT = LOAD_CONST

    def LOAD_GLOBAL(self, inst):
        push_null = bool(inst.arg & 1)
        v = self.load_global_value(inst.argval)
        if push_null and not PY313:
            self.push(NULL)
        self.push(v)
        if push_null and PY313:
            self.push(NULL)

    def STORE_GLOBAL(self, inst):
        gname = self.output.globals_name(self.f_globals)  # '' for the root function's
        self.output.side_effects.store_global(inst.argval, self.pop(), gname, self.f_globals)

    def LOAD_DEREF(self, inst):
        name = inst.argval
        if name in self.closure:
            self.push(self.load_closure_var(name))
        else:
            self.push(self.get_local(name))

    def load_closure_var(self, name):
        ref = self.closure[name]
        if isinstance(ref, CellRefVariable):
            self.output.side_effects.note_read(("ref", ref.tx, ref.name))
            return ref.tx.get_local(ref.name, free=True)
        cell, source = ref
        self.output.side_effects.note_read(("cell", id(cell)))
        stored = self.output.side_effects.pending_cell(cell)  # a store made while tracing
        if stored is None and self.is_root:
            stored = self.output.side_effects.load_cell(name)
        if stored is not None:
            return stored
        try:
            value = cell.cell_contents
        except ValueError:
            unimplemented(f"free variable {name!r} referenced before assignment")
        if source is None:
            if name == "__class__" or constant_cell(cell):  # Note [Classes: local classes]
                return wrap_constant_like(self, value)
            if isinstance(value, VariableTracker):
                return value
            if not isinstance(value, (type, types.FunctionType)):
                unimplemented(f"free variable {name!r} of a function reached without a source")
            source = self._pinned_cell(cell)
        return wrap_loaded(self, value, source)

    def _pinned_cell(self, cell):
        """Note [Closures: cells of functions without a source]
        A method found through super() or a function made before the frame and reached through
        no source still reads its free variables (a local class of the test or model code) from
        its cells. A cell holding a class or function is pinned as a global of the guard and of
        the transformed code, and read as `cell.cell_contents` from there: guarded like any
        other value (its identity), so a rebinding of the variable is seen."""
        return AttrSource(self.pinned_source("cell", cell), "cell_contents")

    def pinned_source(self, kind, obj):
        """A source for `obj`, an object from outside the frame reached through no source: it
        is held as a global of the guard and of the transformed code while they live."""
        pinned = f"___kiln_{kind}_{id(obj)}"
        self.output.extra_globals[pinned] = obj
        installed_globals.install(self.output, pinned, obj)
        return ConstSource(pinned)

    def STORE_DEREF(self, inst):
        name = inst.argval
        v = self.pop()
        if name in self.closure:
            ref = self.closure[name]
            if isinstance(ref, CellRefVariable):
                self.output.side_effects.write_cell_ref(ref, v)
                return
            if not self.is_root:
                self.store_inlined_cell(name, ref, v)
                return
            self.output.side_effects.store_cell(name, v, ref[0])
            return
        self.symbolic_locals[name] = v

    def store_inlined_cell(self, name, ref, v):
        """`nonlocal x; x = v` in an inlined function whose cell is a real one: a store into the
        root frame's own free variable, or `cell.cell_contents = v` through the function's
        source (`fn.__closure__[i]`), replayed like an attribute store."""
        cell, source = ref
        root = self
        while getattr(root, "parent", None) is not None:
            root = root.parent
        for root_name, root_ref in root.closure.items():
            if isinstance(root_ref, tuple) and root_ref[0] is cell:
                self.output.side_effects.store_cell(root_name, v, cell)
                return
        if source is None:
            unimplemented(f"assignment to free variable {name!r} of a function without a source")
        self.output.side_effects.store_attr(
            CellObjectVariable(cell, source.source), "cell_contents", v
        )

    def LOAD_CLOSURE(self, inst):
        name = inst.argval
        if name in self.closure:
            ref = self.closure[name]
            if isinstance(ref, CellRefVariable):
                self.push(ref)
                return
            self.push(FrameCellVariable(ref))  # Note [Functions: rebuilt closures]
            return
        self.push(CellRefVariable(self, name))

    # --- attributes -----------------------------------------------------------------------------
    def LOAD_ATTR(self, inst):
        if not PY311 and inst.arg & 1:  # 3.12+: method form
            return self._load_method(inst.argval)
        obj = self.pop()
        self.push(load_attr(self, obj, inst.argval))

    def LOAD_METHOD(self, inst):  # 3.11
        self._load_method(inst.argval)

    def _load_method(self, name):
        obj = self.pop()
        attr = load_attr(self, obj, name)
        if PY313:
            self.push(attr)
            self.push(NULL)
        else:
            self.push(NULL)
            self.push(attr)

    def LOAD_SUPER_ATTR(self, inst):  # 3.12+: super().name / super().name(...)
        obj = self.pop()
        cls = self.pop()
        sup = self.pop()
        if not (isinstance(sup, BuiltinVariable) and sup.fn is super):
            unimplemented("LOAD_SUPER_ATTR with a shadowed super")
        s = BuiltinVariable(super).call_function(self, [cls, obj], {})
        attr = s.var_getattr(self, inst.argval)
        if inst.arg & 1:
            self.push(attr)
            self.push(NULL)  # the attribute is bound already
            if not PY313:
                self.stack[-2], self.stack[-1] = self.stack[-1], self.stack[-2]
        else:
            self.push(attr)

    def STORE_ATTR(self, inst):
        obj = self.pop()
        value = self.pop()
        name = inst.argval
        if isinstance(
            obj, (NewObjectVariable, ExceptionVariable, NestedUserFunctionVariable, TensorVariable)
        ):
            obj.setattr(self, name, value)
            return
        if type(obj) is TupleVariable and obj.keeps_identity:
            namedtuples.store_attr(self, obj, name, value)  # Note [Namedtuples: attributes ...]
            return
        if not isinstance(obj, (NNModuleVariable, UserDefinedObjectVariable)):
            unimplemented(f"attribute assignment .{name} on {obj}")
        if is_thread_local(obj.value):  # Note [Objects: threading.local]
            self.output.side_effects.store_attr(obj, name, value)
            return
        plain = (
            torch.nn.Module.__setattr__ if isinstance(obj, NNModuleVariable) else object.__setattr__
        )
        setattr_ = inspect.getattr_static(type(obj.value), "__setattr__")
        if setattr_ is not plain:
            if isinstance(obj, UserDefinedObjectVariable) and inspect.isfunction(setattr_):
                # Note [Side effects: stores through a user __setattr__]
                src = obj._class_attr_source("__setattr__")
                inline_call(self, setattr_, [obj, ConstantVariable(name), value], {}, src)
                return
            # the replay would call it later than eager did, and reads would not see its result
            unimplemented(f"assignment through {type(obj.value).__name__}.__setattr__")
        cls = type(obj.value)
        static = instance_static(cls, name, None)
        if isinstance(obj, UserDefinedObjectVariable) and (
            isinstance(static, property) or python_set(static) is not None
        ):
            raw_store_attr(self, obj, name, value)  # its Python setter / __set__, inlined
            return
        if static is not None and hasattr(static, "__set__"):
            unimplemented(f"assignment to the descriptor {cls.__name__}.{name}")
        if not has_instance_dict(cls):  # `object()`, a class with __slots__ only
            if static is not None:
                unimplemented(f"assignment to the read-only {cls.__name__}.{name}")
            raise_observed(self, AttributeError, no_attribute_message(cls, name))
        if isinstance(obj, NNModuleVariable):
            mod = obj.value
            if name in mod._parameters and replaces_parameter(self, obj, value):
                self.output.side_effects.store_attr(obj, name, value)
                return  # Note [Modules: parameters made in the frame]
            if (
                name in mod._modules
                and isinstance(value, NNModuleVariable)
                and value.value is mod._modules[name]
                and self.output.side_effects.load_attr(obj, name) is None
            ):
                return  # the submodule stored back into its own attribute: nothing changes
            if name in mod._parameters or name in mod._modules:
                unimplemented(f"replacing parameter or submodule {name!r} of a module")
            if isinstance(value, NNModuleVariable) or (
                isinstance(value, TensorVariable) and value.python_type() is not torch.Tensor
            ):
                unimplemented(f"assigning a module or parameter to {type(mod).__name__}.{name}")
        self.output.side_effects.store_attr(obj, name, value)

    def DELETE_ATTR(self, inst):
        obj = self.pop()
        if isinstance(obj, UserDefinedObjectVariable):
            delete_instance_attr(
                self, obj, inst.argval
            )  # Note [Objects: the instance __dict__ as a view]
            return
        if isinstance(obj, NewObjectVariable):  # an instance made in the frame
            obj.delattr(self, inst.argval)
            return
        unimplemented(f"attribute deletion .{inst.argval} (side effect)")

    # --- stack manipulation ---------------------------------------------------------------------
    def POP_TOP(self, inst):
        self.pop()

    def PUSH_NULL(self, inst):
        self.push(NULL)

    def COPY(self, inst):
        self.push(self.stack[-inst.arg])

    def SWAP(self, inst):
        i = inst.arg
        self.stack[-1], self.stack[-i] = self.stack[-i], self.stack[-1]

    # --- calls ----------------------------------------------------------------------------------
    def KW_NAMES(self, inst):  # 3.11, 3.12
        self.kw_names = tuple(inst.argval)

    def _split_kw(self, args, names):
        if not names:
            return args, {}
        n = len(names)
        return args[:-n], dict(zip(names, args[-n:]))

    def CALL(self, inst):
        args = self.popn(inst.arg)
        if PY313:
            self_or_null = self.pop()
            fn = self.pop()
            if self_or_null is not NULL:
                args = [self_or_null, *args]
        else:
            b = self.pop()
            a = self.pop()
            if a is NULL:
                fn = b
            else:
                fn, args = a, [b, *args]
        names, self.kw_names = self.kw_names, ()
        args, kwargs = self._split_kw(args, names)
        self.call_function(fn, args, kwargs)

    def CALL_KW(self, inst):  # 3.13
        self.kw_names = tuple(self.pop().as_python_constant())
        self.CALL(inst)

    def CALL_FUNCTION_EX(self, inst):
        kwargs = self.pop() if inst.arg & 1 else None
        args = self.pop()
        if PY313:
            null = self.pop()
            fn = self.pop()
            if null is not NULL:
                unimplemented("CALL_FUNCTION_EX with a bound self")
        else:
            fn = self.pop()
            null = self.pop()
            if null is not NULL:
                fn, null = null, fn
                args = TupleVariable([null, *args.unpack_var_sequence(self)])
        arg_items = args.unpack_var_sequence(self)
        kw_items = {}
        if kwargs is not None:
            if not isinstance(kwargs, ConstDictVariable):
                unimplemented(f"**{kwargs}")
            kw_items = dict(kwargs.items)
        self.call_function(fn, arg_items, kw_items)

    def MAKE_FUNCTION(self, inst):
        code = self.pop().as_python_constant()
        if PY313:  # the attributes follow, one SET_FUNCTION_ATTRIBUTE per flag
            self.push(NestedUserFunctionVariable(code, self.f_globals))
            return
        self._make_function(code, inst.arg)

    def _make_function(self, code, flags):
        closure = self.pop() if flags & 0x08 else None
        annotations = self.pop() if flags & 0x04 else None
        kwdefaults = self.pop() if flags & 0x02 else None
        defaults = self.pop() if flags & 0x01 else None
        fn = NestedUserFunctionVariable(
            code,
            self.f_globals,
            defaults=defaults.unpack_var_sequence(self) if defaults is not None else None,
            kwdefaults=dict(kwdefaults.items) if kwdefaults is not None else None,
        )
        fn.annotations = annotations
        if closure is not None:
            fn.closure = dict(zip(code.co_freevars, _cell_refs(closure.unpack_var_sequence(self))))
        elif code.co_freevars:
            unimplemented("function with free variables and no closure")
        self.push(fn)

    def SET_FUNCTION_ATTRIBUTE(self, inst):  # 3.13
        fn = self.pop()
        value = self.pop()
        if not isinstance(fn, NestedUserFunctionVariable):
            unimplemented(f"SET_FUNCTION_ATTRIBUTE on {fn}")
        if inst.arg == 0x08:
            fn.closure = dict(zip(fn.code.co_freevars, _cell_refs(value.unpack_var_sequence(self))))
        elif inst.arg == 0x01:
            fn.defaults = value.unpack_var_sequence(self)
        elif inst.arg == 0x02:
            fn.kwdefaults = dict(value.items)
        elif inst.arg == 0x04:
            fn.annotations = value
        self.push(fn)

    def IMPORT_NAME(self, inst):
        """`import a.b` / `from a import b` of a module that is already imported (no effect)."""
        fromlist = self.pop().as_python_constant()
        level = self.pop().as_python_constant()
        name = inst.argval
        if level == 0 and name not in sys.modules and _is_library_name(name):
            _import_library_module(name)  # Note [Frames: a library import while tracing]
        if level != 0 or name not in sys.modules:
            unimplemented(f"import of {name!r} (not imported yet, or relative)")
        self.push(self._imported_module(name if fromlist else name.partition(".")[0]))

    def _imported_module(self, name):
        """sys.modules[name] as an import gives it: a module kiln skips is a constant; a user's
        module is read from sys.modules at run time, its identity guarded, so its attributes
        (a tensor, a flag) are guarded inputs like a global's."""
        module = sys.modules[name]
        if not isinstance(module, types.ModuleType) or _is_skipped_module(module):
            return wrap_constant_like(self, module)
        pinned = "___kiln_sys_modules"
        self.output.extra_globals[pinned] = sys.modules
        installed_globals.install(self.output, pinned, sys.modules)
        source = GetItemSource(ConstSource(pinned), name)
        self.output.guards.add(GuardKind.ID_MATCH, source, module)
        return wrap_value(self, module, source)

    def IMPORT_FROM(self, inst):
        module = self.stack[-1]
        self.push(module.var_getattr(self, inst.argval))


# Note [Frames: a library import while tracing]
# `from torch.fx.experimental.symbolic_shapes import is_nested_int` inside a library function kiln
# traces (torch._prims_common's helpers import lazily) names a module that may not be loaded yet.
# Loading a module of a library kiln skips (config.skip_modules: torch, numpy, ...) has no effect
# the program can see beyond the import itself, which eager would do at this very point: kiln
# imports it while tracing and goes on. A user's module not imported yet stays a graph break (its
# body is the user's code, run once, at the point eager runs it).
def _is_library_name(name):
    return any(name == m or name.startswith(m + ".") for m in config.skip_modules)


def _import_library_module(name):
    try:
        importlib.import_module(name)
    except Exception as e:
        unimplemented(f"import of {name!r} raised {type(e).__name__}: {e}")


class InliningTranslator(InstructionTranslatorBase):
    """Traces a called user function inside its caller's graph."""

    def __init__(self, parent, fn, code, symbolic_locals, closure):
        closure_refs = {}
        for name, ref in closure.items():
            if isinstance(ref, CellRefVariable):
                closure_refs[name] = ref
            elif isinstance(ref, FrameCellVariable):
                closure_refs[name] = ref.ref  # the root frame's real cell, read from its source
            else:
                cell, fn_source, i = ref
                source = None
                if fn_source is not None:
                    source = AttrSource(
                        GetItemSource(AttrSource(fn_source, "__closure__"), i), "cell_contents"
                    )
                closure_refs[name] = (cell, source)
        super().__init__(
            parent.output,
            code,
            fn.__globals__,
            symbolic_locals,
            closure_refs,
            parent.inline_depth + 1,
        )
        self.parent = parent
        self.fn = fn
        self.is_generator = bool(code.co_flags & inspect.CO_GENERATOR)
        self.suspendable = False  # stop at each yield (generators, GeneratorContextVariable)

    def run_inline(self):
        """Trace the call: its return value; a generator function's call makes a generator
        object whose body runs as it is stepped (Note [Generators: lazy])."""
        if self.is_generator:
            self.suspendable = True
            return LazyGeneratorVariable(self)
        self.run_loop()
        return self.return_value

    def RETURN_VALUE(self, inst):
        self.return_value = self.pop()
        close_freed_generators(self, self.return_value)  # Note [Generators: closed when freed]
        raise _Stop

    def RETURN_GENERATOR(self, inst):
        self.push(ConstantVariable(None))

    def YIELD_VALUE(self, inst):
        if not self.suspendable:
            unimplemented("yield outside a generator's translator")
        raise _Yielded(self.pop())  # the generator stops here, resumed later

    def CLEANUP_THROW(self, inst):  # 3.12+
        cleanup_throw(self)


class InstructionTranslator(InstructionTranslatorBase):
    """The root frame: its arguments are the real values, wrapped lazily with local sources."""

    def __init__(self, output, fn, args, kwargs):
        code = fn.__code__
        bound = inspect.signature(fn, follow_wrapped=False).bind(*args, **kwargs)
        bound.apply_defaults()
        cells = set(code.co_cellvars)
        symbolic_locals = {
            name: LazyVariable(value, LocalSource(name, is_cell=name in cells))
            for name, value in bound.arguments.items()
        }
        closure = {}
        for i, name in enumerate(code.co_freevars):
            closure[name] = (fn.__closure__[i], ClosureSource(name, i))
        super().__init__(output, code, fn.__globals__, symbolic_locals, closure, 0)
        self.fn = fn
        self.arg_values = dict(bound.arguments)  # (what a weak reference's call checks)
        self.is_root = True
        self.try_state = None  # Note [Blocks: rewinding to a try block]
        self.generator_managers = []  # GeneratorContextVariables entered (rewind undoes)
        self.try_withs = 0  # (the with blocks open when try_state was taken)
        self.initial_grad_mode = torch.is_grad_enabled()

    def run(self):
        """Trace the frame; on success `self.return_value` holds the value it returns."""
        faults.hit("translator")
        self.run_loop()

    def RETURN_VALUE(self, inst):
        if any(m.open_by_call for m in self.generator_managers):
            # Note [Ctx: __enter__ and __exit__ called on a contextmanager]
            unimplemented("returning with a contextmanager entered by its __enter__ call")
        self.return_value = self.pop()
        close_freed_generators(self, self.return_value)  # Note [Generators: closed when freed]
        raise _Stop

    def _annotate(self, e):
        super()._annotate(e)
        slots = [k for k, v in enumerate(self.stack_before) if isinstance(v, WithExitVariable)]
        traced = withs_to_rewind(self.stack_before, slots, self.current_inst, e)
        if traced and getattr(traced[0], "rewind", None) is None:
            e.no_resume = True  # Note [Blocks: context managers]
        rewinds = [traced[0].rewind] if traced and traced[0].rewind is not None else []
        # (Note [Ctx: __enter__ and __exit__ called on a contextmanager])
        rewinds += [m.called_enter for m in self.generator_managers if m.open_by_call]
        if self.try_state is not None:
            rewinds.append(self.try_state)
        if e.break_state is None or e.break_state.tx is not self:
            # What the graph-break path (resume functions) needs: where, and the live state.
            # The outermost root frame annotates last and wins.
            e.break_state = self.break_state_here(
                resume_here=e.break_state is not None and e.break_state.resume_here
            )
            if rewinds:
                point = min(rewinds, key=lambda rewind: rewind.serial)
                if point.where:  # (Note [Ctx: __enter__ and __exit__ called on a contextmanager])
                    leave_enter_call_to_python(self, point)
                self.rewind(e, point)
