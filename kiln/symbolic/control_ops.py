"""`torch.cond` as graph ops: `kiln::cond` runs one of two branch graphs, `kiln::cond_backward`
its vector-Jacobian product. Every stage sees them as ordinary ATen-level operators.

Note [Control flow: cond as an operator]
The frontend traces both branches of `torch.cond(pred, true_fn, false_fn, operands)` into FX
graphs of their own (closed-over tensors lifted as extra operands) and registers the pair here
under a key made from their code. The frame's graph then holds one node

    cond = torch.ops.kiln.cond(pred, key, [x, w])

that every backend treats as an operator: "eager" calls it, the ATen tracer (aot_eager, kiln)
records it like any op (its Meta kernel gives the outputs' metadata), the kiln backend runs it
as an extern call. At run time the operator reads `pred` and runs exactly one branch graph, so
a NaN, an error or an effect of the other branch never happens. Under a compiling backend
(aot_eager, kiln) each branch graph is compiled by that backend the first time it runs.

Gradients: the operator's Autograd kernel is an autograd.Function whose backward calls
`kiln::cond_backward(pred, key, operands, grads)`. Its kernel re-runs the chosen branch with
autograd on and returns the gradients of the operands (the branch's activations are recomputed
rather than saved). While a tracer records the op (proxy or meta tensors, or a dispatch mode
active) it goes below autograd instead, so the joint graph gets one `cond_backward` node.
Double backward through it is refused with an error (its gradients would carry no graph).

The key is a hash of the branches' code, so the same branches traced in another process get the
same key (a compiled graph loaded from the code cache finds them registered by the frontend).
"""

import hashlib

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from kiln import config, logs

_LIB = torch.library.Library("kiln", "DEF")
_LIB.define("cond(Tensor pred, str key, Tensor[] operands) -> Tensor[]")
_LIB.define("cond_backward(Tensor pred, str key, Tensor[] operands, Tensor?[] grads) -> Tensor[]")
_LIB.define("while_loop(str key, Tensor[] carried, Tensor[] additional) -> Tensor[]")


class Branches:
    """The two branch graphs of one `torch.cond` and the metadata of their outputs; `compiler`
    (the frame's backend, or None) compiles a branch the first time it runs."""

    def __init__(self, true_fn, false_fn, outputs, compiler=None):
        self.true_fn = true_fn
        self.false_fn = false_fn
        self.outputs = outputs  # [(shape, dtype)] per output, the same for both branches
        self.compiler = compiler
        self.compiled = {}

    def pick(self, pred):
        """The branch graph `pred` (a real one-element tensor) selects."""
        return self.true_fn if bool(pred) else self.false_fn

    def run(self, pred, operands):
        """Run the branch `pred` selects (compiled on its first run when there is a compiler)."""
        return self.call(bool(pred), operands)

    def call(self, which, operands):
        """Run the true (True) or false (False) graph on `operands` (compiled on its first run)."""
        operands = [o.detach() for o in operands]  # (below autograd: an inference call)
        fn = self.compiled.get(which)
        if fn is None:
            gm = self.true_fn if which else self.false_fn
            fn = self.compiled[which] = self._compile(gm, operands)
        return fn(*operands)

    def _compile(self, gm, operands):
        if self.compiler is None:
            return gm
        try:
            return self.compiler(gm, operands)
        except Exception as e:  # Note [Faults: the crash contract]: the graph runs as it is
            if config.strict:
                raise
            logs.warn(
                "kiln: compiling a torch.cond branch failed (%s: %s); running it eagerly",
                type(e).__name__,
                e,
            )
            return gm


_BRANCHES = {}


def _describe(gm):
    """The code of a branch graph and the identity of its targets (for the key)."""
    parts = [gm.code]
    for node in gm.graph.nodes:
        val = node.meta.get("example_value")
        if node.op == "placeholder" and isinstance(val, torch.Tensor):
            # (a compiled branch is specialised on its inputs' layouts)
            parts.append(f"{tuple(val.shape)} {val.stride()} {val.dtype}")
        if node.op == "call_function":
            t = node.target
            name = f"{getattr(t, '__module__', '')}.{getattr(t, '__qualname__', t)}"
            parts.append(name if _importable(t) else f"{name}@{id(t)}")
    return "\n".join(parts)


def _importable(fn):
    mod = getattr(fn, "__module__", None)
    if not isinstance(mod, str) or not mod.startswith(("torch", "_operator", "operator")):
        return False
    return "<locals>" not in getattr(fn, "__qualname__", "<locals>")


def register_branches(true_fn, false_fn, outputs, compiler=None, compiler_name="", device=""):
    """Register a pair of branch GraphModules; the key the `kiln::cond` node names them by
    (their code, their inputs' layouts, the device and the compiler: what a compiled branch is
    specialised on)."""
    text = _describe(true_fn) + "\n---\n" + _describe(false_fn) + repr(outputs)
    text += f"\n{compiler_name} {device}"
    key = "cond_" + hashlib.sha256(text.encode()).hexdigest()[:16]
    if key not in _BRANCHES:
        _BRANCHES[key] = Branches(true_fn, false_fn, outputs, compiler)
    return key


def branches(key):
    """The branches registered under `key`."""
    entry = _BRANCHES.get(key)
    if entry is None:
        raise RuntimeError(f"kiln: torch.cond branches {key} are not registered in this process")
    return entry


def _aliases(out, operands):
    """Whether a branch output shares memory with an operand (an op result must not)."""
    if out.numel() == 0:
        return False
    ptr = out.untyped_storage().data_ptr()
    return any(o.numel() and o.untyped_storage().data_ptr() == ptr for o in operands)


def _cond_impl(pred, key, operands):
    outs = branches(key).run(pred, operands)
    return [o.clone() if _aliases(o, operands) else o.contiguous() for o in outs]


def _cond_meta(pred, key, operands):
    device = operands[0].device if operands else pred.device
    return [
        torch.empty(shape, dtype=dtype, device=device) for shape, dtype in branches(key).outputs
    ]


def _differentiable(t):
    return t.dtype.is_floating_point or t.dtype.is_complex


class _CondFunction(torch.autograd.Function):
    """Autograd of `kiln::cond` (Note [Control flow: cond as an operator])."""

    @staticmethod
    def forward(ctx, pred, key, *operands):
        ctx.key = key
        ctx.save_for_backward(pred, *operands)
        with torch._C._AutoDispatchBelowAutograd():
            outs = torch.ops.kiln.cond(pred, key, list(operands))
        for o in outs:
            if not _differentiable(o):
                ctx.mark_non_differentiable(o)
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        pred, *operands = ctx.saved_tensors
        got = torch.ops.kiln.cond_backward(pred, ctx.key, operands, list(grads))
        return (
            None,
            None,
            *[g if ctx.needs_input_grad[i + 2] else None for i, g in enumerate(got)],
        )


def _cond_autograd(pred, key, operands):
    return list(_CondFunction.apply(pred, key, *operands))


def _traced(tensors):
    """Whether the op is being recorded (a dispatch mode, proxy or meta tensors), not run."""
    if _get_current_dispatch_mode() is not None:
        return True
    return any(type(t) is not torch.Tensor or t.device.type == "meta" for t in tensors)


def _cond_backward_autograd(pred, key, operands, grads):
    if _traced([pred, *operands, *(g for g in grads if g is not None)]):
        with torch._C._AutoDispatchBelowAutograd():
            return torch.ops.kiln.cond_backward(pred, key, operands, grads)
    if torch.is_grad_enabled() and any(
        t.requires_grad for t in [*operands, *(g for g in grads if g is not None)]
    ):
        raise RuntimeError("kiln: double backward through torch.cond is not supported")
    return _vjp(branches(key).pick(pred), operands, grads)


def _vjp(fn, operands, grads):
    """The gradients of fn's outputs (weighted by `grads`) with respect to `operands`."""
    with torch.enable_grad():
        inputs = [o.detach().requires_grad_(_differentiable(o)) for o in operands]
        outs = fn(*inputs)
        pairs = [(o, g) for o, g in zip(outs, grads) if g is not None and o.requires_grad]
        wrt = [i for i in inputs if i.requires_grad]
        got = iter(())
        if pairs and wrt:
            got = iter(
                torch.autograd.grad(
                    [o for o, _ in pairs], wrt, [g for _, g in pairs], allow_unused=True
                )
            )
    result = []
    for i in inputs:
        g = next(got, None) if i.requires_grad and pairs and wrt else None
        result.append(torch.zeros_like(i) if g is None else g)
    return result


def _cond_backward_impl(pred, key, operands, grads):
    return _vjp(branches(key).pick(pred), operands, grads)


def _cond_backward_meta(pred, key, operands, grads):
    return [torch.empty_like(o) for o in operands]


def _while_impl(key, carried, additional):
    """Note [Control flow: while_loop as an operator]: the graphs are (cond_fn, body_fn)."""
    entry = branches(key)
    values = list(carried)
    while bool(entry.call(True, [*values, *additional])[0]):
        values = list(entry.call(False, [*values, *additional]))
    return [v.clone() if _aliases(v, [*carried, *additional]) else v.contiguous() for v in values]


def _while_meta(key, carried, additional):
    return [torch.empty_like(c, memory_format=torch.contiguous_format) for c in carried]


def _while_autograd(key, carried, additional):
    if torch.is_grad_enabled() and any(t.requires_grad for t in [*carried, *additional]):
        raise RuntimeError("kiln: gradients through torch.while_loop are not supported")
    with torch._C._AutoDispatchBelowAutograd():
        return torch.ops.kiln.while_loop(key, carried, additional)


# Note [Control flow: while_loop as an operator]
# `torch.while_loop(cond_fn, body_fn, carried)` is `kiln::while_loop(key, carried, additional)`:
# the two graphs are registered like cond's (cond_fn as the "true" graph, body_fn as the
# "false" one), `additional` are the tensors they read from the frame. The loop runs at run time
# (each graph compiled on its first run under a compiling backend). No gradient: the frontend
# breaks the graph when a carried or read tensor requires grad, and the operator refuses it.

_LIB.impl("while_loop", _while_impl, "CompositeExplicitAutograd")
_LIB.impl("while_loop", _while_meta, "Meta")
_LIB.impl("while_loop", _while_autograd, "Autograd")
_LIB.impl("cond", _cond_impl, "CompositeExplicitAutograd")
_LIB.impl("cond", _cond_meta, "Meta")
_LIB.impl("cond", _cond_autograd, "Autograd")
_LIB.impl("cond_backward", _cond_backward_impl, "CompositeExplicitAutograd")
_LIB.impl("cond_backward", _cond_backward_meta, "Meta")
_LIB.impl("cond_backward", _cond_backward_autograd, "Autograd")

COND = torch.ops.kiln.cond.default
COND_BACKWARD = torch.ops.kiln.cond_backward.default
WHILE_LOOP = torch.ops.kiln.while_loop.default
