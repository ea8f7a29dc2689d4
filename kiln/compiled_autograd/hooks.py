"""Hook bookkeeping and the plain Python functions a compiled autograd graph calls at run time.

The autograd engine keeps tensor hooks inside C++ nodes, where Python cannot list them. kiln
wraps the Python entry points that register them (`Tensor.register_hook`, `Tensor.retain_grad`)
so that each hook is a `KilnHook` and each node remembers, in its `metadata` dict, which tensor
hook dicts and retained tensors belong to which of its outputs (Note [Compiled autograd: hooks]).

The graph calls `call_hook`, `accumulate_grad_`, `retain_grad_` and `call_backward`: ordinary
functions, so the graph runs as it is and a frontend can inline them.
"""

import weakref

import torch

__all__ = [
    "KilnHook",
    "install",
    "call_hook",
    "accumulate_grad_",
    "retain_grad_",
    "call_backward",
    "tensor_hooks",
    "retained",
]

# Note [Compiled autograd: hooks]
# A hook registered with `t.register_hook(h)` is stored as `KilnHook(h)` in `t._backward_hooks`
# (the OrderedDict the C++ node calls). A KilnHook calls h, except while compiled autograd is
# capturing: then the engine hands it a proxy grad and it records a `call_hook` node instead
# (`capture.py` sets `KilnHook.capturing`). For non-leaf tensors the node's `metadata` maps
# output_nr -> that dict ("kiln_hooks") and output_nr -> weakref of the retained tensor
# ("kiln_retain"); leaves are found from their AccumulateGrad node's `variable`. Hooks registered
# before kiln was imported are not KilnHooks: leaf hook dicts are re-wrapped when seen, and a
# capture that meets an unknown Python callback falls back to the eager engine.

_META_HOOKS = "kiln_hooks"
_META_RETAIN = "kiln_retain"


class KilnHook:
    """A user's tensor hook; records a `call_hook` node while compiled autograd captures."""

    __slots__ = ("fn", "__weakref__")
    capturing = None  # the active capture (set by capture.py), else None

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, grad):
        cap = KilnHook.capturing
        if cap is not None:
            return cap.on_tensor_hook(self, grad)
        return self.fn(grad)

    def __repr__(self):
        return f"KilnHook({self.fn!r})"


_orig_register_hook = torch.Tensor.register_hook
_orig_retain_grad = torch.Tensor.retain_grad
_installed = False


def _register_hook(self, hook):
    handle = _orig_register_hook(self, hook if isinstance(hook, KilnHook) else KilnHook(hook))
    if self.grad_fn is not None and self._backward_hooks is not None:
        table = self.grad_fn.metadata.setdefault(_META_HOOKS, {})
        table[self.output_nr] = self._backward_hooks
    return handle


def _retain_grad(self):
    _orig_retain_grad(self)
    if self.grad_fn is not None and self.requires_grad:
        table = self.grad_fn.metadata.setdefault(_META_RETAIN, {})
        table[self.output_nr] = weakref.ref(self)


_register_hook.__doc__ = torch.Tensor.register_hook.__doc__
_retain_grad.__doc__ = torch.Tensor.retain_grad.__doc__


def install():
    """Route Tensor.register_hook / retain_grad through kiln's bookkeeping (idempotent)."""
    global _installed
    if not _installed:
        torch.Tensor.register_hook = _register_hook
        torch.Tensor.retain_grad = _retain_grad
        _installed = True


def wrap_dict(hooks):
    """Make every hook in a tensor's hook dict a KilnHook (in place); the hooks in order."""
    if not hooks:
        return []
    values = list(hooks.values())
    for h in values:
        if type(h) is not KilnHook:
            for k, h2 in list(hooks.items()):
                if type(h2) is not KilnHook:
                    hooks[k] = KilnHook(h2)
            return list(hooks.values())
    return values


def tensor_hooks(node):
    """{output_nr: [KilnHook, ...]} of a non-leaf node (registered through kiln)."""
    table = node.metadata.get(_META_HOOKS) if node.metadata else None
    if not table:
        return {}
    out = {}
    for nr, d in table.items():
        hooks = wrap_dict(d)
        if hooks:
            out[nr] = hooks
    return out


def retained(node):
    """{output_nr: tensor} of the live tensors retaining their grad at this node's outputs."""
    table = node.metadata.get(_META_RETAIN) if node.metadata else None
    if not table:
        return {}
    out = {}
    for nr, ref in table.items():
        t = ref()
        if t is not None and t.retains_grad:
            out[nr] = t
    return out


# --- run-time functions called by the graph ------------------------------------------------------


def _same_meta(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and a.device == b.device


def call_hook(hook, *args, hook_type):
    """Run a user hook as the engine does: a tensor pre hook's None result keeps the grad."""
    if hook_type == "tensor_pre_hook":
        (grad,) = args
        out = hook.fn(grad) if isinstance(hook, KilnHook) else hook(grad)
        if out is None:
            return grad
        if not isinstance(out, torch.Tensor) or not _same_meta(out, grad):
            raise RuntimeError(
                "kiln compiled autograd: a tensor hook returned a value whose shape, dtype or "
                f"device differs from its grad's ({_meta_text(out)} vs {_meta_text(grad)}); "
                "run this backward outside kiln.compiled_autograd"
            )
        return out
    if hook_type == "post_acc_grad_hook":
        (variable,) = args
        out = hook(variable)
        if out is not None:
            raise RuntimeError("post accumulate grad hooks cannot return a value")
        return None
    if hook_type == "node_post_hook":  # on an AccumulateGrad: no grad_inputs, its grad
        (grad,) = args
        out = hook((), (grad,))
        if out is not None and len(out) != 0:
            raise RuntimeError(
                f"hook returned {len(out)} values where AccumulateGrad has no grad_inputs"
            )
        return None
    raise ValueError(f"unknown hook_type {hook_type!r}")


def _meta_text(t):
    if not isinstance(t, torch.Tensor):
        return type(t).__name__
    return f"{t.dtype}{list(t.shape)} on {t.device}"


def _non_overlapping_and_dense(t):
    if t.is_contiguous():
        return True
    dims = sorted(range(t.dim()), key=lambda d: (t.stride(d), t.size(d)))
    expected = 1
    for d in dims:
        if t.size(d) == 1:
            continue
        if t.stride(d) != expected:
            return False
        expected *= t.size(d)
    return True


def _obeys_layout_contract(grad, variable):
    """Eager's AccumulateGrad rule for stealing a grad: strides match the parameter's."""
    if grad.is_sparse or variable.is_sparse:
        return False
    if _non_overlapping_and_dense(variable):
        if not _non_overlapping_and_dense(grad):
            return False
        return all(
            s == 1 or gs == vs for s, gs, vs in zip(grad.shape, grad.stride(), variable.stride())
        )
    return grad.is_contiguous()


def _clone_obey_contract(grad, variable):
    if _non_overlapping_and_dense(variable):
        out = grad.new_empty_strided(variable.shape, variable.stride())
        return out.copy_(grad)
    return grad.clone(memory_format=torch.contiguous_format)


def accumulate_grad_(variable, grad, fresh):
    """AccumulateGrad with eager's `.grad` semantics (first assignment steals or clones; else +=).

    `fresh`: the graph computed `grad` itself (no one else holds it), so it may be stolen as eager
    steals a grad nobody else references; grads that are graph inputs or hook results are cloned.
    """
    old = variable.grad
    if old is None:
        if fresh and _obeys_layout_contract(grad, variable):
            variable.grad = grad
        else:
            variable.grad = _clone_obey_contract(grad, variable)
    elif old.is_sparse or grad.is_sparse:
        variable.grad = old + grad
    else:
        old += grad


def retain_grad_(tensor, grad):
    """What a retained non-leaf tensor's hook does with its grad."""
    if tensor.grad is None:
        tensor.grad = grad.clone(memory_format=torch.contiguous_format)
    else:
        tensor.grad = tensor.grad + grad


def call_backward(node, expected, *grads):
    """An opaque custom autograd.Function backward, coerced as the engine's validate_outputs does.

    `expected`: per output, None (no grad flows) or (shape, dtype, device) of the grad's consumer.
    """
    out = node.apply(*grads)
    if not isinstance(out, tuple):
        out = (out,)
    result = []
    for i, want in enumerate(expected):
        g = out[i] if i < len(out) else None
        if want is None:
            result.append(None)
            continue
        if g is None:
            raise RuntimeError(
                f"kiln compiled autograd: {type(node).__name__} returned None for input {i} where "
                "its capture expected a gradient; run this backward outside "
                "kiln.compiled_autograd"
            )
        shape, dtype, device = want
        if g.shape != shape:
            g = g.sum_to_size(shape)
        if g.dtype != dtype:
            g = g.to(dtype)
        if g.device != device:
            raise RuntimeError(f"invalid gradient device {g.device}, expected {device}")
        result.append(g)
    return tuple(result)
