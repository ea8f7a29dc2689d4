"""Shared oracle checks for the autograd tests: compiled vs eager outputs, grads and buffers."""

import copy

import torch

from kiln.autograd.aot import nop
from kiln.autograd.aot_module import aot_module


def flat_tensors(out):
    """The tensors of an output structure (tuples, lists, dicts, ModelOutput), in order."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in flat_tensors(o)]
    return []


def loss_of(outs):
    return sum((o.float() * (i + 1)).sum() for i, o in enumerate(outs) if o.requires_grad)


def check_module_parity(mod, *args, seed=0, rtol=1e-4, atol=1e-5, compile_fn=None, **kwargs):
    """Run mod eagerly and compiled (aot_module + nop by default); compare everything."""
    for p in mod.parameters():
        p.grad = None
    ref = copy.deepcopy(mod)
    compiled = compile_fn(mod) if compile_fn else aot_module(mod, nop)
    for step in range(2):  # the second call reuses the compiled plan
        torch.manual_seed(seed + step)
        exp = flat_tensors(ref(*args, **kwargs))
        torch.manual_seed(seed + step)
        got = flat_tensors(compiled(*args, **kwargs))
        assert len(exp) == len(got)
        for e, g in zip(exp, got):
            torch.testing.assert_close(g, e, rtol=rtol, atol=atol)
            assert g.requires_grad == e.requires_grad
        if any(e.requires_grad for e in exp):
            loss_of(exp).backward()
            loss_of(got).backward()
    params = dict(mod.named_parameters())
    for name, p in ref.named_parameters():
        q = params[name]
        if p.grad is None:
            assert q.grad is None, name
        else:
            torch.testing.assert_close(q.grad, p.grad, rtol=rtol * 10, atol=atol * 10, msg=name)
    bufs = dict(mod.named_buffers())
    for name, b in ref.named_buffers():
        torch.testing.assert_close(bufs[name], b, rtol=rtol, atol=atol, msg=name)
    return compiled
