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
pointers (a crash). So a frame called while a function mode of the user's is on the stack runs as
written (torch.compile traces through the mode instead; kiln does not yet). torch's own
default-device mode (`with torch.device(d)`, `torch.set_default_device(d)`) is the exception:
the frame compiles (a factory call without a device is a graph break, run under the mode), its
guard checks the default device (`default_devices()`), and compiled graphs run with torch
functions disabled
(`CompiledGraph.__call__`), so nothing of kiln's runs through a mode.
"""

import contextlib

import torch
from torch.utils._device import DeviceContext
from torch.utils._python_dispatch import _disable_current_modes

__all__ = [
    "user_mode_active",
    "modes_on",
    "modes_off_for_compile",
    "function_modes_on",
    "default_devices",
]

modes_on = torch._C._len_torch_dispatch_stack
function_modes_on = torch._C._len_torch_function_stack


def _function_modes():
    return [torch._C._get_function_stack_at(i) for i in range(function_modes_on())]


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


def user_mode_active():
    """A mode of the user's that would see compiled code's calls is on the dispatch stack, or a
    function mode other than torch's default-device mode on the function stack."""
    if modes_on() and _user_modes()[0]:
        return True
    return any(type(m) is not DeviceContext for m in _function_modes())


def modes_off_for_compile():
    """A context that takes the user's modes off the stack while kiln compiles a frame."""
    if modes_on() and _user_modes()[1]:
        return _disable_current_modes()
    return contextlib.nullcontext()
