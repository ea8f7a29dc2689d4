"""Module hooks registered globally (torch.nn.modules.module.register_module_*_hook) while
compiled modules run: each runs as eager runs it (Note [Modules: global hooks])."""

import pytest
import torch
from frontend_helpers import CountingBackend

import kiln

_module = torch.nn.modules.module


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(3, 2)

    def forward(self, x):
        return self.proj(x).tanh()


def _grads_and_seen(call, x, seen):
    seen.clear()
    x = x.detach().clone().requires_grad_(True)
    call(x).sum().backward()
    return x.grad, list(seen)


@pytest.mark.parametrize("backend", ["eager", "kiln"])
@pytest.mark.parametrize("as_module", [True, False])
def test_backward_hook_registered_after_compiling_runs(backend, as_module):
    torch.manual_seed(0)
    m = Block()
    seen = []
    if as_module:
        compiled = kiln.compile(m, backend=backend)
    else:
        compiled = kiln.compile(lambda x: m(x) * 2, backend=backend)
    plain = m if as_module else (lambda x: m(x) * 2)
    x = torch.randn(4, 3)
    _grads_and_seen(compiled, x, seen)  # compiled while no hook is registered
    handle = _module.register_module_full_backward_hook(
        lambda mod, gin, gout: seen.append(type(mod).__name__)
    )
    try:
        want = _grads_and_seen(plain, x, seen)
        got = _grads_and_seen(compiled, x, seen)
    finally:
        handle.remove()
    assert want[1] == ["Linear", "Block"]
    assert got[1] == want[1]
    torch.testing.assert_close(got[0], want[0])
    assert _grads_and_seen(compiled, x, seen)[1] == []  # removed: the compiled entry again


def test_forward_pre_hook_for_a_while_then_the_module_compiles():
    torch.manual_seed(0)
    m = Block()
    be = CountingBackend()
    compiled = kiln.compile(m, backend=be)
    calls = []
    x = torch.randn(2, 3)
    want = m(x)
    handle = _module.register_module_forward_pre_hook(
        lambda mod, args: calls.append(type(mod).__name__)
    )
    try:
        for _ in range(2):
            torch.testing.assert_close(compiled(x), want)
    finally:
        handle.remove()
    assert calls == ["Block", "Linear"] * 2  # once per module and call, as eager
    assert be.calls == 0
    torch.testing.assert_close(compiled(x), m(x))
    assert be.calls == 1  # not given up: compiled once the hook was gone


def test_graphs_kiln_runs_eagerly_are_not_hooked_modules(monkeypatch):
    monkeypatch.setattr(kiln.config, "strict", False)  # (the backend's failure: run eagerly)

    def f(x):
        return torch.sin(x) * 2 + 1

    seen = []
    handle = _module.register_module_forward_pre_hook(
        lambda mod, args: seen.append(type(mod).__name__)
    )
    x = torch.randn(5, requires_grad=True)
    try:
        with kiln.faults.inject("lowering"):
            out = kiln.compile(f, backend="kiln")(x)
        out.sum().backward()
    finally:
        handle.remove()
    torch.testing.assert_close(out, f(x))
    assert seen == []  # no nn.Module call in eager either
