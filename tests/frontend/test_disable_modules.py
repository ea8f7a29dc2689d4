"""kiln.disable on a module (a DisabledModule) or a module class, and kiln.compile on a module
class: disabled modules run in Python with their hooks (compiled callers break the graph there);
results equal eager's."""

import torch

import kiln


class Recording:
    """A backend that keeps the graphs it compiles and runs them as they are."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward

    def targets(self, i):
        return {n.target for n in self.graphs[i].graph.nodes if n.op == "call_function"}


class Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(torch.tanh(x))


class Outer(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.out = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.out(self.inner(torch.cos(x)) * 2)


def _doubled(mod, args):
    return (args[0] * 2,)


def test_disabled_module_instance_runs_in_python_with_its_hooks():
    torch.manual_seed(0)
    model = Outer(Inner())
    model.inner.register_forward_pre_hook(_doubled)
    x = torch.randn(3, 4)
    expected = model(x)
    model.inner = kiln.disable(model.inner)  # still a module: it can be a child
    assert isinstance(model.inner, torch.nn.Module)
    assert kiln.disable(model.inner) is model.inner
    be = Recording()
    torch.testing.assert_close(kiln.compile(model, backend=be)(x), expected)
    assert len(be.graphs) == 2  # before and after the disabled call
    assert torch.cos in be.targets(0) and torch.tanh not in be.targets(0)
    assert all(torch.tanh not in be.targets(i) for i in range(2))
    assert dict(model.state_dict()).keys() == dict(Outer(Inner()).state_dict()).keys()


def test_disabled_module_class_and_compiled_module_class():
    @kiln.disable
    class KeptOut(Inner):
        pass

    be = Recording()

    @kiln.compile(backend=be)
    class Compiled(Outer):
        pass

    torch.manual_seed(0)
    model = Compiled(KeptOut())
    model.inner.register_forward_pre_hook(_doubled)
    x = torch.randn(3, 4)
    out = model(x)
    assert len(be.graphs) == 2
    assert all(torch.tanh not in be.targets(i) for i in range(2))
    ref = Outer(Inner())
    ref.load_state_dict(model.state_dict())
    ref.inner.register_forward_pre_hook(_doubled)
    torch.testing.assert_close(out, ref(x))
    assert kiln.compile(KeptOut()).forward.__func__ is Inner.forward  # left uncompiled
