"""`aot_module`: an nn.Module compiled through aot_function, its parameters and buffers inputs."""

import torch

from kiln.autograd.aot import aot_function


class _AOTModule(torch.nn.Module):
    """aot_module's result: the original module's state, forward through aot_function."""

    def __init__(self, mod, compiled):
        super().__init__()
        self.orig_module = mod
        self._compiled = compiled

    def forward(self, *args, **kwargs):
        names, tensors = _state(self.orig_module)
        return self._compiled(tensors, args, kwargs)


def _state(mod):
    items = list(mod.named_parameters(remove_duplicate=False)) + list(
        mod.named_buffers(remove_duplicate=False)
    )
    return [n for n, _ in items], [t for _, t in items]


def _swap(mod, names, values):
    """Point the module's parameters/buffers at other tensors; returns the old ones."""
    old = []
    for name, v in zip(names, values):
        *path, attr = name.split(".")
        m = mod
        for p in path:
            m = getattr(m, p)
        table = m._parameters if attr in m._parameters else m._buffers
        old.append(table[attr])
        table[attr] = v
    return old


def aot_module(mod, fw_compiler, bw_compiler=None, partition_fn=None, decompositions=None):
    """Compile an nn.Module: parameters and buffers become graph inputs (buffers updated back)."""
    names, _ = _state(mod)

    def functional(tensors, args, kwargs):
        old = _swap(mod, names, tensors)
        try:
            return mod(*args, **kwargs)
        finally:
            _swap(mod, names, old)

    compiled = aot_function(
        functional,
        fw_compiler,
        bw_compiler,
        partition_fn=partition_fn,
        decompositions=decompositions,
    )
    return _AOTModule(mod, compiled)
