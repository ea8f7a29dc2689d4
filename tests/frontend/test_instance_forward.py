"""A module whose instance holds a plain function as its forward, compiled vs eager (Note
[Modules: which forward a call runs])."""

import types

import torch
from frontend_helpers import CountingBackend

import kiln


def _derpy():
    def ff1(x):
        self = mod1
        return torch.sigmoid(self.mod2(x) + self.param1)

    def ff2(x):
        self = mod2
        return torch.cos(torch.sin(x) * self.param2 + 10)

    mod1 = torch.nn.Module()
    mod2 = torch.nn.Module()
    mod1.register_module("mod2", mod2)
    mod1.register_parameter("param1", torch.nn.Parameter(torch.randn(10)))
    mod1.forward = ff1
    mod2.register_parameter("param2", torch.nn.Parameter(torch.randn(10)))
    mod2.forward = ff2
    return mod1.eval()


def test_a_plain_function_forward_on_the_instance():
    kiln.reset()
    mod1 = _derpy()
    x = torch.randn(10)
    backend = CountingBackend()
    compiled = kiln.compile(mod1, backend=backend, fullgraph=True)
    torch.testing.assert_close(compiled(x), mod1(x))
    assert backend.calls == 1


def test_replacing_the_instance_forward_recompiles():
    kiln.reset()
    mod = torch.nn.Module()
    mod.forward = lambda x: x + 1
    compiled = kiln.compile(mod, fullgraph=True)
    x = torch.ones(2)
    torch.testing.assert_close(compiled(x), x + 1)
    mod.forward = lambda x: x * 5
    torch.testing.assert_close(compiled(x), x * 5)


def test_replacing_a_bound_method_forward_recompiles():
    kiln.reset()
    mod = torch.nn.Module()
    mod.forward = types.MethodType(lambda self, x: x + 1, mod)
    compiled = kiln.compile(mod, fullgraph=True)
    x = torch.ones(2)
    torch.testing.assert_close(compiled(x), mod(x))
    mod.forward = types.MethodType(lambda self, x: x * 5, mod)
    torch.testing.assert_close(compiled(x), mod(x))
