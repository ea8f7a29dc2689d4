"""Frames called while a user's TorchDispatchMode is active.

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
"""

import contextlib

import torch
from torch.utils._python_dispatch import _disable_current_modes

__all__ = ["user_mode_active", "modes_on", "modes_off_for_compile"]

modes_on = torch._C._len_torch_dispatch_stack


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
    """A mode of the user's that sees compiled code's calls is on the dispatch stack."""
    return _user_modes()[0]


def modes_off_for_compile():
    """A context that takes the user's modes off the stack while kiln compiles a frame."""
    if modes_on() and _user_modes()[1]:
        return _disable_current_modes()
    return contextlib.nullcontext()
