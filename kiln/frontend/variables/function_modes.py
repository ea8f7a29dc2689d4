"""A user's TorchFunctionModes traced: each torch call of a frame compiled under them goes through
their `__torch_function__`, inlined (Note [Frames: tracing a user's torch function modes])."""

import dataclasses
import functools
import inspect
import types

import torch
from torch.utils._device import DeviceContext

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend import dispatch_modes
from kiln.frontend.dispatch_modes import function_mode_at
from kiln.frontend.guards import GuardKind
from kiln.frontend.source import AttrSource, Source
from kiln.frontend.variables.base import VariableTracker, wrap_constant_like
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.dicts import ConstDictVariable
from kiln.frontend.variables.exceptions import raise_observed
from kiln.frontend.variables.functions import inline_call
from kiln.frontend.variables.lists import TupleVariable
from kiln.frontend.variables.misc import ConstantObjectVariable
from kiln.frontend.variables.tensor import TensorVariable
from kiln.frontend.variables.torch import _overridable

# Note [Frames: tracing a user's torch function modes]
# While TorchFunctionModes of the user's are on torch's function-mode stack, every overridable
# torch call (torch.* and F.* functions, Tensor methods, operators, property getters) is handed
# to the innermost mode's `__torch_function__(func, types, args, kwargs)` with that mode popped
# off the stack while it runs, so a `func(*args, **kwargs)` inside reaches the next mode out, and
# with none left runs the op (a tensor subclass's own __torch_function__ comes after the modes).
# A frame called under such modes compiles (dispatch_modes decides which stacks: modes of Python
# classes whose __torch_function__ is a Python function, torch function dispatch on) and kiln
# replays that protocol while tracing: the stack is captured when the compile starts and taken
# off torch's stack meanwhile (kiln's own meta runs must not reach the user's code); the modes
# are traced objects read from `___function_mode_at(i)`; `output.function_modes` is the part of
# the stack a call made now would see (`dispatch` pops the innermost one around the inlined
# handler, as torch's `_pop_mode_temporarily`; `with mode:` in the frame pushes one for its
# block: EnteredModeVariable). Each handler is inlined as user code: its list appends, attribute
# writes and rewritten results are traced like any other. `func` is the object torch would pass:
# the torch function, the Tensor method, the property's `__get__`; for a Python operator the
# method torch's binding reaches and its argument order (`x + 1` is Tensor.add(x, 1), `1 - x`
# Tensor.__rsub__(x, 1)) are asked of torch once per form with a probe mode (`operator_func`).
# The guard pins the stack's depth and that dispatch is on (GLOBAL_STATE), each mode's type and
# handler, and whatever the handler read; guards run with torch function dispatch off, and so
# do the compiled graphs (output_graph: the modes' work is in them). What kiln does not model
# breaks with the reason: `types` read by a handler (torch passes () or (Tensor,) by rules of
# its C++ bindings), a NotImplemented answer, a C function torch may or may not hand to a mode,
# and any op kiln would record without going
# through `dispatch` (call_tensor_op refuses those while modes are active). The frame pushing or
# popping the stack itself is traced: Note [Frames: the function-mode stack pushed or popped by
# the frame], and so is `torch.set_default_device`: Note [Frames: set_default_device inside the
# frame].


@dataclasses.dataclass(frozen=True)
class FunctionModeSource(Source):
    """The mode at a depth of the torch function-mode stack, read when the guard or code runs."""

    index: int

    def name(self):
        return f"___function_mode_at({self.index})"

    def reconstruct(self, cg):
        cg.load_object(function_mode_at, push_null=True)
        cg.extend(emit.load_const(self.index))
        cg.extend(emit.call(1))


def active(tx):
    """The modes (innermost last) a torch call traced now goes through; [] when none."""
    d = tx.output.__dict__
    modes = d.get("function_modes")
    if modes is None:
        dispatch_modes.guard_torch_function_state(tx)
        modes = d["function_modes"] = _captured_modes(tx)
    return modes


def _captured_modes(tx):
    from kiln.frontend.variables.builder import wrap_value

    captured = dispatch_modes.compiling_function_modes()
    base = dispatch_modes.compiling_modes_base()  # (below: torch's default-device mode)
    out = []
    for i, mode in enumerate(captured, base):
        source = FunctionModeSource(i)
        tx.output.guards.add(GuardKind.TYPE_MATCH, source, type(mode))
        out.append(wrap_value(tx, mode, source))
    return out


class ModeTypesVariable(VariableTracker):
    """The `types` torch passes a mode's handler: () or (Tensor,) by rules of torch's C++
    bindings that kiln does not model, so reading it is a graph break."""

    def python_type(self):
        return tuple

    def var_getattr(self, tx, name):
        unimplemented("a torch function mode's handler read its `types` argument")

    def call_method(self, tx, name, args, kwargs):
        unimplemented("a torch function mode's handler read its `types` argument")

    def unpack_var_sequence(self, tx):
        unimplemented("a torch function mode's handler read its `types` argument")

    def truthy(self, tx):
        unimplemented("a torch function mode's handler read its `types` argument")

    def reconstruct(self, cg):
        unimplemented("a torch function mode's `types` argument kept past the graph")


class TensorFuncVariable(ConstantObjectVariable):
    """A Tensor method or property getter as the `func` a mode's handler gets: its attributes
    fold; calling it goes on through the modes left (then the op on its tensor)."""

    def __init__(self, value, *, func, **kw):
        super().__init__(value, **kw)
        self.func = func

    def call_function(self, tx, args, kwargs):
        if active(tx):
            return dispatch(tx, self.func, args, kwargs)
        return plain_call(tx, self.func, args, kwargs)


def dispatch(tx, func, args, kwargs):
    """`func(*args, **kwargs)` (func as torch_function._func_object takes it) with modes active:
    the innermost mode's __torch_function__ traced, that mode off the stack meanwhile."""
    from kiln.frontend.variables import torch_function

    modes = active(tx)
    mode = modes[-1]
    cls = mode.python_type()
    handler = inspect.getattr_static(cls, "__torch_function__", None)
    if not isinstance(handler, types.FunctionType):
        unimplemented(f"torch function mode {cls.__name__}: a __torch_function__ kiln cannot trace")
    handler_source = None
    if mode.source is not None:  # (a mode made in the frame: its class was read from a source)
        handler_source = AttrSource(AttrSource(mode.source, "__class__"), "__torch_function__")
        tx.output.guards.add(GuardKind.ID_MATCH, handler_source, handler)
    func_object = torch_function._func_object(func)
    if func[0] == "function":
        func_var = wrap_constant_like(tx, func_object)
    else:
        func_var = TensorFuncVariable(func_object, func=func)
    if kwargs or isinstance(func_object, types.FunctionType):
        kwargs_var = ConstDictVariable(dict(kwargs))
    else:
        kwargs_var = ConstantVariable(None)  # (torch's C++ bindings pass None)
    call_args = [mode, func_var, ModeTypesVariable(), TupleVariable(list(args)), kwargs_var]
    tx.output.__dict__["function_modes"] = modes[:-1]
    try:
        result = inline_call(tx, handler, call_args, {}, handler_source)
    finally:
        tx.output.__dict__["function_modes"] = modes
    if result.is_python_constant() and result.as_python_constant() is NotImplemented:
        unimplemented(f"torch function mode {cls.__name__} returned NotImplemented")
    return result


def plain_call(tx, func, args, kwargs):
    """func past the last mode: the op itself, on the values as they are (a tensor subclass's
    __torch_function__ comes next: Note [Tensors: subclasses with __torch_function__])."""
    kind, what = func
    if kind == "getter":
        return args[0].var_getattr(tx, what)
    if kind == "method" and args and isinstance(args[0], TensorVariable):
        return args[0].call_method(tx, what, list(args[1:]), kwargs)
    target = what if kind == "function" else getattr(torch.Tensor, what)
    return wrap_constant_like(tx, target).call_function(tx, list(args), kwargs)


# torch hands these to modes though get_ignored_functions() lists them
_ALSO_HANDED = (torch.device,)

_POPS = (torch._C._pop_torch_function_stack, torch.overrides._pop_mode)
_PUSHES = (torch._C._push_on_torch_function_stack, torch.overrides._push_mode)
STACK_CHANGES = _POPS + _PUSHES


# Note [Frames: the function-mode stack pushed or popped by the frame]
# `_push_on_torch_function_stack(m)` / `_pop_torch_function_stack()` in a compiled frame change
# the traced stack (`active(tx)`): the torch calls traced after them go through the new stack,
# and the stack the frame leaves is replayed after the graph like any other side effect (one
# recorded call of `set_function_mode_stack` with the modes, innermost last, read before the
# stores). A break replays it before its instruction, so the resume function compiles under the
# stack Python then has. A push or pop inside a `with mode:` block of the frame breaks (the
# block's exit would pop what the frame pushed); so does pushing an object kiln cannot trace as a
# mode, and popping an empty stack raises torch's error at compile time.


def set_function_mode_stack(modes):
    """Make torch's function-mode stack `modes` (innermost last) above torch's default-device
    modes, which stay at its bottom: the replay of a frame that pushed or popped it."""
    old = [
        torch._C._pop_torch_function_stack() for _ in range(torch._C._len_torch_function_stack())
    ]
    devices = [m for m in reversed(old) if type(m) is DeviceContext]
    for mode in devices + list(modes):
        torch._C._push_on_torch_function_stack(mode)


class _SetStack(VariableTracker):
    """set_function_mode_stack, loaded by the replay."""

    def reconstruct(self, cg):
        cg.load_object(set_function_mode_stack)


def _change_stack(tx, fn, args, kwargs):
    """A push or pop of the stack by the frame (Note [Frames: the function-mode stack ...])."""
    modes = active(tx)
    if tx.output.__dict__.get("modes_entered"):
        unimplemented(f"{fn.__name__}() inside a `with` block of a torch function mode")
    if kwargs or len(args) != (fn in _PUSHES):
        unimplemented(f"{fn.__name__}() with these arguments")
    if fn in _POPS:
        if not modes:  # (eager's own error, raised in the traced code)
            raise_observed(tx, RuntimeError, "trying to pop from empty mode stack")
        result = modes.pop()
    else:
        mode = args[0]
        cls = mode.python_type()
        if not (
            isinstance(cls, type)
            and issubclass(cls, torch.overrides.TorchFunctionMode)
            and dispatch_modes.traceable_class(cls)
        ):
            unimplemented(f"{fn.__name__}() of a {cls.__qualname__} kiln cannot trace as a mode")
        modes.append(mode)
        result = ConstantVariable(None)
    effects = tx.output.side_effects
    effects.record_call(("function_mode_stack",), _SetStack(), [TupleVariable(list(modes))], {})
    return result


# Note [Frames: set_default_device inside the frame]
# `torch.set_default_device(d)` leaves the process with torch's default-device mode for d at the
# bottom of the function-mode stack (None: none), whatever it had before: each call undoes the
# last one's mode first, so a frame's calls leave what its last call alone would have. It is
# replayed after the graph as a side effect (one recorded call, the last wins), with torch
# function dispatch off: the `torch.device(d)` that the mode's constructor makes goes through
# the user's modes in eager, and that call is traced in its place (`dispatch`). It commutes with
# the replay of a pushed or popped stack (both keep the default-device mode at the bottom). The
# graph runs under the default device the frame was called with, so a factory call without a
# device after the change breaks (variables/torch.py), and the resume function compiles under
# the new mode.


def replay_set_default_device(device):
    """torch.set_default_device(device) with torch function dispatch off (its `torch.device`
    call was traced through the user's modes already)."""
    with torch._C.DisableTorchFunction():
        torch.set_default_device(device)


class _SetDefaultDevice(VariableTracker):
    """replay_set_default_device, loaded by the replay."""

    def reconstruct(self, cg):
        cg.load_object(replay_set_default_device)


def _set_default_device(tx, args, kwargs):
    """`torch.set_default_device(d)` in the frame (Note [Frames: set_default_device ...])."""
    if kwargs:
        args = [*args, *(v for k, v in kwargs.items() if k == "device")]
    if len(args) != 1 or len(kwargs) > 1 or not args[0].is_python_constant():
        unimplemented("torch.set_default_device() with an argument known only at run time")
    device = args[0]
    if device.as_python_constant() is not None:
        if active(tx):  # (the mode's constructor makes a torch.device, which modes see)
            device = dispatch(tx, ("function", torch.device), [device], {})
        if not device.is_python_constant():
            unimplemented("torch.set_default_device(): a device the user's mode made")
        device = ConstantVariable(torch.device(device.as_python_constant()))
    tx.output.__dict__["default_device_set"] = device.as_python_constant()
    effects = tx.output.side_effects
    effects.record_call(("default_device",), _SetDefaultDevice(), [device], {})
    return ConstantVariable(None)


def call_function(tx, fn, args, kwargs):
    """A torch function object called while modes are active; None when torch would not hand it
    to a mode (an ignored function) and it should be traced as usual."""
    from kiln.frontend.variables import torch_function

    if fn is torch.set_default_device:
        return _set_default_device(tx, args, kwargs)
    if fn is torch._C._len_torch_function_stack and not args and not kwargs:
        return ConstantVariable(len(active(tx)))  # (the depth is guarded)
    if fn in STACK_CHANGES:
        return _change_stack(tx, fn, args, kwargs)
    func = torch_function._func_of_object(fn)
    if not active(tx):  # (past the last mode: a Tensor method or getter object runs on its tensor)
        return plain_call(tx, func, args, kwargs) if func[0] != "function" else None
    overridable, ignored = _overridable()
    if fn in overridable or fn in _ALSO_HANDED or func[0] != "function":
        return dispatch(tx, func, args, kwargs)
    if fn in ignored:
        return None
    if isinstance(fn, types.FunctionType):  # (plain Python code: its torch calls reach modes)
        return None
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn))
    unimplemented(f"{name} under a torch function mode (kiln does not know if the mode sees it)")


def tensor_method(tx, tensor, name, args, kwargs):
    """`tensor.name(*args, **kwargs)` with modes active."""
    overridable, ignored = _overridable()
    method = getattr(torch.Tensor, name, None)
    if method in ignored:
        return None
    if method not in overridable:
        unimplemented(f"Tensor.{name}() under a torch function mode")
    return dispatch(tx, ("method", name), [tensor, *args], kwargs)


_GETTERS = {}


def is_getter(name):
    """Whether `tensor.name` is a Tensor property torch hands to function modes."""
    known = _GETTERS.get(name)
    if known is None:
        attr = inspect.getattr_static(torch.Tensor, name, None)
        known = _GETTERS[name] = isinstance(attr, types.GetSetDescriptorType | property)
    return known


def tensor_getter(tx, tensor, name):
    """`tensor.name` of a Tensor property with modes active."""
    return dispatch(tx, ("getter", name), [tensor], {})


class _Probe(torch.overrides.TorchFunctionMode):
    """Records the calls torch hands it (and runs them)."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.append((func, args))
        return func(*args, **(kwargs or {}))


@functools.cache
def operator_func(op, operands):
    """(the func torch hands a mode for `op(*operands)`, the operands' order in its args) where
    operands names each one: "tensor" or "number". Asked of torch itself, once per form (which
    Tensor method a Python operator reaches, and with which argument first, is torch's binding)."""
    values = [torch.ones(1) if k == "tensor" else 2 + i for i, k in enumerate(operands)]
    with _Probe() as probe:
        try:
            op(*values)
        except Exception:
            pass  # (the mode saw the call first)
    if not probe.seen:
        return None
    func, args = probe.seen[0]
    order = []
    for a in args:
        index = next((i for i, v in enumerate(values) if v is a), None)
        if index is None or index in order:
            return None
        order.append(index)
    return (func, tuple(order)) if len(order) == len(values) else None


def operand_kind(v):
    if isinstance(v, TensorVariable):
        return "tensor"
    if v.is_python_constant() and isinstance(v.as_python_constant(), int | float | bool):
        return "number"
    return "other"


def operator_call(tx, op, *operands):
    """`a <op> b`, `-a` ... on a tensor with modes active: the call torch hands the mode."""
    from kiln.frontend.variables.torch_function import _func_of_object

    kinds = tuple(operand_kind(v) for v in operands)
    found = None if "other" in kinds else operator_func(op, kinds)
    if found is None:
        what = getattr(op, "__name__", op)
        unimplemented(f"operator {what} on {kinds} under a torch function mode")
    func, order = found
    return dispatch(tx, _func_of_object(func), [operands[i] for i in order], {})


def _stock_enter_exit(cls):
    """Whether a mode class enters and leaves as TorchFunctionMode does (push/pop self only)."""
    base = torch.overrides.TorchFunctionMode
    return all(
        inspect.getattr_static(cls, name, None) is inspect.getattr_static(base, name)
        for name in ("__enter__", "__exit__")
    )


class EnteredModeVariable(VariableTracker):
    """`with mode:` inside the compiled frame: the mode is pushed on the traced stack for the
    block (a break inside it is rewound to the with statement: Python enters the mode and the
    block resumes under it, compiled through the mode)."""

    traced_manager = True  # (ctx_managers.context_manager: entered and left by these methods)
    resumable = False

    def __init__(self, mode, **kw):
        super().__init__(**kw)
        self.mode = mode

    def python_type(self):
        return self.mode.python_type()

    def enter(self, tx):
        active(tx).append(self.mode)  # (a new list each dispatch: this one is the frame's)
        d = tx.output.__dict__
        d["modes_entered"] = d.get("modes_entered", 0) + 1
        return self.mode

    def exit(self, tx):
        modes = active(tx)
        if not modes or modes[-1] is not self.mode:
            unimplemented("a torch function mode left out of order inside the compiled frame")
        modes.pop()
        tx.output.__dict__["modes_entered"] -= 1
        return ConstantVariable(None)

    def reconstruct(self, cg):
        self.mode.reconstruct(cg)


def entered_mode(tx, cm):
    """The manager of `with mode:` for a user's TorchFunctionMode object, or a break."""
    cls = cm.python_type()
    if not _stock_enter_exit(cls):
        unimplemented(f"torch function mode {cls.__qualname__} with its own __enter__/__exit__")
    if not dispatch_modes.traceable_class(cls):
        unimplemented(
            f"torch function mode {cls.__qualname__}: a __torch_function__ kiln cannot trace"
        )
    return EnteredModeVariable(cm)
