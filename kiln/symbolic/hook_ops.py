"""Tensor hooks given at run time: `kiln::hook_token`, `kiln::hooked` and `kiln::run_hooks`.

Note [Hooks: given at run time]
A hook on a tensor made in a compiled frame that kiln cannot (or should not) build at compile time
(a closure over the frame's objects, a bound method, functools.partial of a user object, a hook
with side effects) is not traced: it is called at backward time with the real gradient, as eager
calls it. The frame's graph gets

    token = torch.ops.kiln.hook_token(y_raw)    # a fresh one-element int64 tensor per call
    y = torch.ops.kiln.hooked(y_raw, token)     # identity; its backward is run_hooks(grad, token)

and the token is a graph output: the transformed code attaches the hook objects to it after the
graph (`attach`, a side effect replayed like the others; no backward can run inside the graph
before that). `kiln::run_hooks(grad, token)` calls the attached hooks in registration order (a
hook that returns None keeps the gradient). Every backend sees ordinary operators: "eager" calls
them (hooked's Autograd kernel is an autograd.Function), the ATen tracer records `run_hooks` in the
backward graph (below autograd while tracing), the kiln backend runs it as an extern call.

The token's memory is a `_Box` (a bytearray that holds the hooks) read through `torch.frombuffer`,
so the hooks live exactly as long as the token's storage: as long as the autograd graph that saved
it. The token's value is the box's number, so a copy of the token still finds the box while the
original lives; a token whose box is gone raises (never a silent skip of a hook).
"""

import itertools
import weakref

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from kiln.symbolic.shape_rules import SHAPE_RULES, Sizes, first_sizes

_LIB = torch.library.Library("kiln", "FRAGMENT")
_LIB.define("hook_token(Tensor x) -> Tensor")
_LIB.define("hooked(Tensor x, Tensor token) -> Tensor")
_LIB.define("run_hooks(Tensor grad, Tensor token) -> Tensor")

_numbers = itertools.count(1)
_BOXES = {}  # number -> weakref to its _Box


class _Box(bytearray):
    """The token's memory (its number, 8 bytes) and the hooks attached to it."""

    __slots__ = ("hooks", "__weakref__")


def _new_token():
    number = next(_numbers)
    box = _Box(number.to_bytes(8, "little", signed=True))
    box.hooks = []
    _BOXES[number] = weakref.ref(box, lambda _, n=number: _BOXES.pop(n, None))
    return torch.frombuffer(box, dtype=torch.int64)


def _box(token):
    box = None
    if token.device.type == "cpu" and token.dtype == torch.int64 and token.numel() == 1:
        ref = _BOXES.get(int(token.reshape(-1)[0]))
        box = ref() if ref is not None else None
    if box is None:
        raise RuntimeError("kiln: the hooks of a tensor made in a compiled frame are gone")
    return box


def attach(token, hook):
    """After the graph: `hook` runs on the gradient of the tensor this token belongs to."""
    _box(token).hooks.append(hook)


def attach_all(hooks, token):
    """`attach` of each of `hooks`, in order."""
    for hook in hooks:
        attach(token, hook)


def _run(grad, token):
    for hook in tuple(_box(token).hooks):
        out = hook(grad)
        if out is not None:
            grad = out
    return grad


def _hook_token_impl(x):
    return _new_token()


def _hook_token_meta(x):
    return torch.empty(1, dtype=torch.int64, device="meta")


def _hooked_impl(x, token):
    return x.clone()


def _hooked_meta(x, token):
    return torch.empty_like(x)


class Hooked(torch.autograd.Function):
    """Autograd of `kiln::hooked`: identity forward, `run_hooks` backward."""

    @staticmethod
    def forward(ctx, x, token):
        ctx.save_for_backward(token)
        with torch._C._AutoDispatchBelowAutograd():
            return torch.ops.kiln.hooked(x, token)

    @staticmethod
    def backward(ctx, grad):
        (token,) = ctx.saved_tensors
        return torch.ops.kiln.run_hooks(grad, token), None


def _hooked_autograd(x, token):
    return Hooked.apply(x, token)


def _traced(tensors):
    """Whether the op is being recorded (a dispatch mode, proxy or meta tensors), not run."""
    if _get_current_dispatch_mode() is not None:
        return True
    return any(type(t) is not torch.Tensor or t.device.type == "meta" for t in tensors)


def _run_hooks_autograd(grad, token):
    if _traced([grad, token]):
        with torch._C._AutoDispatchBelowAutograd():
            return torch.ops.kiln.run_hooks(grad, token)
    return _run(grad, token)  # with autograd, as the engine calls a hook (create_graph works)


def _run_hooks_impl(grad, token):
    out = _run(grad, token)
    return out.clone() if out is grad else out


def _run_hooks_meta(grad, token):
    return torch.empty_like(grad)


_LIB.impl("hook_token", _hook_token_impl, "CompositeExplicitAutograd")
_LIB.impl("hook_token", _hook_token_meta, "Meta")
_LIB.impl("hooked", _hooked_impl, "CompositeExplicitAutograd")
_LIB.impl("hooked", _hooked_meta, "Meta")
_LIB.impl("hooked", _hooked_autograd, "Autograd")
_LIB.impl("run_hooks", _run_hooks_impl, "CompositeExplicitAutograd")
_LIB.impl("run_hooks", _run_hooks_meta, "Meta")
_LIB.impl("run_hooks", _run_hooks_autograd, "Autograd")

HOOK_TOKEN = torch.ops.kiln.hook_token.default
HOOKED = torch.ops.kiln.hooked.default
RUN_HOOKS = torch.ops.kiln.run_hooks.default


def _token_sizes(x):
    return Sizes((1,))


SHAPE_RULES.update({HOOK_TOKEN: _token_sizes, HOOKED: first_sizes, RUN_HOOKS: first_sizes})
