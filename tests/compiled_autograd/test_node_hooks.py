"""Hooks registered on autograd nodes themselves (grad_fn.register_hook / register_prehook)."""

import torch

import kiln


def _leaf_node(param):
    return param.expand_as(param).grad_fn.next_functions[0][0]  # its AccumulateGrad


def _grads(model, x, compiled):
    model.weight.grad = None
    if compiled:
        with kiln.compiled_autograd.enable(kiln.compile(backend="eager", fullgraph=True)):
            model(x).sum().backward()
    else:
        model(x).sum().backward()
    return model.weight.grad.clone()


def test_post_hook_on_accumulate_grad_node_runs_as_in_eager():
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 4, bias=False)
    w = lin.weight
    acc = _leaf_node(w)  # (held: the parameter keeps its AccumulateGrad only weakly)
    handle = acc.register_hook(lambda *unused: setattr(w, "grad", w.grad / 4.0))
    x = torch.randn(2, 4)
    try:
        eager = _grads(lin, x, compiled=False)
        torch.testing.assert_close(_grads(lin, x, compiled=True), eager)
    finally:
        handle.remove()
    # without the hook the backward is captured again
    before = kiln.counters["compiled_autograd"]["captures"]
    torch.testing.assert_close(_grads(lin, x, compiled=True), eager * 4)
    assert kiln.counters["compiled_autograd"]["captures"] == before + 1
