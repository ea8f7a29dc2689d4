"""`torch.autocast(...)` used in a `with` statement inside compiled code.

Note [Autocast: traced under its state]
Entering records `enter_autocast(device, dtype, enabled, cache)` in the torch-level graph and sets
the same state while the frontend traces (so example values get autocast's dtypes); leaving
records `exit_autocast(device, prev...)` with the state before, known at trace time (the frame's
entry state is guarded). The casts themselves are NOT written into the torch-level graph: every
later stage runs the graph's nodes in order, so the enter/exit nodes switch the real thread-local
autocast state around the ops between them, and PyTorch's own Autocast dispatch keys insert the
casts (`aten._to_copy`) before our ATen tracer sees the op (the Autocast keys sit above the Python
dispatch key). We chose this over applying a policy table of our own: the table (which ops run in
low precision, which in float32, which promote) is PyTorch's, per version and device; reproducing
it would drift, tracing under it cannot. The backward is traced after the forward's exit node ran,
so it runs without autocast, as eager's `loss.backward()` outside the region does; the casts'
backward formulas cast the gradients back. With backend "eager" the nodes simply run in Python.
The ATen-level graphs never contain enter/exit nodes (they are not ATen ops). Tracing that fails
half-way must not leave the state switched: callers restore it (kiln.symbolic.autocast_state.restore_after()).
"""

import torch
from torch.utils import _pytree as pytree

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.source import AttrSource
from kiln.frontend.variables.base import VariableTracker
from kiln.frontend.variables.constant import ConstantVariable
from kiln.symbolic.autocast_state import enter_autocast, exit_autocast, state_of
from kiln.symbolic.fake import ProxyTensor

# torch's autocast classes (the deprecated per-device ones are subclasses of torch.autocast)
AUTOCAST_CLASSES = (torch.amp.autocast_mode.autocast,)

# state queries folded to their trace-time value (the entry state is guarded; in-frame changes
# are ours)
STATE_QUERIES = {
    torch.is_autocast_enabled,
    torch.get_autocast_dtype,
    torch.is_autocast_cache_enabled,
    torch._C._is_any_autocast_enabled,
    torch.get_autocast_gpu_dtype,
    torch.get_autocast_cpu_dtype,
    torch.is_autocast_cpu_enabled,
}


# Note [Autocast: frames called under autocast]
# The usual mixed-precision loop enters autocast outside the compiled model:
# `with torch.autocast("cpu", dtype=torch.bfloat16): loss = loss_fn(model(x))`. Such a frame is
# traced under the state it was called with (example dtypes as Note [Autocast: meta examples]
# says) and guarded on every device's autocast settings, so a call under other settings compiles
# another entry. The AOT stage traces the forward under that state, which puts PyTorch's casts
# into the ATen graph, runs the compiled graph with autocast off (the casts are in it), and traces
# the backward with autocast off, as eager's `loss.backward()` after the `with` block runs.
# Before, these frames ran eagerly: a compiled model under AMP was never compiled at all.


def run_under_autocast(call, args, kwargs, devices):
    """`call(args, kwargs)` on meta examples, giving the dtypes autocast gives in eager.

    Note [Autocast: meta examples]
    A frame with static shapes traces on plain meta tensors, and the meta device has no Autocast
    dispatch key: `a @ b` inside `torch.autocast("cpu", dtype=torch.bfloat16)` came out float32,
    so `y.dtype` and every branch on it differed from eager, and an op autocast makes legal
    (`scaled_dot_product_attention` of a float32 query and a bfloat16 value) raised. While
    autocast is on for a device of the arguments, the op first runs on fake tensors of that device
    (which carry the Autocast key, so PyTorch's own policy decides the result dtype), then on the
    meta examples with their floating-point arguments cast to that dtype, as autocast casts them
    (a cast to the promoted dtype changes nothing for ops autocast leaves alone); a result whose
    dtype still differs is cast. The meta run keeps the examples' autograd metadata. Callers pass
    only ops that write no argument: the fake run shares the meta arguments' tensors.
    """
    on = [d for d in devices if d.type != "meta" and torch.is_autocast_enabled(d.type)]
    if not on:
        return call(args, kwargs)

    def fake(x):
        if (
            isinstance(x, torch.Tensor)
            and x.device.type == "meta"
            and not isinstance(x, ProxyTensor)
        ):
            return ProxyTensor(x, on[0])
        return x

    try:
        cast = call(*pytree.tree_map(fake, (args, kwargs)))
    except Exception:  # no fake kernel for it: the meta run decides (and raises if it must)
        return call(args, kwargs)
    cast_leaves = pytree.tree_leaves(cast)
    floats = {c.dtype for c in cast_leaves if isinstance(c, torch.Tensor) and c.is_floating_point()}
    if len(floats) == 1:
        target = floats.pop()

        def to_target(x):
            if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != target:
                return x.to(target)
            return x

        args, kwargs = pytree.tree_map(to_target, (args, kwargs))
    leaves, spec = pytree.tree_flatten(call(args, kwargs))
    if len(cast_leaves) != len(leaves):
        return pytree.tree_unflatten(leaves, spec)
    out = [
        r.to(c.dtype)
        if isinstance(r, torch.Tensor) and isinstance(c, torch.Tensor) and r.dtype != c.dtype
        else r
        for r, c in zip(leaves, cast_leaves)
    ]
    return pytree.tree_unflatten(out, spec)


def make_autocast(tx, cls, args, kwargs):
    """`torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None)` with constant
    arguments: built for real now (its validation and warnings are eager's)."""
    if not all(a.is_python_constant() for a in [*args, *kwargs.values()]):
        unimplemented("torch.autocast with non-constant arguments")
    cargs = [a.as_python_constant() for a in args]
    ckw = {k: v.as_python_constant() for k, v in kwargs.items()}
    try:
        value = cls(*cargs, **ckw)
    except Exception as e:
        unimplemented(f"torch.autocast(...) raised {type(e).__name__}: {e}")
    return AutocastVariable.of(value, cls)


class AutocastVariable(VariableTracker):
    """An autocast manager: its settings are constants (Note [Autocast: traced under its state])."""

    def __init__(self, device, dtype, enabled, cache, cls, **kw):
        super().__init__(**kw)
        self.device, self.dtype, self.enabled, self.cache = device, dtype, enabled, cache
        self.cls = cls
        self.prev = None

    @classmethod
    def of(cls, value, klass=None):
        return cls(
            value.device,
            value.fast_dtype,
            bool(value._enabled),
            bool(value._cache_enabled),
            klass or type(value),
        )

    def python_type(self):
        return self.cls

    def enter(self, tx):
        self.prev = state_of(self.device)
        args = (self.device, self.dtype, self.enabled, self.cache)
        node = tx.output.create_node("call_function", enter_autocast, args, {})
        node.meta["example_value"] = None
        enter_autocast(*args)
        return ConstantVariable(None)

    def exit(self, tx):
        if self.prev is None:
            unimplemented("autocast exited before it was entered")
        args = (self.device, *self.prev)
        node = tx.output.create_node("call_function", exit_autocast, args, {})
        node.meta["example_value"] = None
        exit_autocast(*args)
        return ConstantVariable(None)

    def load_fresh(self, cg):
        """A new manager with the same settings (Note [Graph breaks: with blocks])."""
        cg.load_object(torch.autocast, push_null=True)
        for v in (self.device, self.dtype, self.enabled, self.cache):
            cg.load_object(v)
        cg.extend(emit.call(4))

    def reconstruct(self, cg):
        self.load_fresh(cg)

    def call_method(self, tx, name, args, kwargs):
        if name == "__enter__" and not args and not kwargs:
            return self.enter(tx)
        if name == "__exit__":
            return self.exit(tx)
        unimplemented(f"autocast.{name}")


def guarded_autocast(tx, cm):
    """A torch.autocast object passed in (a resume function re-entering its with block): its
    settings are read now and guarded."""
    v = cm.value
    for attr in ("device", "fast_dtype", "_enabled", "_cache_enabled"):
        tx.output.guards.add(
            GuardKind.CONSTANT_MATCH, AttrSource(cm.source, attr), getattr(v, attr)
        )
    return AutocastVariable.of(v)
