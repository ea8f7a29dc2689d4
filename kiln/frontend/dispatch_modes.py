"""Frames called while a user's TorchDispatchMode or TorchFunctionMode is active.

Note [Frames: under a user's dispatch mode]
A TorchDispatchMode sees every ATen call made while it is on the mode stack. A compiled frame
does not make the frame's own calls: the kiln backend runs fused kernels the mode never sees,
and kiln's own tracing makes calls (meta tensors for the graph's inputs) that the mode would
see and the program never made. So, as torch.compile does, a frame called while a mode of the
user's is on the stack runs as written, uncompiled, and the mode sees what eager shows it. Two
kinds of mode do not count: infrastructure (kiln's fake and tracing modes, torch's fake, proxy
and functional modes: `is_infra_mode()`), and modes that ask to ignore compilation
(`ignore_compile_internals()`): for those the frame compiles with the modes taken off the
stack, and its compiled code runs with them back on, so they see the compiled code's calls.
Inside a mode's own `__torch_dispatch__` that mode is off the stack, so a frame compiled there
compiles as usual. The check on a call is one C call (the stack's depth) when no mode is on.

Note [Frames: under a user's torch function mode]
A TorchFunctionMode sees every torch function and Tensor method called while it is on the stack.
Compiled code calls other functions than the frame (guards read strides, the wrapper allocates
with `empty_strided` and calls `mm.out`), so a mode of the user's saw kiln's internals and never
the frame's own calls, and a mode that changes calls changed kiln's: under `torch.device("meta")`
the wrapper's buffers were made on the meta device and a C++ kernel wrote through their null
pointers (a crash). So kiln never runs its own work under a user's function mode: a frame
called under modes it can trace (`traceable_class`: Python classes of the user's, whose
__torch_function__ is a Python function) compiles with the modes taken off the stack while it
compiles (`modes_off_for_compile`; the stack it was called under is `compiling_function_modes()`)
and each of its torch calls traced through them (Note [Frames: tracing a user's torch function
modes] in variables/function_modes.py); the entries' guards run with torch function dispatch off
and check the stack's depth (`function_modes_guard`) and each mode's class, and graphs run with
it off. torch's default-device mode at the bottom of the stack, under the user's modes, stays on
while the frame compiles (the modes above it are traced). Any other stack
(`function_modes_reason()`: a mode kiln does not trace, a default-device mode entered above a
user's mode) runs the frame as written, and under fullgraph=True raises Unsupported
with that reason. Under DisableTorchFunction no mode is called: the frame compiles with none
traced, and the compile notes the caller's state (`compiling_torch_function_on`: a subclass's
__torch_function__ is not traced either), guarded through `function_modes_called` /
`torch_function_on`, which give the caller's state while guards run with dispatch off. torch's own
default-device mode (`with torch.device(d)`, `torch.set_default_device(d)`) alone is the other
exception: the frame compiles (a factory call without a device is a graph break, run under the
mode), its guard checks the default device (`default_devices()`) and the stack's depth, and
compiled graphs run with
torch functions disabled (`CompiledGraph.__call__`), so nothing of kiln's runs through a mode.
"""

import contextlib
import inspect
import types

import torch
from torch.overrides import BaseTorchFunctionMode
from torch.utils._device import DeviceContext
from torch.utils._python_dispatch import _disable_current_modes

__all__ = [
    "user_mode_active",
    "modes_on",
    "modes_off_for_compile",
    "function_modes_on",
    "default_devices",
    "fullgraph_refusal",
    "compiling_function_modes",
    "function_modes_guard",
    "modes_traced",
]

modes_on = torch._C._len_torch_dispatch_stack
function_modes_on = torch._C._len_torch_function_stack


def _function_modes():
    return [torch._C._get_function_stack_at(i) for i in range(function_modes_on())]


def function_mode_at(index):
    """The function mode at this depth of torch's stack (0 outermost), or None."""
    if index < function_modes_on():
        return torch._C._get_function_stack_at(index)
    return None


def default_devices():
    """The devices of the default-device modes on the function stack (innermost last); ()."""
    return tuple(m.device for m in _function_modes() if type(m) is DeviceContext)


def _user_modes():
    """The modes on the stack that are neither infrastructure nor ignore compilation, and
    whether any mode that ignores compilation is on."""
    blocking, ignoring = False, False
    for i in range(torch._C._len_torch_dispatch_stack()):
        mode = torch._C._get_dispatch_stack_at(i)
        if _flag(mode, "is_infra_mode"):
            continue
        if _flag(mode, "ignore_compile_internals"):
            ignoring = True
            continue
        blocking = True
    return blocking, ignoring


def _flag(mode, name):
    query = getattr(mode, name, None)
    return bool(query()) if callable(query) else False


def traceable_class(cls):
    """Whether kiln traces function modes of this class (Note [Frames: tracing a user's torch
    function modes]): a Python class of the user's whose __torch_function__ is a Python function."""
    handler = inspect.getattr_static(cls, "__torch_function__", None)
    if not isinstance(handler, types.FunctionType):
        return False
    # (torch's own modes are infrastructure, except the plain base class users build on)
    return cls is BaseTorchFunctionMode or not cls.__module__.startswith("torch.")


def _leading_devices(modes):
    """How many default-device modes are at the bottom of `modes` (torch keeps its one there)."""
    n = 0
    while n < len(modes) and type(modes[n]) is DeviceContext:
        n += 1
    return n


def function_modes_reason():
    """Why the function modes on the stack make a frame run eagerly, or None (none, only
    default-device modes, or modes kiln traces above torch's default-device mode)."""
    modes = _function_modes()
    users = modes[_leading_devices(modes) :]
    if not users:
        return None
    if not torch._C._is_torch_function_mode_enabled():
        return None  # (under DisableTorchFunction no mode is called: the frame compiles)
    for m in users:
        if type(m) is DeviceContext:
            return "torch's default-device mode above a torch function mode of the user's"
        if not traceable_class(type(m)):
            return f"torch function mode {type(m).__qualname__}: a __torch_function__ kiln cannot trace"
    return None


def user_mode_active():
    """A mode of the user's that would see compiled code's calls is on the dispatch stack, or a
    function mode kiln does not trace on the function stack."""
    if modes_on() and _user_modes()[0]:
        return True
    return function_modes_reason() is not None


def fullgraph_refusal():
    """Why a frame called now under fullgraph=True is an error, or None: the function modes it
    would run eagerly under (a user's dispatch mode runs it eagerly as torch.compile does)."""
    if modes_on() and _user_modes()[0]:
        return None
    return function_modes_reason()


# per compile under way (innermost last): (the user's function modes it traces, outermost first;
# the depth of the function-mode stack it was called at; whether torch function dispatch was on;
# whether function modes were called; the stack index of the first mode taken off)
_COMPILING = []


def compiling_modes_base():
    """The stack index of the outermost mode compiling_function_modes() lists (after torch's
    default-device mode, when one is at the bottom)."""
    return _COMPILING[-1][4] if _COMPILING else 0


def compiling_function_modes():
    """The user's function modes (outermost first) the frame being compiled was called under
    and traces (none while torch function dispatch is off)."""
    return _COMPILING[-1][0] if _COMPILING else ()


def compiling_torch_function_on():
    """Whether the frame being compiled was called with tensor subclasses' __torch_function__
    on (not under DisableTorchFunction / DisableTorchFunctionSubclass)."""
    return _COMPILING[-1][2] if _COMPILING else torch._C._is_torch_function_enabled()


def modes_traced(tx):
    """Whether torch calls traced now may go through a user's function modes (the frame was
    called under some, or entered one)."""
    return bool(_COMPILING and _COMPILING[-1][0]) or "function_modes" in tx.output.__dict__


@contextlib.contextmanager
def _compile_state(inner):
    stack = _function_modes()
    base = _leading_devices(stack)
    modes = stack[base:]  # (torch's default-device mode at the bottom stays on while compiling)
    enabled = torch._C._is_torch_function_mode_enabled()
    traced = tuple(modes) if enabled else ()
    _COMPILING.append((traced, len(stack), torch._C._is_torch_function_enabled(), enabled, base))
    for _ in modes:
        torch._C._pop_torch_function_stack()
    try:
        with inner:
            yield
    finally:
        _COMPILING.pop()
        for m in modes:
            torch._C._push_on_torch_function_stack(m)


def function_modes_guard():
    """The guard text on the function-mode stack when no default-device mode is on."""
    if not _COMPILING or not _COMPILING[-1][1]:
        return "not ___function_modes_on()"
    _, n, _, enabled, _ = _COMPILING[-1]
    return f"___function_modes_on() == {n} and ___function_modes_called() is {enabled}"


def guard_torch_function_state(tx):
    """Guard on the torch function state the frame was called in (once per graph): what kiln
    traced for a tensor subclass or a mode depends on it."""
    d = tx.output.__dict__
    if not d.get("torch_function_state_guarded"):
        d["torch_function_state_guarded"] = True
        from kiln.frontend.guards import GuardKind

        answer = compiling_torch_function_on()
        tx.output.guards.add(GuardKind.STATE_QUERY, None, (torch_function_on, answer))


def modes_off_for_compile():
    """A context that takes the user's modes off the stack while kiln compiles a frame, and
    notes the torch function state the frame was called in (Note [Frames: under a user's torch
    function mode])."""
    if modes_on() and _user_modes()[1]:
        return _compile_state(_disable_current_modes())
    return _compile_state(contextlib.nullcontext())


# the caller's torch function state while guards run with torch function dispatch off
_CALLER_STATE = []


def torch_function_on():
    """Whether torch function dispatch is on for the call being guarded (guards themselves run
    with it off under a user's function modes: `guards_modes_off`)."""
    return _CALLER_STATE[-1][0] if _CALLER_STATE else torch._C._is_torch_function_enabled()


def function_modes_called():
    """Whether torch calls of the call being guarded go to function modes (not under
    DisableTorchFunction)."""
    return _CALLER_STATE[-1][1] if _CALLER_STATE else torch._C._is_torch_function_mode_enabled()


@contextlib.contextmanager
def guards_modes_off():
    """Guards run with torch function dispatch off (a user's mode must not see their reads),
    the caller's state kept for `torch_function_on`."""
    state = torch._C._is_torch_function_enabled(), torch._C._is_torch_function_mode_enabled()
    _CALLER_STATE.append(state)
    try:
        with torch._C.DisableTorchFunction():
            yield
    finally:
        _CALLER_STATE.pop()
