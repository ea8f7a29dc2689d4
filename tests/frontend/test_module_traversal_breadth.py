"""nn.Module traversals, comparisons and forwards in compiled code: each case compares kiln with
eager (the ideas of PyTorch's test/dynamo/test_modules.py, in our own words)."""

import types

import torch
from frontend_helpers import CountingBackend, run_and_compare

import kiln


class _Tree(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(3, 3)
        self.act = torch.nn.Tanh()
        self.again = self.first  # one module reached under two names

    def forward(self, x):
        for child in self.children():
            x = child(x)
        names = [name for name, _ in self.named_modules()]
        total = sum(p.sum() for p in self.parameters())
        return x * len(names) + total, len(list(self.modules()))


def test_children_named_modules_parameters_with_a_shared_module():
    run_and_compare(_Tree(), torch.randn(2, 3), fullgraph=True, expected_graphs=1)


def test_traversal_recompiles_when_the_sharing_changes():
    kiln.reset()
    tree = _Tree()
    backend = CountingBackend()
    fn = kiln.compile(tree, backend=backend, fullgraph=True)
    x = torch.randn(2, 3)
    assert fn(x)[1] == tree(x)[1] == 3
    tree.again = torch.nn.Linear(3, 3)  # now four distinct modules
    got, want = fn(x), tree(x)
    assert got[1] == want[1] == 4
    torch.testing.assert_close(got[0], want[0])
    assert backend.calls == 2


def _run_tree(model, x):
    return model(x)


def test_traversal_of_another_instance_reuses_the_entry():
    # Note [Sets: modules as items]: which modules are the same is guarded, not their identity
    kiln.reset()
    backend = CountingBackend()
    fn = kiln.compile(_run_tree, backend=backend, fullgraph=True)
    x = torch.randn(2, 3)
    for tree in (_Tree(), _Tree(), _Tree()):
        got, want = fn(tree, x), tree(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1] == 3
    assert backend.calls == 1
    other = _Tree()
    other.again = torch.nn.Linear(3, 3)  # another sharing: recompiles, counts four modules
    assert fn(other, x)[1] == other(x)[1] == 4 and backend.calls == 2


class _Picks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(2, 2)
        self.b = torch.nn.Linear(2, 2)

    def forward(self, x):
        out = x
        for layer in (self.a, self.b):
            out = layer(out).relu() if layer == self.a else layer(out).sigmoid()
        return out, self.a != self.b


def test_module_equality_is_identity_and_guarded():
    kiln.reset()
    mod = _Picks()
    fn = kiln.compile(mod, backend="eager", fullgraph=True)
    x = torch.randn(4, 2)
    for _ in range(2):
        got, want = fn(x), mod(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1]
        mod.b = mod.a  # the second round: the same module twice


class _Cos(torch.nn.Module):
    def forward(self, x):
        return torch.cos(x)


class _Sin(torch.nn.Module):
    def forward(self, x):
        return torch.sin(x)


_PATCHED = _Cos()


def _call_patched(x):
    return _PATCHED(x) + 1


def test_forward_set_on_the_instance_after_compiling_recompiles():
    kiln.reset()
    fn = kiln.compile(_call_patched, backend="eager", fullgraph=True)
    x = torch.randn(5)
    try:
        torch.testing.assert_close(fn(x), torch.cos(x) + 1)
        _PATCHED.forward = types.MethodType(_Sin.forward, _PATCHED)
        torch.testing.assert_close(fn(x), torch.sin(x) + 1)
        _PATCHED.forward = types.MethodType(lambda self, t: t * 3, _PATCHED)
        torch.testing.assert_close(fn(x), x * 3 + 1)
    finally:
        _PATCHED.__dict__.pop("forward", None)
    torch.testing.assert_close(fn(x), torch.cos(x) + 1)


class _Static(torch.nn.Module):
    @staticmethod
    def forward(x):
        return x * torch.sigmoid(x)


class _HoldsStatic(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = _Static()

    def forward(self, x):
        return self.inner(x) + self.inner.forward(x)


def test_staticmethod_forward_of_a_submodule():
    run_and_compare(_HoldsStatic(), torch.randn(3), fullgraph=True, expected_graphs=1)


def test_instance_forward_traced():
    mod = torch.nn.Module()
    mod.forward = types.MethodType(lambda self, t: t - 1, mod)

    def fn(x):
        return mod(x) * 2 + mod.forward(x)

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_graphs=1)
