"""Module hooks a compiled module's call must run: its own, and those registered globally.

Note [Modules: global hooks]
While module hooks are registered globally (register_module_forward_hook ...), a compiled
module's call runs eagerly: its own __call__ runs them once, as eager does (an OptimizedModule
is no nn.Module call of its own, so no hook runs twice). Its entries are guarded by the absence
of global hooks (GuardKind.GLOBAL_STATE), so they do not run meanwhile, and the frame is not
given up: once the hooks are removed, it compiles (or hits) again.
"""

import torch


def global_module_hooks():
    """Whether any module hook is registered globally."""
    g = torch.nn.modules.module
    return bool(
        g._global_forward_hooks
        or g._global_forward_pre_hooks
        or g._global_backward_hooks
        or g._global_backward_pre_hooks
    )


def has_hooks(mod):
    """Whether a module call runs hooks (its own, or the global module hooks)."""
    return bool(
        not isinstance(mod, torch.nn.Module)
        or mod._forward_hooks
        or mod._forward_pre_hooks
        or mod._backward_hooks
        or getattr(mod, "_backward_pre_hooks", None)
        or global_module_hooks()
    )


def hooks_run_around(mod):
    """Whether mod's hooks are forward hooks only (run in Python around its compiled forward)."""
    if not isinstance(mod, torch.nn.Module) or not (mod._forward_hooks or mod._forward_pre_hooks):
        return False
    if mod._backward_hooks or getattr(mod, "_backward_pre_hooks", None):
        return False
    if getattr(mod, "_forward_hooks_always_called", None):
        return False
    return not global_module_hooks()
