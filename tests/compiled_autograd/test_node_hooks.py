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


def test_post_hook_on_accumulate_grad_node_is_captured():
    # Note [Compiled autograd: hooks on nodes]: called after the accumulation and the
    # post-accumulate-grad hooks, with eager's ((), (grad,)), inside the compiled backward
    w = torch.nn.Parameter(torch.randn(3))
    acc = _leaf_node(w)

    def run(compiled):
        seen = []
        w.grad = None
        h1 = acc.register_hook(
            lambda gi, go: seen.append(("node", gi, go[0].clone(), w.grad.clone()))
        )
        h2 = w.register_post_accumulate_grad_hook(lambda p: seen.append(("post", p.grad.clone())))
        try:
            if compiled:
                with kiln.compiled_autograd.enable(kiln.compile(backend="eager", fullgraph=True)):
                    (w * 2).sum().backward()
            else:
                (w * 2).sum().backward()
        finally:
            h1.remove()
            h2.remove()
        return seen

    kiln.reset()
    eager = run(compiled=False)
    before = dict(kiln.counters["compiled_autograd"])
    got = run(compiled=True)
    assert kiln.counters["compiled_autograd"]["captures"] == before.get("captures", 0) + 1
    assert kiln.counters["compiled_autograd"]["fallbacks"] == before.get("fallbacks", 0)
    assert [s[0] for s in got] == [s[0] for s in eager] == ["post", "node"]
    for a, b in zip(got, eager):
        for x, y in zip(a[1:], b[1:]):
            torch.testing.assert_close(x, y)


def test_pre_hook_on_a_node_runs_the_backward_eagerly():
    x = torch.randn(3, requires_grad=True)
    y = x * 2
    calls = []
    y.grad_fn.register_prehook(lambda go: calls.append(1))
    before = kiln.counters["compiled_autograd"]["fallbacks"]
    with kiln.compiled_autograd.enable(kiln.compile(backend="eager", fullgraph=True)):
        y.sum().backward()
    assert calls == [1]
    assert kiln.counters["compiled_autograd"]["fallbacks"] == before + 1
    torch.testing.assert_close(x.grad, torch.full((3,), 2.0))
