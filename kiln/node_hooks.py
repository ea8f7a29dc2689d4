"""Which autograd nodes carry hooks registered on the node itself (grad_fn.register_hook).

Installed when kiln is imported (the helper is cheap), so that hooks registered after that are
seen; hooks registered on nodes before `import kiln` are not.
"""

import torch

# Note [Compiled autograd: hooks on nodes]
# `grad_fn.register_hook(h)` / `register_prehook(h)` (e.g. a post hook on a parameter's
# AccumulateGrad node) live in C++ lists Python cannot read. Both go through one Python helper,
# `_HookMixin._register_hook(dict, hook)`, which kiln wraps to learn that such hooks exist at all
# (`node_hooks_seen`). From then on every backward probes each node: registering a no-op hook
# returns a handle on the node's own hook dict, which shows whether the node has other hooks
# (the no-op is removed at once) and lists them. Post hooks on a parameter's AccumulateGrad are
# captured: the graph calls them after the accumulation and its post-accumulate-grad hooks, with
# eager's arguments `((), (grad,))`. Any other node hook (a pre hook, a hook on another node) makes
# the backward run on the eager engine (the hooks run where eager runs them).
node_hooks_seen = False  # set by the first hook registered on any node
_HookMixin = torch.autograd.function._HookMixin
_orig_node_register = _HookMixin.__dict__["_register_hook"].__func__


def _node_register(backward_hooks, hook):
    global node_hooks_seen
    node_hooks_seen = True
    return _orig_node_register(backward_hooks, hook)


def _probe(*args):
    return None


def node_hooks(node):
    """(pre hooks, post hooks) registered on a node itself, in registration order (Note
    [Compiled autograd: hooks on nodes])."""
    found = []
    for register in (node.register_prehook, node.register_hook):
        handle = register(_probe)
        hooks = handle.hooks_dict_ref()
        handle.remove()
        found.append(list(hooks.values()) if hooks else [])
    return tuple(found)


def install():
    """Wrap the registration helper (idempotent)."""
    if _HookMixin.__dict__["_register_hook"].__func__ is not _node_register:
        _HookMixin._register_hook = staticmethod(_node_register)
