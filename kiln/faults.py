"""Named points in kiln's own code where a test can make kiln fail (the crash contract's test).

    with kiln.faults.inject("guards"):
        compiled(x)        # kiln's guard generation raises InjectedFault for this frame

Note [Faults: the crash contract]
An exception from kiln's own code while it compiles a frame (or while the compiled code runs for
the first time) never reaches the user: one warning names the user's function (file:line) and
the internal error, every global state kiln may have touched is put back
(kiln.frontend.fallback.GlobalState), and the frame runs eagerly from then on. `fullgraph=True`
and `config.strict` (KILN_STRICT, set for kiln's own tests) re-raise instead. Each stage calls
`hit(stage)`; a disarmed point costs one global read.

GlobalState is taken before a frame is compiled (and before its compiled code first runs, and
before a backend compiles a graph) and put back when kiln fails, so that a half-done trace (a
`with no_grad()` or autocast region it entered, a mode it pushed, random numbers it drew, a trace
function it set) leaves nothing behind.
"""

import contextlib
import sys

import torch
from torch.utils import _python_dispatch

# every point, in pipeline order
STAGES = (
    "translator",  # the bytecode interpreter, before the first instruction
    "guards",  # building the guard function
    "bytecode",  # emitting the transformed code
    "aot",  # AOT autograd: tracing the graph at the ATen level
    "lowering",  # the kiln backend: lowering the ATen graph to loop IR
    "cpp_compile",  # the kiln backend: compiling the C++ kernels
    "first_run",  # the compiled frame's first call
)

_armed = None


class InjectedFault(RuntimeError):
    """The failure a test injected into kiln's own code."""


def hit(stage):
    """Raise InjectedFault if a test armed this stage."""
    if _armed == stage:
        raise InjectedFault(f"fault injected into kiln's {stage} stage")


@contextlib.contextmanager
def inject(stage):
    """Arm one stage for the duration of the block."""
    global _armed
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; one of {STAGES}")
    previous, _armed = _armed, stage
    try:
        yield
    finally:
        _armed = previous


class GlobalState:
    """Grad mode, autocast, RNG, torch function / dispatch mode stacks, trace and profile hooks."""

    def __init__(self):
        self.grad = torch.is_grad_enabled()
        self.autocast = {d: _autocast_of(d) for d in _autocast_devices()}
        self.autocast_cache = torch.is_autocast_cache_enabled()
        self.rng = torch.get_rng_state()
        self.cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        self.function_modes = _stack("function")
        self.dispatch_modes = _stack("dispatch")
        self.trace = sys.gettrace()
        self.profile = sys.getprofile()

    def restore(self):
        """Put every state back as it was when this was taken."""
        torch._C._set_grad_enabled(self.grad)
        for device, (enabled, dtype) in self.autocast.items():
            if _autocast_of(device) != (enabled, dtype):
                torch.set_autocast_enabled(device, enabled)
                torch.set_autocast_dtype(device, dtype)
        torch.set_autocast_cache_enabled(self.autocast_cache)
        torch.set_rng_state(self.rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)
        _restore_stack(self.function_modes, "function")
        _restore_stack(self.dispatch_modes, "dispatch")
        if sys.gettrace() is not self.trace:
            sys.settrace(self.trace)
        if sys.getprofile() is not self.profile:
            sys.setprofile(self.profile)


def _autocast_devices():
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices.append("cuda")
    return devices


def _autocast_of(device):
    return torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)


def _stack(kind):
    if kind == "function":
        at, length = torch._C._get_function_stack_at, torch._C._len_torch_function_stack
        return [at(i) for i in range(length())]
    return list(_python_dispatch._get_current_dispatch_mode_stack())


def _restore_stack(saved, kind):
    now = _stack(kind)
    if len(now) == len(saved) and all(a is b for a, b in zip(now, saved)):
        return
    if kind == "function":
        pop, push = torch._C._pop_torch_function_stack, torch._C._push_on_torch_function_stack
    else:
        pop, push = _python_dispatch._pop_mode, _python_dispatch._push_mode
    for _ in now:
        pop()
    for mode in saved:
        push(mode)
